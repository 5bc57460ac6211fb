"""Multi30k task 1, German-English image captions (Elliott et al. 2016):
29,000 training pairs, val (1,014) as valid, test_2016_flickr (1,000) as
fairseq's ``test`` and, where available, test_2017_flickr, test_2018_flickr
and test_2017_mscoco as ``test1``, ``test2``, ``test3`` (``testsets.tsv``
names them). A missing optional test set (not in ``--raw-dir``, download
off or failed) is named in a warning with the files to add; the raw step is
then left unstamped, so the next run looks for it again and binarises the
test sets it finds. One binarisation serves both directions (de-en and en-de: pass
``-s en -t de`` to fairseq for the latter).

Processing (Moses, as is common for this data set): punctuation
normalisation, tokenisation, lower-casing (``--keep-case`` turns it off); no
length cleaning (captions are short and every pair is kept); joint BPE with
10,000 merges.

    python -m data_prep.multi30k --raw-dir ../shared/data/multi30k   # train/val/test_2016_flickr plain, others downloaded
"""
import os
from typing import Optional, Sequence

from .common import (
    Resource,
    argument_parser,
    fetch_all,
    log_warning,
    main_guard,
    read_lines,
    require_parallel,
    require_text,
    sacrebleu_registry,
    write_lines,
)
from .translation import TRANSLATION_STEPS, RawText, TranslationConfig, add_bpe_arguments, prepare_translation

LANGS = ("de", "en")
REQUIRED = ["train", "val", "test_2016_flickr"]
EXTRA_TESTS = ["test_2017_flickr", "test_2018_flickr", "test_2017_mscoco"]
REPOSITORY = "multi30k/dataset"
RAW_PATH = "data/task1/raw"


def _sacrebleu_md5(file_name: str) -> Optional[str]:
    """The md5 sacreBLEU publishes for this file of the repository, if any."""
    for url, md5 in sacrebleu_registry("Multi30k's checksums (sacreBLEU's registry)"):
        if url.endswith(f"/{RAW_PATH}/{file_name}"):
            return md5
    return None


def resource(name: str, lang: str, optional: bool) -> Resource:
    file_name = f"{name}.{lang}.gz"
    md5 = _sacrebleu_md5(file_name)
    return Resource(
        name=file_name, members=[f"{name}.{lang}"], optional=optional, md5=md5,
        checksum_source="sacreBLEU's dataset table" if md5 else "",
        urls=[f"https://raw.githubusercontent.com/{REPOSITORY}/master/{RAW_PATH}/{file_name}",
              f"https://github.com/{REPOSITORY}/raw/master/{RAW_PATH}/{file_name}",
              f"https://cdn.jsdelivr.net/gh/{REPOSITORY}@master/{RAW_PATH}/{file_name}"],
    )


def prepare(args) -> str:
    config = TranslationConfig(
        src="de", tgt="en", test_sets=[], moses_train=dict(normalize_punctuation=True),
        moses_eval=dict(normalize_punctuation=True), lowercase=not args.keep_case, clean_stage=None, bpe_merges=args.bpe_merges,
    )

    def write_raw(raw_dir: str):
        resources = [resource(name, lang, name not in REQUIRED) for name in REQUIRED + EXTRA_TESTS for lang in LANGS]
        failed = []  # optional files whose download failed
        files = fetch_all(resources, args, skipped=failed)
        tests = ["test_2016_flickr"] + [name for name in EXTRA_TESTS if all(f"{name}.{lang}" in files for lang in LANGS)]
        missing = [name for name in EXTRA_TESTS if name not in tests]
        if missing:
            names = ", ".join(f"{name}.{lang}(.gz)" for name in missing for lang in LANGS if f"{name}.{lang}" not in files)
            why = f"download failed: {', '.join(failed)}" if failed else (
                "not in --raw-dir and downloading is off" if args.no_download else "not found")
            # one line: having test 2016 only is the common case of an offline preparation
            log_warning(f"Multi30k test sets missing: {', '.join(missing)} ({why}); going on with {', '.join(tests)}; to add "
                 f"them put their .{'/.'.join(LANGS)}(.gz) files from https://github.com/{REPOSITORY}/tree/master/{RAW_PATH} "
                 "in --raw-dir or rerun with network access (the next run adds what it finds)")
        for lang in LANGS:  # subword-nmt would crash on it, deep inside learn_bpe
            require_text(files[f"train.{lang}"], "the training split needs at least one sentence")
        for name in ["train", "val", *tests]:
            require_parallel(f"Multi30k {name}", {files[f"{name}.{lang}"]: sum(1 for _ in read_lines(files[f"{name}.{lang}"]))
                                                  for lang in LANGS})
        for name in ["train", "val", *tests]:
            for lang in LANGS:
                split = "valid" if name == "val" else name
                write_lines(os.path.join(raw_dir, f"{split}.{lang}"), read_lines(files[f"{name}.{lang}"]))
        return RawText(tests, complete=not missing)

    return prepare_translation(args, config, write_raw, {"release": REPOSITORY})


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argument_parser("multi30k", __doc__, "work_dirs/data-bin/multi30k.de-en", TRANSLATION_STEPS)
    add_bpe_arguments(parser, merges=10000)
    parser.add_argument("--keep-case", action="store_true", help="do not lower-case")
    return main_guard(prepare, parser, argv)


if __name__ == "__main__":
    main()
