#!/usr/bin/env python
"""Decoding throughput of every decoder kind (``make bench-decode``).

1. Translation: ``fairseq-generate --beam 5`` (through the Multi30k recipe's
   ``generate.sh``) on Multi30k test 2016 flickr, for models of one size that
   differ only in their attention: softmax, the mFormer layout, cosFormer
   decoder self-attention, each Extractor as decoder self-attention, and
   BET(SF). The checkpoints are the ``multi30k`` rows of
   ``benchmarks/quality.py`` (trained first when missing, same budget).
   Reported: fairseq's own "Translated N sentences (M tokens) in S s" line
   (model loading excluded), median of the repeats, sentences/s and
   tokens/s, and the ratio to softmax.
2. Language-model sampling: fairseq's ``SequenceGenerator`` with sampling
   (beam 1, full distribution), generating exactly L tokens for
   L = 128, 256, 512, 1024 from models in the Extractor paper's LM setting
   (d = 128, 4 layers) with each kind of self-attention and 1,025 positions,
   on the tiny Shakespeare byte dictionary. Reported: tokens/s at each L, and
   the marginal cost per token between successive L (softmax's grows with
   the prefix, cosFormer's and the Extractors' do not). The weights are
   freshly initialised: the cost of a step does not depend on their values.

    python benchmarks/decode_speed.py                 # both parts, writes docs/records/decode_speed.md
    python benchmarks/decode_speed.py --quick         # smoke run: small data, 2 rows, L up to 256
    python benchmarks/decode_speed.py --report-only   # re-render from the stored parts

A measuring run refuses a checkout with uncommitted changes unless --allow-dirty.
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

import torch

if __package__ in (None, ""):  # run by path, not as python -m benchmarks.decode_speed: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import quality  # noqa: E402  (the trained rows, their data and the recipes)
from benchmarks.common import whole_numbers  # noqa: E402
from benchmarks.decoding_cost import build_lm  # noqa: E402
from benchmarks.provenance import REPO, available_cores, is_dirty, require_committed  # noqa: E402
from benchmarks.quality import Context, log, provenance, relative  # noqa: E402
from fairseq_plugins.files import atomic_output, write_json  # noqa: E402

TRANSLATION_ROWS = ("softmax", "mformer", "cosformer_decoder", "extractor_she_decoder", "extractor_he_decoder",
                    "extractor_we_decoder", "extractor_me_decoder", "bet_sf")
QUICK_TRANSLATION_ROWS = ("softmax", "cosformer_decoder")
LM_KINDS = {  # name -> (--arch, extra flags): the Extractor paper's LM setting, as in quality.py's LM rows
    "softmax (4 heads)": ("softmax_1head_lm", ("--decoder-attention-heads", "4")),
    "cosformer (4 heads)": ("softmax_1head_lm", ("--decoder-attention-kinds", "cosformer", "--decoder-attention-heads", "4")),
    "extractor_she": ("extractor_she_lm", ()),
    "extractor_he": ("extractor_he_lm", ()),
    "extractor_we": ("extractor_we_lm", ()),
    "extractor_me": ("extractor_me_lm", ()),
    "bet (4 heads)": ("softmax_1head_lm", ("--decoder-attention-kinds", "bet", "--decoder-attention-heads", "4")),
}
QUICK_LM_KINDS = ("softmax (4 heads)", "cosformer (4 heads)", "extractor_me")
LENGTHS = (128, 256, 512, 1024)
QUICK_LENGTHS = (64, 128, 256)


# ---------------------------------------------------------------------------
# 1. Beam search with fairseq-generate
# ---------------------------------------------------------------------------


def translation_throughput(ctx: Context, rows: Sequence[str], repeats: int) -> Dict[str, dict]:
    suite = quality.SUITES["multi30k"]
    quality.prepare(ctx, suite)
    by_name = {row.name: row for row in suite.rows}
    trained = {name: quality.run_row(ctx, suite, by_name[name]) for name in rows}
    runs: Dict[str, List[dict]] = {name: [] for name in rows}
    for repeat in range(repeats):  # round-robin: every model sees the same machine load
        for name in rows:
            save_dir = os.path.join(ctx.work_dir, "checkpoints", suite.name, name)
            out_dir = os.path.join(ctx.work_dir, "decode_speed", name, f"run{repeat}")
            env = quality.recipe_env(ctx, suite, {**quality.suite_env(ctx, suite), "SAVE_DIR": save_dir,
                                                  "OUT_DIR": out_dir, "BEAM": "5"})
            log(f"translation {name}: beam 5, run {repeat + 1}/{repeats}")
            ctx.run("decode", env, [f"recipes/{suite.recipe}/generate.sh", by_name[name].arch], record=repeat == 0 and name == rows[0])
            with open(os.path.join(out_dir, "generate-test.txt"), encoding="utf-8") as f:
                runs[name].append(quality.parse_generate_speed(f.read()))
    results = {}
    for name in rows:
        run = runs[name][0]
        # fairseq prints the seconds rounded to 0.1 s but the rates with two decimals: the medians of the rates
        results[name] = {"sentences": run["sentences"], "tokens": run["tokens"],
                         "sentences_per_second": statistics.median(r["sentences_per_second"] for r in runs[name]),
                         "tokens_per_second": statistics.median(r["tokens_per_second"] for r in runs[name]),
                         "runs": [r["seconds"] for r in runs[name]], "params": trained[name]["params"],
                         "sacrebleu": trained[name]["score"].get("sacrebleu")}
    return results


# ---------------------------------------------------------------------------
# 2. Language-model sampling with fairseq's SequenceGenerator
# ---------------------------------------------------------------------------


def sample_seconds(task, model, length: int, batch: int = 1) -> float:
    """Wall time of SequenceGenerator sampling exactly ``length`` tokens (min_len = max_len)."""
    from fairseq import search
    from fairseq.sequence_generator import SequenceGenerator

    dictionary = task.target_dictionary
    generator = SequenceGenerator([model], dictionary, beam_size=1, max_len_a=0, max_len_b=length, min_len=length,
                                  search_strategy=search.Sampling(dictionary, sampling_topk=-1, sampling_topp=-1.0))
    sample = {"net_input": {"src_tokens": torch.full((batch, 1), dictionary.eos(), dtype=torch.long),
                            "src_lengths": torch.ones(batch, dtype=torch.long)}}
    with torch.no_grad():
        started = time.perf_counter()
        hypotheses = generator.generate([model], sample)
        elapsed = time.perf_counter() - started
    produced = hypotheses[0][0]["tokens"].numel()
    if produced != length + 1:  # the tokens and the final end-of-sentence
        raise RuntimeError(f"asked for {length} tokens, SequenceGenerator produced {produced - 1}")
    return elapsed


def lm_sampling(ctx: Context, kinds: Sequence[str], lengths: Sequence[int], repeats: int) -> Dict[str, dict]:
    suite = quality.SUITES["shakespeare"]
    data_bin = quality.prepare(ctx, suite)
    positions = max(lengths) + 1
    models = {name: build_lm(data_bin, *LM_KINDS[name], positions=positions) for name in kinds}
    for name, (task, model) in models.items():
        sample_seconds(task, model, min(16, lengths[0]))  # warm-up (thread pools, first-call allocations)
    seconds: Dict[str, Dict[int, List[float]]] = {name: {length: [] for length in lengths} for name in kinds}
    for repeat in range(repeats):
        for length in lengths:
            for name, (task, model) in models.items():  # round-robin, as above
                seconds[name][length].append(sample_seconds(task, model, length))
        log(f"LM sampling: repeat {repeat + 1}/{repeats} done")
    results = {}
    for name in kinds:
        median = {length: statistics.median(seconds[name][length]) for length in lengths}
        params = sum(p.numel() for p in models[name][1].parameters())
        results[name] = {"seconds": median, "params": params, "positions": positions,
                         "tokens_per_second": {length: length / median[length] for length in lengths}}
    return results


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def render(translation: Optional[dict], lm: Optional[dict], lengths: Sequence[int], command: str, ctx: Context) -> str:
    meta = provenance()
    lines = ["# Decoding throughput", "",
             f"Written by `{command}` (edit the script, not this file) on {datetime.date.today().isoformat()} "
             f"(git {meta['git']}), torch {meta['torch']}, fairseq {meta['fairseq']}, {meta['cores']} cores; each part "
             "says the revision, machine (sampling: its torch threads) and load it was "
             "measured at (`--parts` runs one, the other is kept, so the two can come from different revisions). CPU, float32. Every model of a table ran in turn in "
             "each repeat (the same machine load).", ""]
    if not translation:
        lines += ["## Beam search: fairseq-generate --beam 5, Multi30k test 2016 flickr", "",
                  "Not measured yet: it decodes with the Multi30k models of `benchmarks/quality.py` "
                  "(`python benchmarks/decode_speed.py --parts translation` trains the missing ones first).", ""]
    if translation:
        first = next(iter(translation.values()))
        lines += ["## Beam search: fairseq-generate --beam 5, Multi30k test 2016 flickr", "",
                  f"{first['sentences']} sentences; models of `benchmarks/quality.py`'s Multi30k suite "
                  f"(`{' '.join(quality.SUITES['multi30k'].model_args)}`, "
                  f"{quality.suite_env(ctx, quality.SUITES['multi30k'])['MAX_UPDATE']} updates), the recipe's generation "
                  "settings (batches of up to `GEN_MAX_TOKENS` source tokens, output length at most 1.2 x the batch's "
                  "source length + 10). "
                  "Time: fairseq's own count (model loading excluded), median of "
                  f"{len(first['runs'])} runs. Output lengths differ between models, so tokens/s is the fairer column. "
                  + first.get("measured", ""), "",
                  "| model | params | sentences/s | tokens/s | tokens generated | x softmax (tokens/s) | test sacreBLEU |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        base = translation.get("softmax", {}).get("tokens_per_second")
        for name, r in translation.items():
            ratio = f"{r['tokens_per_second'] / base:.2f}" if base else "-"
            bleu = f"{r['sacrebleu']:.2f}" if r.get("sacrebleu") is not None else "-"
            lines.append(f"| {name} | {r['params'] / 1e6:.2f}M | {r['sentences_per_second']:.1f} | "
                         f"{r['tokens_per_second']:.0f} | {r['tokens']} | {ratio} | {bleu} |")
        lines.append("")
        commands = ctx.commands.get("decode", [])
        if commands:
            lines += ["Command (one model; the others differ in `SAVE_DIR` and the preset):", "", "```bash",
                      commands[0], "```", ""]
    if lm:
        lines += ["## Language-model sampling: tokens/s against generated length", "",
                  "fairseq's `SequenceGenerator` (beam 1, sampling from the full distribution, batch 1) generating "
                  "exactly L tokens after the end-of-sentence symbol (L + 1 decoder steps, the last one forced to "
                  "end the sentence); the Extractor paper's LM setting (d = 128, 4 layers, FFN 512, learned "
                  f"positions) with {next(iter(lm.values()))['positions']} positions, the tiny Shakespeare byte "
                  "dictionary, fresh weights. Median of the repeats. " + next(iter(lm.values())).get("measured", ""), "",
                  "| model | params | " + " | ".join(f"L = {n}" for n in lengths) + " |",
                  "| --- | ---: | " + " | ".join("---:" for _ in lengths) + " |"]
        for name, r in lm.items():
            lines.append(f"| {name} | {r['params'] / 1e6:.2f}M | " + " | ".join(
                f"{r['tokens_per_second'][n]:.0f} tok/s" for n in lengths) + " |")
        lines += ["", "Marginal cost per token between successive lengths ((time(L2) - time(L1)) / (L2 - L1)). "
                  "Expected: constant for cosFormer (constant-size state) and for the Extractors once the prefix "
                  "exceeds their l = 128 lags, growing with the prefix for softmax and BET, which attend to every "
                  "cached key.", "",
                  "| model | " + " | ".join(f"{a}-{b}" for a, b in zip(lengths, lengths[1:])) + " |",
                  "| --- | " + " | ".join("---:" for _ in lengths[1:]) + " |"]
        for name, r in lm.items():
            cells = []
            for a, b in zip(lengths, lengths[1:]):
                cells.append(f"{(r['seconds'][b] - r['seconds'][a]) / (b - a) * 1e3:.2f} ms")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def save_part(folder: str, part: str, results: dict, commands: List[str], lengths: Optional[List[int]] = None,
              sampling_threads: Optional[int] = None):
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, f"{part}.json"), {"results": results, "commands": commands, "lengths": lengths,
                                                       "sampling_threads": sampling_threads, **provenance()})


def load_part(folder: str, part: str):
    """(results, commands, lengths) of a part measured before, or (None, [], None)."""
    path = os.path.join(folder, f"{part}.json")
    if not os.path.isfile(path):
        return None, [], None
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    results = stored["results"]
    if part == "lm":  # JSON keys are strings: back to the lengths
        for r in results.values():
            r["seconds"] = {int(k): v for k, v in r["seconds"].items()}
            r["tokens_per_second"] = {int(k): v for k, v in r["tokens_per_second"].items()}
    measured = (f"Measured at git {stored['git']} on {stored['cores']} cores"
                + (f" ({stored['cpu']})" if stored.get("cpu") else "")
                + (f", `torch.set_num_threads({stored['sampling_threads']})` for sampling" if stored.get("sampling_threads") else "")
                + f", load average {stored['load_average']} at the end (other jobs raise it and the times).")
    if is_dirty(stored["git"]):
        measured += (" **Measured with uncommitted changes**: the revision does not contain the code that ran; "
                     f"re-measure on a clean checkout with `python benchmarks/decode_speed.py --parts {part}`.")
    results = {name: dict(r, measured=measured) for name, r in results.items()}
    return results, stored["commands"], stored["lengths"]


def main(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--parts", default="translation,lm", help="translation, lm or both (default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"),
                        help="the shared data folder (as benchmarks/quality.py)")
    parser.add_argument("--work-dir", default=None, help="benchmarks/quality.py's work folder (its checkpoints are "
                        "reused; default work_dirs/bench_quality, --quick: work_dirs/bench_quality_quick)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per model (median)")
    parser.add_argument("--lengths", default=None, help=f"LM sampling lengths (default {','.join(map(str, LENGTHS))})")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads for sampling")
    parser.add_argument("--output", default=None, help="markdown report (default docs/records/decode_speed.md; --quick: print)")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report from the stored parts")
    parser.add_argument("--quick", action="store_true", help="smoke run: quality.py's quick data and rows, 2 models, short samples")
    parser.add_argument("--allow-dirty", action="store_true", help="measure even when tracked files have uncommitted "
                        "changes (the report then shows the revision as uncommitted); --quick never asks")
    args = parser.parse_args(argv)
    parts = [] if args.report_only else args.parts.split(",")
    if not set(parts) <= {"translation", "lm"}:
        parser.error(f"--parts: expected translation and/or lm, got {args.parts}")
    lengths = tuple(whole_numbers(parser, "--lengths", args.lengths)) if args.lengths else (QUICK_LENGTHS if args.quick else LENGTHS)
    if list(lengths) != sorted(set(lengths)):
        parser.error(f"--lengths: expected increasing positive lengths, got {args.lengths}")
    for option in ("repeats", "threads"):
        if getattr(args, option) < 1:
            parser.error(f"--{option}: expected at least 1, got {getattr(args, option)}")
    if "lm" not in parts and args.threads != parser.get_default("threads"):  # (the stored LM part says its own)
        parser.error("--threads: sampling's torch threads, and no LM sampling runs (--parts lm runs it; "
                     "it would be ignored)")
    torch.set_num_threads(args.threads)
    work_dir = os.path.abspath(args.work_dir or os.path.join(REPO, "work_dirs",
                                                             "bench_quality_quick" if args.quick else "bench_quality"))
    ctx = Context(data_root=os.path.abspath(args.data_root), work_dir=work_dir, quick=args.quick)
    if args.quick and args.repeats != parser.get_default("repeats"):
        parser.error("--repeats: --quick runs each model once")
    repeats = 1 if args.quick else args.repeats
    if parts and not args.quick:
        # each part records the revision it ran at: it must contain the code that ran
        require_committed(args.allow_dirty, "benchmarks/decode_speed.py")
    # Each part's results are kept in the work folder: the report always shows both parts (--parts selects
    # what runs now).
    stored = os.path.join(work_dir, "decode_speed")
    if "translation" in parts:
        save_part(stored, "translation", translation_throughput(
            ctx, QUICK_TRANSLATION_ROWS if args.quick else TRANSLATION_ROWS, repeats), ctx.commands.get("decode", []))
    if "lm" in parts:
        save_part(stored, "lm", lm_sampling(ctx, QUICK_LM_KINDS if args.quick else tuple(LM_KINDS), lengths, repeats),
                  [], lengths=list(lengths), sampling_threads=args.threads)
    translation, translation_commands, _ = load_part(stored, "translation")
    lm, _, lm_lengths = load_part(stored, "lm")
    ctx.commands["decode"] = translation_commands
    command = "python benchmarks/decode_speed.py" + "".join(" " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    report = render(translation, lm, lm_lengths or lengths, command, ctx)
    output = args.output if args.output is not None else (None if args.quick else os.path.join(REPO, "docs", "records", "decode_speed.md"))
    if output:
        with atomic_output(output) as f:
            f.write(report)
        log(f"report: {relative(output)}")
    else:
        print(report)


if __name__ == "__main__":
    main()
