"""English-German WMT preparation shared by ``wmt14_en_de`` and ``wmt17_en_de``,
after fairseq's examples/translation/prepare-wmt14en2de.sh:

* train: the parallel corpora concatenated, Moses normalize-punctuation,
  remove-non-printing-char and tokenizer with aggressive dash splitting
  (``-a``: ``@-@``), no lower-casing;
* valid and test: the ``<seg>`` lines of the newstest SGML files, ’ replaced
  by ', tokenised with ``-a`` (no punctuation normalisation, as there);
* joint BPE (subword-nmt) learnt on train en + de and applied to every split,
  then clean-corpus (1 to 250 tokens, ratio 1.5) on the BPE'd training pairs;
  or, with ``--bpe sentencepiece``, a joint sentencepiece BPE model on the
  untokenised text, every split (train, valid and test alike) through
  normalize-punctuation and remove-non-printing-char;
* one joined dictionary; ``refs/`` holds the references exactly as sacreBLEU
  reads the SGML files, so the recipe's sacreBLEU equals ``sacrebleu -t``.

Unlike fairseq's script (valid = every 100th training pair), valid is the
previous year's newstest, as in the papers.

Dev and test archives are sacreBLEU's: their URLs and md5 checksums come from
the installed sacreBLEU's dataset registry (``sacrebleu.dataset.DATASETS``)
and are verified. Every other location the registry gives for a file of the
same md5 is a mirror (sacreBLEU 2.6.0, the pinned version, gives one
location per archive; the statmt.org ones are also tried on www.statmt.org). In ``--raw-dir`` an
archive is found under its official name (``test-full.tgz``; ``test.tgz``,
the name of several years' archives, is told apart by its md5), under
sacreBLEU's name for it (``wmt14_full.test-full.tgz``, ``wmt16.test.tgz``)
or under ours (``wmt14-full-test.tgz``), or as its extracted SGML files.
"""
import os
from typing import List, Sequence, Tuple

from .common import Resource, argument_parser, fetch_all, main_guard, read_lines, require, sacrebleu_registry, write_lines
from .text import reference_segments, sgm_segments
from .translation import TRANSLATION_STEPS, TranslationConfig, add_bpe_arguments, prepare_translation

SRC, TGT = "en", "de"


def statmt(path: str) -> List[str]:
    """An archive on statmt.org: the address the fairseq scripts use, then the www host over https."""
    return [f"http://statmt.org/{path}", f"https://www.statmt.org/{path}"]


# Official names that several years' WMT archives have (wmt13, wmt16 and wmt17's test.tgz).
SHARED_NAMES = ("test.tgz",)


def corpus(name: str, urls: Sequence[str], prefix: str) -> Resource:
    return Resource(name=name, urls=urls, members=[f"{prefix}.{SRC}", f"{prefix}.{TGT}"])


EUROPARL_V7 = corpus("training-parallel-europarl-v7.tgz", statmt("wmt13/training-parallel-europarl-v7.tgz"), "europarl-v7.de-en")
COMMONCRAWL = corpus("training-parallel-commoncrawl.tgz", statmt("wmt13/training-parallel-commoncrawl.tgz"), "commoncrawl.de-en")


def sacrebleu_test(key: str, name: str) -> Tuple[Resource, str, str]:
    """The en-de source and reference SGML files of sacreBLEU's test set ``key``,
    with sacreBLEU's URL, its published md5 and the names the archive may have
    in ``--raw-dir``. Returns (resource, src file, ref file)."""
    sacrebleu = require("sacrebleu", "sacrebleu", "the WMT test sets (sacreBLEU's registry)")
    datasets = require("sacrebleu.dataset", "sacrebleu", "the WMT test sets (sacreBLEU's registry)").DATASETS
    dataset = datasets[key]
    src_file, ref_file = (os.path.basename(p) for p in dataset.langpairs["en-de"][:2])
    url, md5 = dataset.data[0], dataset.md5[0]
    # mirrors: any other location the registry publishes for a file of this md5
    same_file = [u for u, m in sacrebleu_registry("the WMT test sets (sacreBLEU's registry)") if m == md5]
    urls = list(dict.fromkeys([url, *same_file, url.replace("https://statmt.org", "http://www.statmt.org")]))
    official = os.path.basename(url)
    sacrebleu_name = f"{key.replace('/', '_')}.{official}"  # where sacreBLEU keeps it (~/.sacrebleu/<key>/raw/)
    resource = Resource(
        name=name, urls=urls, members=[src_file, ref_file], md5=md5,
        checksum_source=f"sacreBLEU {sacrebleu.__version__}'s dataset registry, sacrebleu.dataset.DATASETS[{key!r}]",
        # test.tgz is the name of several years' archives: only a test.tgz with this md5 is this one
        raw_names=([] if official in SHARED_NAMES else [official]) + [sacrebleu_name],
        shared_raw_names=[official] if official in SHARED_NAMES else [],
    )
    return resource, src_file, ref_file


def prepare_wmt(args, train: Sequence[Resource], valid_key: str, test_key: str, published_dict_size=None,
                notes: Sequence[str] = ()) -> str:
    valid, valid_src, valid_ref = sacrebleu_test(valid_key, f"{valid_key.replace('/', '-')}-test.tgz")
    test, test_src, test_ref = sacrebleu_test(test_key, f"{test_key.replace('/', '-')}-test.tgz")
    config = TranslationConfig(
        src=SRC, tgt=TGT, test_sets=["test"],
        moses_train=dict(aggressive_dashes=True, normalize_punctuation=True, remove_non_printing=True),
        moses_eval=dict(aggressive_dashes=True), clean_stage="bpe", clean_max=250, clean_ratio=1.5,
        bpe=getattr(args, "bpe", "subword-nmt"), bpe_merges=args.bpe_merges, spm_vocab_size=getattr(args, "spm_vocab_size", 32000),
        published_dict_size=published_dict_size, notes=list(notes),
    )
    if config.bpe == "sentencepiece":  # no Moses tokens, no cleaning on token counts of pieces beyond 250;
        # the model is learnt on normalised text, so every split it encodes is normalised alike
        config.moses_train = dict(normalize_punctuation=True, remove_non_printing=True)
        config.moses_eval = dict(config.moses_train)

    def write_raw(raw_dir: str):
        files = fetch_all([*train, valid, test], args)
        for lang in (SRC, TGT):
            paths = [files[member] for resource in train for member in resource.members if member.endswith("." + lang)]
            write_lines(os.path.join(raw_dir, f"train.{lang}"), (line for path in paths for line in read_lines(path)))
        for split, src_file, ref_file in (("valid", valid_src, valid_ref), ("test", test_src, test_ref)):
            for lang, member in ((SRC, src_file), (TGT, ref_file)):
                write_lines(os.path.join(raw_dir, f"{split}.{lang}"), sgm_segments(files[member]))
                write_lines(os.path.join(os.path.dirname(raw_dir), "refs", f"{split}.{lang}"), reference_segments(files[member]))

    return prepare_translation(args, config, write_raw, {"train": [r.name for r in train], "valid": valid_key, "test": test_key})


def wmt_main(name: str, doc: str, default_dest: str, merges: int, prepare, argv) -> str:
    parser = argument_parser(name, doc, default_dest, TRANSLATION_STEPS)
    add_bpe_arguments(parser, merges=merges, sentencepiece=True)
    return main_guard(prepare, parser, argv)

