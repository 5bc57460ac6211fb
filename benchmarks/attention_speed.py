#!/usr/bin/env python
"""Speed and memory of one causal self-attention layer (CPU, or a CUDA device).

Compares, for one decoder self-attention layer (d = 512, 8 heads, batch 1, float32; on ``--device``, by
default ``cuda`` when available, else ``cpu``), every registered kind of causal self-attention (``--help``
lists them with their descriptions) and the baselines the kinds declare with their costs: other
implementations of a kind's function (e.g. a paper's public code), each timed next to its kind and first
checked against it. What the benchmark needs of a kind comes from its registered costs
(``fairseq_plugins/modules/costs.py``: ``AttentionCosts`` and its ``SpeedBenchmark``): the FLOPs of what
runs, a peak-memory estimate and the expected time growth, the model options it is built with (e.g. a
paper's window; ``--kind-option NAME=VALUE`` overrides them), the implementation settings to time
(``--sweep``), its targets and its words in the report.

It reports forward+backward time (median of repeated runs after a warm-up),
peak memory (fresh subprocess per cell), achieved GFLOP/s (FLOPs counted per
kind from the algorithm that runs, see ``layer_flops``) against the device's
float32 matrix-multiply peak measured in the same run, the cost per generated
token of incremental decoding at several prefix lengths, ratios between the
kinds and the growth of the time per doubling of T against each kind's
complexity, all from the same run. With ``--output X.md`` it writes a markdown
report (command, versions, git revision, core count, device, tables, targets)
and, next to it, ``X_speed.png``: time and memory vs T, log-log.

    python benchmarks/attention_speed.py                      # full run (T = 256 .. 16384)
    python benchmarks/attention_speed.py --quick              # smoke run (a couple of minutes)
    python benchmarks/attention_speed.py --output docs/records/benchmarks.md   # + docs/records/benchmarks_speed.png
    python benchmarks/attention_speed.py --device cuda        # the same on a GPU

On CUDA, runs are timed with ``torch.cuda.synchronize()`` before and after,
and memory is ``torch.cuda.max_memory_allocated()`` above the allocation at
the reset (``reset_peak_memory_stats``); TF32 is off, so that every product
is float32 like the peak it is compared with.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

if __package__ in (None, ""):  # run by path, not as python -m: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt_time, whole_numbers  # noqa: E402
from benchmarks.provenance import available_cores, load_average  # noqa: E402
# The measuring and reporting halves; the names the command uses, which paired_speed.py's workers and the tests
# also read from this module (paired_speed.py loads a checkout's attention_speed.py by its path).
from benchmarks.speed_measure import (BASELINES, DECODE_KINDS, EMBED_DIM, FULL, KINDS, MODEL_OPTIONS,  # noqa: E402,F401
                                      PEAK_SHAPES, QUICK, REGISTERED_KINDS, Cell, build, check_baseline, cost_options,
                                      declared_sweeps, default_device, environment, estimate_bytes, fmt_mem,
                                      future_mask, kind_descriptions, kind_options, launch, memory_fields, options_read,
                                      parse_sweep, run_worker, skip_reason, sweep_text)
from benchmarks.speed_report import median_time, plot_path_for, ratio_reference, render, write_plot  # noqa: E402,F401
from fairseq_plugins.files import atomic_output  # noqa: E402
from fairseq_plugins.modules import AttentionConfigError  # noqa: E402
from fairseq_plugins.modules.options import flag, parse_option  # noqa: E402


def _command_line_type(parse):
    """``parse`` as an argparse type: its ValueError is the option's error."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


# ---------------------------------------------------------------------------
# Worker side: measurements in fresh processes
# ---------------------------------------------------------------------------


def main(argv=None):
    epilog = "kinds:\n" + "\n".join(f"  {kind}: {text}" for kind, text in kind_descriptions(KINDS))
    declared = " ".join(sweep_text(kind, setting, sweep.values) for kind, setting, sweep in declared_sweeps(REGISTERED_KINDS))
    options = ", ".join(f"{option}={value}" for option, value in MODEL_OPTIONS.items())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", help=f"sequence lengths T, comma-separated (default: {FULL['lengths']}; cells that do not fit in memory are skipped with a note)")
    parser.add_argument("--repeats", type=int, help=f"timed forward+backward runs per cell after one warm-up, fewer for slow cells (default: {FULL['repeats']})")
    parser.add_argument("--kinds", default=None, help=f"comma-separated subset of {','.join(KINDS)} (default: all that are registered)")
    parser.add_argument("--kind-option", dest="kind_options", action="append", type=_command_line_type(parse_option),
                        metavar="NAME=VALUE", help="a model option of a kind, typed as the kind's options declare it "
                        f"(repeatable), over the values the kinds declare for this benchmark ({options or 'none'}); "
                        f"replaces the former flags of those ({', '.join(map(flag, MODEL_OPTIONS)) or 'none'})")
    parser.add_argument("--decode-prefixes", help=f"prefix lengths for the per-token decoding cost ('' to skip; default: {FULL['decode_prefixes']})")
    parser.add_argument("--decode-steps", type=int, help=f"timed single-token steps per prefix (default: {FULL['decode_steps']})")
    parser.add_argument("--sweep", action="append", type=_command_line_type(lambda text: parse_sweep(text) if text.strip() else None),
                        metavar="KIND:SETTING=V1,V2", help="values of a kind's implementation setting to time at the "
                        f"largest T (repeatable; '' to skip; default: the kinds' own, {declared or 'none'}); replaces "
                        "the former --chunk-sweep")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (default: the cores available)")
    parser.add_argument("--device", default=default_device(), help="cpu or cuda[:i] (default: cuda when available, else cpu: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="smoke run (a couple of minutes): T = 256, 1024; 2 repeats; short decoding; no sweep (explicit options still apply)")
    parser.add_argument("--output", help="write the markdown report to this path, and the plot next to it (X.md -> X_speed.png)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0

    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    lengths = whole_numbers(parser, "--lengths", args.lengths)
    if args.repeats < 2:  # (a median over at least two runs; slow cells take fewer than asked, never below two)
        parser.error(f"--repeats: expected at least 2, got {args.repeats}")
    if args.decode_steps < 1:
        parser.error(f"--decode-steps: expected at least 1, got {args.decode_steps}")
    if args.threads < 1:
        parser.error(f"--threads: expected at least 1, got {args.threads}")
    try:
        device_type = torch.device(args.device).type
    except RuntimeError as exc:
        parser.error(f"--device {args.device}: {exc}")
    if device_type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:i], got {args.device}")
    if device_type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    registered = list(KINDS)
    kinds = [k for k in args.kinds.split(",") if k] if args.kinds else registered
    unknown = [k for k in kinds if k not in registered]
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {','.join(registered)}")
    model_options = dict(args.kind_options or ())
    unread = [name for name in model_options if name not in options_read(kinds)]
    if unread:  # (of a kind not measured: it would be ignored)
        parser.error(f"--kind-option {unread[0]}: an option of no kind measured (--kinds {','.join(kinds)})")
    try:
        kind_options(kinds, model_options)
        cost_options(model_options)
    except AttentionConfigError as exc:
        parser.error(f"--kind-option: {exc}")
    prefixes = whole_numbers(parser, "--decode-prefixes", args.decode_prefixes, empty_ok=True)
    if args.sweep is None:
        sweeps = [(kind, setting, sweep.values) for kind, setting, sweep in declared_sweeps(kinds)]
    else:
        sweeps = [entry for entry in args.sweep if entry is not None]
        unmeasured = sorted({kind for kind, _, _ in sweeps if kind not in kinds})
        if unmeasured:  # (it would be left out, as the kind's cells are)
            parser.error(f"--sweep: {', '.join(unmeasured)} is not measured (--kinds {','.join(kinds)})")

    env = environment()
    command = " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] + (argv if argv is not None else sys.argv[1:]))
    print(f"# {command}")
    print(f"# torch {env['torch']}, fairseq {env['fairseq']}, {env['cores']} cores ({env['cpu']}), {args.threads} threads, git {env['git']}, load {env['load']}")
    started = time.time()
    self_checks = {name: check_baseline(name) for name in kinds if name in BASELINES}

    base = {"threads": args.threads, "model_options": model_options, "device": args.device}
    # The device's float32 matrix-multiply peak (and, on CUDA, its name and free memory), in a fresh process.
    peak = launch(dict(base, mode="peak", shapes=PEAK_SHAPES[device_type], min_s=0.2 if args.quick else 1.0), timeout=600)
    notes = []
    if "error" in peak:
        notes.append(f"matrix-multiply peak: {peak['error']}")
        print(f"# matrix-multiply peak: {peak['error']}", flush=True)
    else:
        for prod in peak["products"]:
            m, k, n = prod["shape"]
            print(f"# float32 ({m} x {k}) @ ({k} x {n}) on {args.device}: {prod['gflops']:.1f} GFLOP/s (best of {prod['runs']})", flush=True)
    device = {"name": args.device, "type": device_type}
    if device_type == "cuda" and "name" in peak:
        device.update(name=f"{args.device} ({peak['name']}, compute capability {peak['capability']}, CUDA {peak['cuda']}, "
                           f"{fmt_mem(peak['total_bytes'])})")
    device_free = peak.get("free_bytes")
    fields = memory_fields(device_type, args.quick)

    train = {}  # (kind, T) -> {"times": [...], "peak": bytes, "peak_fixed": bytes} or {"error": ...}
    for length in lengths:
        runnable = []
        for kind in kinds:
            why = skip_reason(estimate_bytes(kind, length, model_options), device_type, device_free)
            if why:
                train[(kind, length)] = {"error": why}
                notes.append(f"{kind} at T={length}: {why}")
                print(f"{kind:28s} T={length:5d}  {why}", flush=True)
            else:
                runnable.append(kind)
                train[(kind, length)] = {}
        if not runnable:
            continue
        res = launch(dict(base, mode="time", cells={kind: {"kind": kind} for kind in runnable}, length=length,
                          repeats=args.repeats), timeout=1800)
        for kind in runnable:
            cell = train[(kind, length)]
            if "error" in res:
                cell["error"] = f"timing failed: {res['error']}"
            else:
                cell["times"] = res["times"][kind]
            # The first run is the peak; a second one (for fast cells) catches a later one.
            runs = 2 if (median_time(cell) or 0) < 2.0 else 1
            for field, _, env_extra in fields:
                mem = launch(dict(base, mode="memory", kind=kind, length=length, runs=runs), timeout=1800, env=env_extra)
                if "error" in mem:
                    cell.setdefault("error", f"memory measurement failed: {mem['error']}")
                else:
                    cell[field] = mem["peak_bytes"]
            if "error" in cell:
                notes.append(f"{kind} at T={length}: {cell['error']}")
            print(
                f"{kind:28s} T={length:5d}  "
                + (f"median {fmt_time(median_time(cell)):>9s} (min {fmt_time(min(cell['times']))}, {len(cell['times'])} runs)  " if "times" in cell else "")
                + "peak " + " / ".join(f"{fmt_mem(cell.get(field))} ({label})" for field, label, _ in fields)
                + (f"  [{cell['error']}]" if "error" in cell else ""),
                flush=True,
            )

    # Sweeps of the kinds' implementation settings at the largest T, each round-robin in one process.
    sweep_results = {}  # (kind, setting) -> {value: {"times": [...]} or {"error": ...}}
    length = max(lengths)
    for kind, setting, values in sweeps:
        cells = {sweep_text(kind, setting, [value]): {"kind": kind, "settings": {setting: value}} for value in values}
        res = launch(dict(base, mode="time", cells=cells, length=length, repeats=args.repeats), timeout=1800)
        results = sweep_results[(kind, setting)] = {}
        for key, value in zip(cells, values):
            results[value] = {"error": res["error"]} if "error" in res else {"times": res["times"][key]}
            msg = results[value].get("error") or f"median {fmt_time(median_time(results[value]))}"
            print(f"{key:28s} T={length:5d}  {msg}", flush=True)

    # Incremental decoding.
    decode = {}
    dkinds = [k for k in DECODE_KINDS if k in kinds]
    if prefixes and dkinds:
        res = launch(dict(base, mode="decode", kinds=dkinds, prefixes=prefixes, steps=args.decode_steps, warmup_steps=5), timeout=1800)
        if "error" in res:
            decode = {"error": res["error"]}
            print(f"decode: {res['error']}", flush=True)
        else:
            decode = res["per_token"]
            for kind in dkinds:
                for prefix in prefixes:
                    print(f"decode {kind:14s} prefix={prefix:5d}  {fmt_time(statistics.median(decode[kind][str(prefix)]))} per token", flush=True)

    env["load_end"] = load_average()
    elapsed = time.time() - started
    plot_name = None
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        plot_path = plot_path_for(args.output)
        try:
            write_plot(plot_path, lengths, kinds, train, fields[0][0], device, fields[0][1])
            plot_name = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(args.output)))
            print(f"# wrote {plot_path}")
        except Exception as exc:  # the measurements are worth more than the plot: report, do not lose them
            notes.append(f"plot not written: {type(exc).__name__}: {exc}")
            print(f"# plot not written: {exc}", flush=True)
    report = render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_checks,
                    device=device, peak=peak, plot_name=plot_name)
    print()
    print(report)
    if args.output:
        with atomic_output(args.output) as f:
            f.write(report)
        print(f"# wrote {args.output}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
