"""Syntax hints of BET(SG) (Sha et al. 2022) for a tokenised target text.

    python data_prep/syntax_hints.py --input work/train.en --output data-bin/train.de-en.en.hints \\
        --spacy-model /work/runs/parser_en_ewt/model-best --bpe subword-nmt

``--input`` is the exact text given to fairseq-preprocess (tokenised, BPE'd,
one sentence per line); ``--output`` the hint dataset's prefix, normally
``hint_dataset_prefix(destdir, split, src, tgt)`` (``{destdir}/{split}.{src}-{tgt}.{tgt}.hints``,
or ``{destdir}/{split}.hints`` for a language model). The values and the rule
are described in ``fairseq_plugins/data/syntax_hints.py``.

Every line is split into tokens as fairseq does, the subword tokens are joined
into words (``--bpe``), and the words are parsed as they are: a spaCy ``Doc``
built from them goes through the pipeline's components up to its dependency
parser (no re-tokenisation; later components are switched off). The model is
an installed spaCy package (``python -m spacy download en_core_web_sm``) or a
folder, e.g. ``model-best`` of ``data_prep/train_parser.sh``.

The text is read as the preparations read theirs (``data_prep.common.read_lines``):
invalid UTF-8 is an error naming the file, line and byte, or with
``--invalid-utf8 replace`` U+FFFD and a warning with the counts.

Large corpora: the lines are parsed in shards of ``--shard-lines`` that are
written (atomically) into ``--work-dir``; a rerun skips finished shards, the
shards are merged into ``--output``.{bin,idx} at the end and checked against
the text (n + 1 values for a line of n tokens; an empty line gets the
end-of-sentence value only). ``--output``.info.json records the input, the
model and summary numbers; a rerun with the same input, model and ``--bpe`` is
a no-op. ``--text-dump FILE`` follows the hints: an existing FILE is kept only
when it is the dump of these hints (its sha256 is recorded in the info.json),
otherwise (a dump of another split, of older hints) it is written again.
"""
import argparse
import hashlib
import itertools
import json
import os
import shutil
import sys
import time
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as a script: python data_prep/syntax_hints.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from data_prep.common import (  # noqa: E402
    PrepError,
    add_invalid_utf8_argument,
    configure_logging,
    exclusive,
    fail,
    fail_for_missing_module,
    file_digest,
    log,
    log_warning,
    progress,
    read_lines,
    require,
    write_json,
    write_lines,
)
from fairseq_plugins.data.subword_markers import BPE_STYLES, SENTENCEPIECE_WORD_START, SUBWORD_NMT_CONTINUATION  # noqa: E402


# ------------------------------------------------------------------ main ---
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the option help, the module docstring as it is written."""


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python data_prep/syntax_hints.py", description=__doc__,
        formatter_class=_Formatter,
    )
    parser.add_argument("--input", required=True, help="tokenised (BPE'd) target text, one sentence per line, "
                        "exactly as given to fairseq-preprocess")
    parser.add_argument("--output", required=True, help="prefix of the hint dataset (writes PREFIX.bin/.idx/.info.json)")
    parser.add_argument("--spacy-model", required=True, help="installed spaCy pipeline name or folder "
                        "(e.g. OUTPUT_DIR/model-best of data_prep/train_parser.sh) with a dependency parser")
    parser.add_argument("--bpe", choices=BPE_STYLES, default="none",
                        help="subword markers of the input: subword-nmt ('@@ ' continuations), sentencepiece "
                        f"('{SENTENCEPIECE_WORD_START}' word starts) or none (every token is a word)")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences per nlp.pipe batch")
    parser.add_argument("--n-process", type=int, default=1, help="processes for nlp.pipe")
    parser.add_argument("--shard-lines", type=int, default=50000, help="lines per resumable shard")
    parser.add_argument("--work-dir", help="shards of an unfinished run (default: PREFIX.work; removed when done)")
    parser.add_argument("--text-dump", metavar="FILE", help="also write the distances as text, one line per sentence "
                        "(an existing FILE is written again unless it is the dump of these hints)")
    add_invalid_utf8_argument(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> str:
    args = argument_parser().parse_args(argv)
    configure_logging()
    try:
        from data_prep.syntax_hints import extract  # (run as __main__, this module stops before defining it)
    except ModuleNotFoundError as error:  # a one-line error naming the package to install
        fail_for_missing_module(error, "data_prep/syntax_hints.py")
    try:
        output = extract(args)
    except PrepError as error:
        fail(error)
    log(f"ready: {output}.bin/.idx")
    return output


if __name__ == "__main__":  # before the imports below (numpy, fairseq, torch): --help needs none of them
    main()
    sys.exit(0)

import numpy as np  # noqa: E402
from fairseq.tokenizer import tokenize_line  # noqa: E402

from fairseq_plugins.data.syntax_hints import (  # noqa: E402
    HintDataError,
    check_parallel,
    hint_dataset_exists,
    hint_distances,
    load_hint_dataset,
    subword_words,
    write_hint_dataset,
)

# Bump when the hint values of the same input and parser change (the rule, the word mapping).
HINT_RULE_VERSION = 1
INSTALL_HINT = "pip install -c constraints.txt -r requirements.txt"


# ------------------------------------------------------------------ text ---
def tokenize(line: str) -> List[str]:
    """The tokens fairseq-preprocess makes of ``line`` (``fairseq.tokenizer.tokenize_line``)."""
    return tokenize_line(line)


def read_text(path: str, invalid_utf8: str = "error", warn: bool = True) -> Iterator[str]:
    """The lines of ``path`` as fairseq-preprocess splits them (universal newlines), through the
    preparations' reader: invalid UTF-8 follows the same ``--invalid-utf8`` policy."""
    return read_lines(path, invalid_utf8=invalid_utf8, universal_newlines=True, warn=warn)


def line_words(tokens: Sequence[str], bpe: str, line_number: int) -> Tuple[List[str], List[int]]:
    """``subword_words`` with errors naming the line; with ``--bpe none`` a token
    carrying a subword marker is an error (the hints would silently be per token)."""
    if bpe == "none":
        for token in tokens:
            if token.endswith(SUBWORD_NMT_CONTINUATION) or token.startswith(SENTENCEPIECE_WORD_START):
                style = "subword-nmt" if token.endswith(SUBWORD_NMT_CONTINUATION) else "sentencepiece"
                raise PrepError(f"line {line_number}: token {token!r} carries a {style} marker but --bpe is none; "
                                f"pass --bpe {style}")
    try:
        return subword_words(tokens, bpe)
    except HintDataError as error:
        raise PrepError(f"line {line_number}: {error}") from None


# ----------------------------------------------------------------- spaCy ---
def model_fingerprint(model: str) -> str:
    """What identifies a model: its package name and version, or the sha256 of its folder's files."""
    spacy = require("spacy", "spacy", "syntax hints")
    if os.path.isdir(model):
        digest = hashlib.sha256()
        for directory, subdirs, files in os.walk(model):
            subdirs.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, model).encode() + b"\0")
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
        return f"folder sha256 {digest.hexdigest()}"
    if spacy.util.is_package(model):
        return f"package {model} {spacy.util.get_package_version(model)}"
    if os.sep in model or model.startswith("."):
        raise PrepError(
            f"--spacy-model {model}: no such folder (nor an installed spaCy package). Train a parser offline with "
            "`data_prep/train_parser.sh TRAIN.conllu DEV.conllu OUTPUT_DIR` and pass OUTPUT_DIR/model-best, or "
            "install a pretrained pipeline with `python -m spacy download NAME` (needs internet) and pass NAME"
        )
    raise PrepError(
        f"--spacy-model {model!r} is neither an installed spaCy package nor a folder. Install a pretrained "
        f"pipeline with `python -m spacy download {model}` (needs internet), or train a parser offline with "
        "`data_prep/train_parser.sh TRAIN.conllu DEV.conllu OUTPUT_DIR` and pass --spacy-model OUTPUT_DIR/model-best"
    )


def load_parser(model: str):
    """``spacy.load(model)`` with only the components up to its dependency parser enabled."""
    spacy = require("spacy", "spacy", "syntax hints")
    from spacy.pipeline import DependencyParser

    model_fingerprint(model)  # the error for a model that is not there
    if os.path.isdir(model) and not os.path.exists(os.path.join(model, "config.cfg")):
        inner = [name for name in ("model-best", "model-last") if os.path.isdir(os.path.join(model, name))]
        hint = f"; did you mean {os.path.join(model, inner[0])}?" if inner else ""
        raise PrepError(f"--spacy-model {model} is not a spaCy pipeline folder (no config.cfg){hint}")
    try:
        nlp = spacy.load(model)
    except Exception as error:  # spaCy raises OSError, ValueError, KeyError... for broken or foreign folders
        raise PrepError(f"--spacy-model {model}: spaCy could not load it: {error}") from None
    parsers = [name for name, pipe in nlp.pipeline if isinstance(pipe, DependencyParser)]
    if not parsers:
        raise PrepError(f"--spacy-model {model} has no dependency parser (its pipeline: {nlp.pipe_names or 'empty'}); "
                        "use a pipeline with a 'parser' component, e.g. one trained with data_prep/train_parser.sh")
    if len(parsers) > 1:
        raise PrepError(f"--spacy-model {model} has several dependency parsers ({', '.join(parsers)}); "
                        "which one gives the hints is ambiguous")
    keep = nlp.pipe_names[: nlp.pipe_names.index(parsers[0]) + 1]
    nlp.select_pipes(enable=keep)
    log(f"spaCy model {model}: running {', '.join(keep)}")
    return nlp


def doc_heads(doc, words: Sequence[str]) -> List[int]:
    """The head of every word of a parsed ``doc`` built from ``words`` (a root is its own head)."""
    if len(doc) != len(words) or any(token.text != word for token, word in zip(doc, words)):
        raise PrepError(f"the spaCy pipeline changed the words {list(words)} into {[t.text for t in doc]}; "
                        "hints need one head per word (remove retokenising components before the parser)")
    if not doc.has_annotation("DEP"):
        raise PrepError(f"the spaCy pipeline left {list(words)} without a dependency parse")
    return [token.head.i for token in doc]


def doc_hint_distances(doc, words: Sequence[str], word_of: Sequence[int]) -> List[int]:
    """The n + 1 hint distances of a line whose ``words`` were parsed into ``doc``."""
    return hint_distances(word_of, doc_heads(doc, words))


def parse_lines(nlp, lines: Iterable[str], bpe: str, first_line: int = 1, batch_size: int = 256,
                n_process: int = 1) -> Iterator[List[int]]:
    """The hint distances of every line (``first_line``: the 1-based number of the first, for errors)."""
    from spacy.tokens import Doc

    prepared = []
    for number, line in enumerate(lines, first_line):
        words, word_of = line_words(tokenize(line), bpe, number)
        prepared.append((words, word_of))
    docs = nlp.pipe((Doc(nlp.vocab, words=words) for words, _ in prepared if words),
                    batch_size=batch_size, n_process=n_process)
    for words, word_of in prepared:
        yield doc_hint_distances(next(docs), words, word_of) if words else [0]


# ---------------------------------------------------------------- shards ---
def shard_prefix(work_dir: str, index: int) -> str:
    return os.path.join(work_dir, f"shard-{index:05d}")


def shard_done(prefix: str, token_counts: Sequence[int]) -> bool:
    """A finished shard (written atomically) whose sizes match its lines."""
    if not hint_dataset_exists(prefix):
        return False
    try:
        dataset = load_hint_dataset(prefix)
    except HintDataError:  # damaged (e.g. the disk filled up): parse the shard again
        return False
    sizes = np.array(dataset.sizes)  # a copy: the sizes live in the index's mmap, closed with the dataset
    del dataset
    return len(sizes) == len(token_counts) and bool((sizes == np.asarray(token_counts) + 1).all())


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def info_path(output: str) -> str:
    return output + ".info.json"


def read_summary(output: str) -> dict:
    """The counts (Summary.as_dict) that extract() recorded for the hint dataset at prefix ``output``."""
    info = read_json(info_path(output))
    if info is None or not isinstance(info.get("summary"), dict):
        raise PrepError(f"{info_path(output)}: missing or without a 'summary' (written by data_prep/syntax_hints.py "
                        "when it finishes); rerun it for this split")
    return info["summary"]


def write_text_dump(output: str, path: str) -> str:
    """Write the hints at prefix ``output`` as text to ``path``; returns the dump's sha256 (the info.json of the
    hints records it, so that a later run knows whether a dump is the one of these hints)."""
    hints = load_hint_dataset(output)
    write_lines(path, (" ".join(map(str, hints[i].tolist())) for i in range(len(hints))))
    log(f"text dump: {path}")
    return file_digest(path)


def keep_or_write_text_dump(output: str, path: str, info: dict) -> None:
    """``--text-dump`` of hints that are up to date: a file at ``path`` is kept only when it is their dump (by its
    content: a dump of another split, of older hints or edited since is written again), and ``info`` (their
    info.json) then records the new dump."""
    if os.path.isfile(path) and file_digest(path) == info.get("text_dump_sha256"):
        log(f"text dump {path}: up to date (the dump of these hints)")
        return
    if os.path.exists(path):
        log(f"text dump {path}: not the dump of {output}.bin/.idx; writing it again")
    info["text_dump_sha256"] = write_text_dump(output, path)
    write_json(info_path(output), info, indent=2, sort_keys=True)


class Summary:
    """Counts over the merged sentences (the end-of-sentence values left out)."""

    def __init__(self):
        self.sentences = self.tokens = self.above_0 = self.total = self.maximum = 0

    def add(self, distances) -> None:
        values = np.asarray(distances)[:-1]
        self.sentences += 1
        self.tokens += values.size
        self.above_0 += int((values > 0).sum())
        self.total += int(values.sum())
        self.maximum = max(self.maximum, int(values.max()) if values.size else 0)

    def as_dict(self) -> dict:
        return {"sentences": self.sentences, "tokens": self.tokens, "tokens_with_distance_above_0": self.above_0,
                "mean_distance": round(self.total / self.tokens, 4) if self.tokens else 0.0,
                "max_distance": self.maximum}


# --------------------------------------------------------------- extract ---
def extract(args) -> str:
    if not os.path.isfile(args.input):
        raise PrepError(f"--input {args.input} not found")
    for option, value, low in (("--batch-size", args.batch_size, 1), ("--n-process", args.n_process, 1),
                               ("--shard-lines", args.shard_lines, 1)):
        if value < low:
            raise PrepError(f"{option} must be >= {low}, got {value}")
    output = args.output
    if output.endswith((".bin", ".idx")):
        raise PrepError(f"--output {output}: give the prefix, without .bin/.idx")
    if os.path.dirname(output):
        os.makedirs(os.path.dirname(output), exist_ok=True)
    work_dir = args.work_dir or output + ".work"

    log(f"reading {args.input}")
    token_counts = np.fromiter((len(tokenize(line)) for line in read_text(args.input, args.invalid_utf8)),
                               dtype=np.int64)
    if len(token_counts) == 0:
        raise PrepError(f"--input {args.input} is empty (no lines); give the text that fairseq-preprocess binarises")
    # What the values depend on (contents, not paths: moving the data or the model redoes nothing).
    fingerprint = {
        "input_sha256": file_digest(args.input),
        "spacy_model_id": model_fingerprint(args.spacy_model),
        "bpe": args.bpe,
        "hint_rule_version": HINT_RULE_VERSION,
    }
    info = read_json(info_path(output))
    if info is not None and info.get("fingerprint") == fingerprint and hint_dataset_exists(output):
        log(f"{output}.bin/.idx: up to date ({info_path(output)})")
        if args.text_dump:
            keep_or_write_text_dump(output, args.text_dump, info)
        return output
    if info is not None:
        log(f"{output}: made from another input, model or --bpe; redoing it")
        os.remove(info_path(output))

    with exclusive(work_dir):
        manifest_path = os.path.join(work_dir, "manifest.json")
        manifest = {"fingerprint": fingerprint, "shard_lines": args.shard_lines}
        if read_json(manifest_path) != manifest:
            stale = [name for name in os.listdir(work_dir) if name.startswith("shard-")]
            if stale:
                log(f"{work_dir}: {len(stale)} shard files of another run (input, model, --bpe or --shard-lines "
                    "differ); starting over")
                for name in stale:
                    os.remove(os.path.join(work_dir, name))
            write_json(manifest_path, manifest, indent=2, sort_keys=True)

        total = len(token_counts)
        n_shards = (total + args.shard_lines - 1) // args.shard_lines
        todo = [k for k in range(n_shards) if not shard_done(
            shard_prefix(work_dir, k), token_counts[k * args.shard_lines:(k + 1) * args.shard_lines])]
        log(f"{total} lines, {int(token_counts.sum())} tokens, {n_shards} shard(s) of <= {args.shard_lines} lines; "
            f"{n_shards - len(todo)} done before, {len(todo)} to parse")
        if todo:
            nlp = load_parser(args.spacy_model)
            lines = read_text(args.input, args.invalid_utf8, warn=False)  # the first pass reported replacements
            with progress(total=sum(min(args.shard_lines, total - k * args.shard_lines) for k in todo),
                          desc="parsing", unit="lines") as bar:
                position = 0
                for k in todo:
                    start = k * args.shard_lines
                    shard = list(itertools.islice(lines, start - position, start - position + args.shard_lines))
                    position = start + len(shard)
                    began = time.time()

                    def counted(items):
                        for item in items:
                            bar.update()
                            yield item

                    write_hint_dataset(shard_prefix(work_dir, k), counted(parse_lines(
                        nlp, shard, args.bpe, start + 1, args.batch_size, args.n_process)))
                    seconds = time.time() - began
                    log(f"shard {k + 1}/{n_shards} (lines {start + 1}-{start + len(shard)}): "
                        f"{len(shard) / max(seconds, 1e-9):.0f} lines/s")

        stats = Summary()

        def merged():
            for k in range(n_shards):
                shard = load_hint_dataset(shard_prefix(work_dir, k))
                for i in range(len(shard)):
                    stats.add(shard[i].numpy())
                    yield shard[i]

        write_hint_dataset(output, merged())
        try:
            check_parallel(load_hint_dataset(output), token_counts + 1, f"{output}.bin/.idx", f"--input {args.input}")
        except HintDataError as error:
            raise PrepError(str(error)) from None
        dump = {"text_dump_sha256": write_text_dump(output, args.text_dump)} if args.text_dump else {}
        write_json(info_path(output), {"fingerprint": fingerprint, "summary": stats.as_dict(),
                                       "input": os.path.abspath(args.input), "spacy_model": args.spacy_model,
                                       "written": time.strftime("%Y-%m-%d %H:%M:%S"), **dump}, indent=2, sort_keys=True)
        log(f"{output}.bin/.idx: {stats.sentences} sentences, {stats.tokens} tokens, "
            f"{stats.above_0} with a hint distance > 0")
        if stats.tokens and not stats.above_0:
            # Every hint is the previous token: the pointer loss then only repeats the diagonal-free
            # default and BET(SG) trains like BET(SF). Legitimate for a tiny split, a sign of a weak
            # or mismatched parser (language, casing) for a real one.
            log_warning(f"{output}: no token's hint points further back than the previous token "
                f"(--spacy-model {args.spacy_model} found no left ancestor beyond it in {stats.sentences} sentences); "
                "check the parser on this text before training BET(SG) with these hints")
        shutil.rmtree(work_dir)
    return output
