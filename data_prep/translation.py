"""The shared path of every translation preparation:

    raw text -> Moses -> (clean) -> (lowercase) -> train/valid/test -> joint BPE
    -> (clean) -> fairseq-preprocess --joined-dictionary

A dataset module fetches its release, writes plain text ``raw/{split}.{lang}``
(one sentence per line: train, valid unless held out of train, and one file
per test set; optionally ``refs/{test set}.{lang}``, the text sacreBLEU reads
from the same file) and describes its standard processing with
``TranslationConfig``.

Besides the binaries, the destination folder gets ``code`` (the BPE codes) or
``spm.model``, ``refs/<subset>.<tgt>`` (the untokenised references of every
test subset, for sacreBLEU), ``testsets.tsv`` (fairseq subset -> test set name)
and ``prepare.json`` (the settings used)."""
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from .common import (Steps, binarize, count_lines, invalid_utf8_params, log, read_lines, require_parallel, write_json,
                     write_lines)
from .text import (
    MosesPipeline,
    apply_bpe,
    apply_sentencepiece,
    clean_corpus,
    concatenate,
    dictionary_size,
    learn_bpe,
    line_count_report,
    map_file,
    moses_file,
    split_every,
    train_sentencepiece,
)


TRANSLATION_STEPS = ("raw", "tokenize", "text", "learn_bpe", "apply_bpe", "binarize")


@dataclass
class TranslationConfig:
    src: str
    tgt: str
    test_sets: Sequence[str]                    # raw/<name>.<lang>; the first is fairseq's "test" (write_raw may decide)
    moses_train: dict = field(default_factory=dict)   # MosesPipeline options for train
    moses_eval: dict = field(default_factory=dict)    # ... for valid and test
    lowercase: bool = False                      # after cleaning (lowercase.perl)
    clean_stage: Optional[str] = "tokenized"     # "tokenized", "bpe" or None
    clean_min: int = 1
    clean_max: int = 175
    clean_ratio: float = 1.5
    valid_every: Optional[int] = None            # valid = every N-th training pair (else raw/valid.*)
    bpe: str = "subword-nmt"                     # or "sentencepiece" (on untokenised text)
    bpe_merges: int = 10000
    spm_vocab_size: int = 32000
    published_dict_size: Optional[int] = None    # printed next to ours
    notes: List[str] = field(default_factory=list)

    @property
    def langs(self):
        return (self.src, self.tgt)


@dataclass
class RawText:
    """What ``write_raw`` may return: the test sets it wrote, in order, and
    whether that is all it can ever find (``complete=False``: an optional test
    set is missing now, e.g. its download failed; the raw step is then not
    stamped, so the next run looks for it again, and a test set found later
    reaches the binaries)."""

    test_sets: Sequence[str]
    complete: bool = True


def add_bpe_arguments(parser, merges: int, sentencepiece: bool = False) -> None:
    """The BPE options; ``sentencepiece``: ``--bpe`` chooses between the two, and an option of the one not chosen,
    typed, is refused (``common.check_arguments``: it would be ignored)."""
    only = " (--bpe subword-nmt only)" if sentencepiece else ""
    parser.add_argument("--bpe-merges", type=int, default=merges, help=f"subword-nmt merge operations (joint BPE){only}")
    if sentencepiece:
        parser.add_argument("--bpe", choices=["subword-nmt", "sentencepiece"], default="subword-nmt",
                            help="joint subword-nmt BPE on Moses tokens, or a joint sentencepiece BPE model on raw text")
        parser.add_argument("--spm-vocab-size", type=int, default=32000,
                            help="sentencepiece vocabulary size (--bpe sentencepiece only)")


def prepare_translation(args, config: TranslationConfig, write_raw: Callable[[str], None], raw_step_params: dict) -> str:
    """Run the whole path. ``write_raw(raw_dir)`` fetches the release and writes
    the raw text files; it may return the test sets it found (default:
    ``config.test_sets``), as a list or a ``RawText``."""
    work, dest = args.work_dir, args.dest
    src, tgt = config.langs
    sentencepiece = config.bpe == "sentencepiece"
    steps = Steps(work, TRANSLATION_STEPS, stop_after=args.stop_after)
    path = lambda stage, split, lang: os.path.join(work, stage, f"{split}.{lang}")  # noqa: E731
    test_list = os.path.join(work, "raw", "test_sets.txt")

    def raw():
        result = write_raw(os.path.join(work, "raw"))
        complete = True
        if isinstance(result, RawText):
            names, complete = list(result.test_sets), result.complete
        else:
            names = result or config.test_sets
        for split in first_splits + list(names):  # (the datasets check their release files; this, what they wrote)
            require_parallel(f"the {split} split", {path("raw", split, lang): count_lines(path("raw", split, lang))
                                                    for lang in config.langs})
        write_lines(test_list, names)
        return None if complete else Steps.NO_STAMP

    first_splits = ["train"] + ([] if config.valid_every else ["valid"])
    steps.run("raw", [path("raw", s, l) for s in first_splits for l in config.langs] + [test_list], raw, track_inputs=True,
              raw_dir=os.path.abspath(args.raw_dir) if args.raw_dir else None, **raw_step_params,
              **invalid_utf8_params(args))
    config.test_sets = list(read_lines(test_list))
    splits = first_splits + config.test_sets
    final_splits = ["train", "valid", *config.test_sets]

    def tokenize(split: str):  # one stamp per split: a killed run redoes only the split it was in
        for lang in config.langs:
            options = dict(config.moses_train if split == "train" else config.moses_eval)
            if sentencepiece:
                options["tokenize"] = False
            moses_file(path("raw", split, lang), path("tok", split, lang), MosesPipeline(lang, **options), args.workers)
        line_count_report([path("tok", split, src)])

    steps.run_each("tokenize", splits, lambda split: [path("tok", split, l) for l in config.langs], tokenize,
                   moses_train=config.moses_train, moses_eval=config.moses_eval, sentencepiece=sentencepiece)

    def clean_train(stage_in: str, stage_out: str, suffix: str = ""):
        clean_corpus(path(stage_in, "train" + suffix, src), path(stage_in, "train" + suffix, tgt), path(stage_out, "train", src),
                     path(stage_out, "train", tgt), config.clean_min, config.clean_max, config.clean_ratio)

    def text():
        train_stage = "tok"
        if config.clean_stage == "tokenized":
            clean_train("tok", "clean")
            train_stage = "clean"
        lower = MosesPipeline("en", tokenize=False, lowercase=True)
        for lang in config.langs:
            train_file = path("text", "train.all", lang)
            if config.lowercase:
                map_file(lower, [path(train_stage, "train", lang)], train_file)
            else:
                concatenate([path(train_stage, "train", lang)], train_file)
            if config.valid_every:
                split_every(train_file, config.valid_every, path("text", "valid", lang), path("text", "train", lang))
                os.remove(train_file)
            else:
                os.replace(train_file, path("text", "train", lang))
            for split in splits[1:]:
                if config.lowercase:
                    map_file(lower, [path("tok", split, lang)], path("text", split, lang))
                else:
                    concatenate([path("tok", split, lang)], path("text", split, lang))
        line_count_report([path("text", s, src) for s in final_splits])

    steps.run("text", [path("text", s, l) for s in final_splits for l in config.langs], text,
              clean=config.clean_stage, clean_min=config.clean_min, clean_max=config.clean_max, ratio=config.clean_ratio,
              lowercase=config.lowercase, valid_every=config.valid_every)

    codes = os.path.join(work, "bpe", "spm.model" if sentencepiece else "code")
    if sentencepiece:
        prefix = codes[: -len(".model")]
        steps.run("learn_bpe", [codes], lambda: train_sentencepiece([path("text", "train", l) for l in config.langs], prefix,
                                                                    config.spm_vocab_size), vocab=config.spm_vocab_size)
    else:
        steps.run("learn_bpe", [codes], lambda: learn_bpe([path("text", "train", l) for l in config.langs], codes,
                                                          config.bpe_merges, args.workers), merges=config.bpe_merges)

    def encode(split: str):  # one stamp per split, as tokenize
        clean_after = config.clean_stage == "bpe" and split == "train"
        for lang in config.langs:
            target = path("bpe", "train.unclean" if clean_after else split, lang)
            if sentencepiece:
                apply_sentencepiece(codes, path("text", split, lang), target)
            else:
                apply_bpe(codes, path("text", split, lang), target, args.workers)
        if clean_after:
            clean_train("bpe", "bpe", suffix=".unclean")

    steps.run_each("apply_bpe", final_splits, lambda split: [path("bpe", split, l) for l in config.langs], encode,
                   clean=config.clean_stage, clean_max=config.clean_max)

    def complete(staging: str):  # the destination's other files, written before it is renamed into place
        os.makedirs(os.path.join(staging, "refs"))
        subsets = [("test" if i == 0 else f"test{i}", name) for i, name in enumerate(config.test_sets)]
        for subset, name in subsets:
            for lang in config.langs:  # sacreBLEU's reading of the file where write_raw gave one, else the raw text
                ref = path("refs", name, lang)
                shutil.copyfile(ref if os.path.exists(ref) else path("raw", name, lang),
                                os.path.join(staging, "refs", f"{subset}.{lang}"))
        write_lines(os.path.join(staging, "testsets.tsv"), [f"{subset}\t{name}" for subset, name in subsets])
        shutil.copyfile(codes, os.path.join(staging, os.path.basename(codes)))
        write_json(os.path.join(staging, "prepare.json"), {"dataset": os.path.basename(dest.rstrip("/")), **asdict(config)},
                   sort_keys=True)

    def binarise():
        tests = ",".join(os.path.join(work, "bpe", name) for name in config.test_sets)
        binarize(dest, os.path.join(work, "bpe", "train"), os.path.join(work, "bpe", "valid"), tests, src, tgt,
                 joined=True, workers=args.workers, complete=complete)
        size = dictionary_size(dest, src)
        published = f" (the paper reports {config.published_dict_size})" if config.published_dict_size else ""
        log(f"joint dictionary: {size} entries{published}")

    # the test sets are part of the fingerprint: a test set found by a later run is binarised
    steps.run("binarize", [os.path.join(dest, name) for name in (f"dict.{src}.txt", "testsets.tsv", "prepare.json")], binarise,
              dest=os.path.abspath(dest), test_sets=list(config.test_sets))
    for note in config.notes:
        log(f"note: {note}")
    return dest


def write_parallel(raw_dir: str, name: str, sides: Dict[str, Sequence[str]]) -> None:
    """raw/<name>.<lang> for every language; all sides must have the same length."""
    require_parallel(name, {os.path.join(raw_dir, f"{name}.{lang}"): len(lines) for lang, lines in sides.items()})
    for lang, lines in sides.items():
        write_lines(os.path.join(raw_dir, f"{name}.{lang}"), lines)
