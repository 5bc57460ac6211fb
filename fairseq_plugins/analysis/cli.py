"""``python -m fairseq_plugins.analysis`` (console script
``fairseq-plugins-attention``): current vs historical attention (CA, HA,
CA/HA) of every decoder layer of a checkpoint on a data split, as a markdown
table on stdout and optionally JSON, plus an optional PNG heatmap of one
sentence's decoder self-attention.

    python -m fairseq_plugins.analysis DATA --path CHECKPOINT [--gen-subset test]
        [--max-tokens N | --max-sentences N] [--max-batches N] [--max-sentences-total N]
        [--per-head] [--include-first-position] [--output-json PATH]
        [--heatmap PATH.png --sentence-index N] [--cpu] [--model-overrides DICT]
"""
from __future__ import annotations  # the annotations name runner's classes, imported when run (torch)

import argparse
import ast
import logging
import os
from typing import List, Optional

from ..errors import one_line_errors
from ..files import write_json

DEFINITIONS = {
    "heads": "per layer, the H heads' distributions are averaged first (A = mean over heads, as fairseq's need_weights=True); "
    "per-head numbers (--per-head) use each head's own distribution",
    "rows": "real (non-padding) query positions of the decoder input that have at least one real key before them; "
    "the first real position of each sentence is left out (its only key is itself) unless --include-first-position",
    "ca": "current attention: mean over rows of the diagonal weight A[t, t]; ca_std: population std over the same rows",
    "entries": "strictly-lower-triangle weights A[t, s], s < t, with real query t and real key s",
    "ha": "historical attention: mean over all entries, pooled per entry (a row with k earlier keys gives k entries); "
    "ha_std: population std over the same entries",
    "ratio": "CA / HA (null when HA is 0)",
    "pooling": "rows and entries are pooled over all sentences of all processed batches",
    "padding": "decoder input positions equal to the dictionary's pad index (prev_output_tokens for translation, "
    "src_tokens for language models) are excluded as queries and as keys",
}


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Current (CA) vs historical (HA) attention of every decoder self-attention layer of a fairseq "
        "checkpoint on a data split (teacher-forced), and an optional heatmap of one sentence.",
    )
    parser.add_argument("data", metavar="DATA", help="binarized data directory (as given to fairseq-generate / fairseq-eval-lm)")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="checkpoint file written by fairseq-train")
    parser.add_argument("--gen-subset", "--split", dest="split", default="test", help="data split to analyse (default: test)")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens per batch (default 4096 unless --max-sentences)")
    parser.add_argument("--max-sentences", "--batch-size", dest="max_sentences", type=int, default=None, help="sentences per batch")
    parser.add_argument("--max-batches", type=int, default=None, help="stop after this many batches (fairseq's length-sorted batch order)")
    parser.add_argument("--max-sentences-total", type=int, default=None, help="analyse only the first N examples of the split (indices 0..N-1)")
    parser.add_argument("--per-head", action="store_true", help="also report CA/HA of every head")
    parser.add_argument(
        "--include-first-position", action="store_true",
        help="count each sentence's first real position (no history; weight 1 on itself) in CA",
    )
    parser.add_argument("--output-json", metavar="PATH", default=None, help="also write the results as JSON (atomically)")
    parser.add_argument("--heatmap", metavar="PATH.png", default=None, help="write a PNG heatmap of one sentence, one panel per layer")
    # (default None, not 0: typed without --heatmap, it is refused, not ignored)
    parser.add_argument("--sentence-index", type=int, default=None,
                        help="example index in the split for --heatmap, and only with it (default 0)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when CUDA is available")
    parser.add_argument(
        "--model-overrides", default="{}",
        help="dict of checkpoint config values to override (task and model options), as fairseq's --model-overrides",
    )
    parser.add_argument(
        "--user-dir", default=None,
        help="another fairseq plugin directory to import (fairseq_plugins itself is always imported)",
    )
    parser.add_argument("--skip-invalid-size-inputs-valid-test", action="store_true", help="skip examples too long for the model")
    return parser


def _number(value: Optional[float], digits: int = 4) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(result: AnalysisResult, per_head: bool = False) -> str:
    header = ["layer", "kind", "CA", "CA std", "HA", "HA std", "CA/HA", "rows", "entries"]
    lines = [_row(header), _row(["---"] * len(header))]
    for layer in result.layers:
        stats = result.statistics.get(layer.index)
        if stats is None:
            lines.append(_row([layer.index, layer.kind] + ["n/a"] * 7))
            continue
        lines.append(_row([
            layer.index, layer.kind, _number(stats.ca), _number(stats.ca_std), _number(stats.ha), _number(stats.ha_std),
            _number(stats.ratio, 2), stats.rows, stats.entries,
        ]))
    if per_head:
        header = ["layer", "head", "CA", "CA std", "HA", "HA std", "CA/HA"]
        lines += ["", _row(header), _row(["---"] * len(header))]
        for layer in result.layers:
            stats = result.statistics.get(layer.index)
            if stats is None:
                lines.append(_row([layer.index, "n/a"] + ["n/a"] * 5))
                continue
            for h, head in enumerate(stats.heads or []):
                lines.append(_row([
                    layer.index, h, _number(head.ca), _number(head.ca_std), _number(head.ha), _number(head.ha_std),
                    _number(head.ratio, 2),
                ]))
    return "\n".join(lines)


def _model_name(loaded: Loaded) -> str:
    model_cfg = getattr(loaded.cfg, "model", None)
    name = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    return str(name or type(loaded.model).__name__)


def to_json(result: AnalysisResult, loaded: Loaded, args) -> dict:
    from .stats import LayerStatistics

    layers = []
    for layer in result.layers:
        entry = {"layer": layer.index, "kind": layer.kind, "heads": layer.heads, "has_attention_distribution": layer.has_distribution}
        stats = result.statistics.get(layer.index)
        if stats is None:
            entry.update(LayerStatistics(None, None, None, None, None, None, None).to_dict())
        else:
            entry.update(stats.to_dict())
        layers.append(entry)
    return {
        "checkpoint": os.path.abspath(args.path),
        "data": os.path.abspath(args.data),
        "split": args.split,
        "task": str(getattr(getattr(loaded.cfg, "task", None), "_name", None) or type(loaded.task).__name__),
        "arch": _model_name(loaded),
        "sentences": result.sentences,
        "batches": result.batches,
        "tokens": result.tokens,
        "padding_positions": result.padding,
        "options": {
            "max_tokens": args.max_tokens,
            "max_sentences": args.max_sentences,
            "max_batches": args.max_batches,
            "max_sentences_total": args.max_sentences_total,
            "include_first_position": args.include_first_position,
            "per_head": args.per_head,
        },
        "definitions": DEFINITIONS,
        "layers": layers,
    }


def _parse_overrides(text: str) -> dict:
    from .runner import AnalysisError

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise AnalysisError(f"--model-overrides: cannot read {text!r} as a dict literal") from None
    if not isinstance(value, dict):
        raise AnalysisError(f"--model-overrides: expected a dict, got {type(value).__name__}")
    return value


def run(args) -> int:
    from .runner import AnalysisError, analyse, check_bounds, load, sentence_attention

    # options checked before the checkpoint is loaded (which may take long), not after it
    check_bounds(args.max_tokens, args.max_sentences, args.max_batches, args.max_sentences_total)
    if args.sentence_index is not None and args.heatmap is None:
        raise AnalysisError("--sentence-index: an option of --heatmap, which is not given (it would be ignored)")
    if args.sentence_index is not None and args.sentence_index < 0:
        raise AnalysisError(f"--sentence-index: expected at least 0, got {args.sentence_index}")
    if args.user_dir:
        from fairseq import utils

        if not os.path.isdir(args.user_dir):
            raise AnalysisError(f"--user-dir: directory not found: {args.user_dir}")
        utils.import_user_module(argparse.Namespace(user_dir=args.user_dir))
    for option, path in (("--output-json", args.output_json), ("--heatmap", args.heatmap)):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise AnalysisError(f"{option}: directory of {path} does not exist")
        if path is not None and os.path.isdir(path):  # (written after the whole analysis: say it now)
            raise AnalysisError(f"{option}: {path} is a folder (expected the path of a file to write)")
    if args.heatmap is not None and not args.heatmap.lower().endswith(".png"):
        raise AnalysisError(f"--heatmap: expected a .png path, got {args.heatmap}")
    overrides = _parse_overrides(args.model_overrides)
    loaded = load(args.path, args.data, overrides=overrides, cpu=args.cpu)
    sentence = None
    if args.heatmap:  # first, so that a bad --sentence-index fails before the statistics
        from .heatmap import write_heatmap

        sentence = sentence_attention(loaded, args.split, args.sentence_index or 0)
    result = analyse(
        loaded,
        args.split,
        max_tokens=args.max_tokens,
        max_sentences=args.max_sentences,
        max_batches=args.max_batches,
        max_sentences_total=args.max_sentences_total,
        per_head=args.per_head,
        include_first=args.include_first_position,
        skip_invalid_size_inputs=args.skip_invalid_size_inputs_valid_test,
    )
    print(
        f"Decoder self-attention of {args.path} ({_model_name(loaded)}) on {args.split}: {result.sentences} sentences, "
        f"{result.batches} batches; heads averaged, pad positions excluded, first positions "
        f"{'included in' if args.include_first_position else 'excluded from'} CA; HA pooled per entry.\n"
    )
    print(markdown(result, per_head=args.per_head))
    if args.output_json:
        write_json(args.output_json, to_json(result, loaded, args), indent=2)
    if sentence is not None:
        write_heatmap(
            args.heatmap,
            sentence.tokens,
            [(layer.index, layer.kind) for layer in loaded.layers],
            sentence.probs,
            title=f"{os.path.basename(args.path)}: {args.split} example {sentence.index} (heads averaged)",
        )
    return 0


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    args = build_parser(prog).parse_args(argv)
    from .. import register
    from ..command_line import configure_logging

    configure_logging()
    register()  # imports fairseq, whose modules may configure logging

    # Importing fairseq sets the root logger to DEBUG and its loaders log every
    # step: keep stderr to warnings while the analysis runs.
    root = logging.getLogger()
    previous_level = root.level
    root.setLevel(logging.WARNING)
    try:
        return one_line_errors(lambda: run(args))
    finally:
        root.setLevel(previous_level)
