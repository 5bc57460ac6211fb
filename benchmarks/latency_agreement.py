#!/usr/bin/env python
"""Does the latency protocol hold on a shared machine (issue 33)? The same N architectures of a supernet
measured in two runs by ``fairseq_plugins/search/latency.py``'s protocol (``--processes`` pinned processes
per architecture, one after another, each interleaving it with the fixed reference; the medians over
them), the second with ``--load`` CPU-heavy processes
running on the machine (busy loops, started and stopped by this script; pinned to the measuring core with
``--load-on-core``, else left to the scheduler), and their agreement on the relative latency: per
architecture the difference of run 2 over run 1, and whether every one is within ``--tolerance``
(issue 33: 10 architectures, two runs, one under CPU load, within 5 %). ``--in-turn`` architectures are
measured together, their processes taken in turn (``latency.measure_in_turn``; 1: one after another). The milliseconds are reported too:
they are expected to disagree under load, the relative latency not.

    python benchmarks/latency_agreement.py --checkpoint SUPER.pt --output agreement.json [-n 10] [--load 2] [--processes 3]

The JSON report (written atomically after each architecture: an interrupted run continues where it stopped,
with the same settings) holds every measurement, the settings, the machine and its load average, and the
summary; the last line printed is the summary.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import sys
from typing import List, Optional, Sequence

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import read_json  # noqa: E402
from fairseq_plugins.files import write_json  # noqa: E402


def burn(core: Optional[int]):
    """A CPU-heavy job: a busy loop until killed (on ``core`` when given)."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2147483648


class Load:
    """``count`` busy processes for the duration of a ``with`` block (stopped by their own ids)."""

    def __init__(self, count: int, core: Optional[int]):
        self.count, self.core, self.processes = count, core, []

    def __enter__(self):
        context = multiprocessing.get_context("fork")
        self.processes = [context.Process(target=burn, args=(self.core,), daemon=True) for _ in range(self.count)]
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.join()


def agreement(first: Sequence[float], second: Sequence[float], tolerance: float) -> dict:
    """Relative differences (second - first) / first, their largest magnitude and median, and whether every
    one is within ``tolerance``."""
    differences = [(b - a) / a for a, b in zip(first, second)]
    largest = max(abs(d) for d in differences)
    return {"differences": differences, "largest": largest, "median": statistics.median(abs(d) for d in differences),
            "within": largest <= tolerance, "tolerance": tolerance}


def main(argv: Optional[Sequence[str]] = None) -> int:
    from fairseq_plugins.search.__main__ import add_latency_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--checkpoint", required=True, help="a supernet checkpoint")
    parser.add_argument("--space", help="the space to sample (default: the supernet's)")
    parser.add_argument("-n", type=int, default=10, help="architectures (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="sampling seed (default: %(default)s)")
    parser.add_argument("--load", type=int, default=2, help="busy processes during the second run (default: %(default)s)")
    parser.add_argument("--load-on-core", action="store_true", help="pin the busy processes to the measuring core")
    parser.add_argument("--tolerance", type=float, default=0.05, help="agreement bound on the relative latency (default: %(default)s)")
    parser.add_argument("--output", required=True, help="the JSON report")
    add_latency_options(parser)
    args = parser.parse_args(argv)
    if args.n < 1 or args.load < 0 or args.tolerance <= 0:
        parser.error("-n must be >= 1, --load >= 0 and --tolerance > 0")
    if args.load_on_core and args.load == 0:  # (a flag: set only when typed)
        parser.error("--load-on-core: pins the busy processes of --load, which is 0 (it would be ignored)")
    # before any loading: a damaged report is a one-line error, never a traceback or overwritten
    stored = read_json(args.output)

    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.modules import AttentionConfigError
    from fairseq_plugins.provenance import load_average
    from fairseq_plugins.search.collect import distinct_samples, file_sha256, machine
    from fairseq_plugins.search.latency import LatencySettings, groups, measure_subnetworks
    from fairseq_plugins.search.space import SearchSpace
    from fairseq_plugins.search.subnetworks import load_supernet, reference_architecture

    try:
        settings = LatencySettings.from_args(args)
        settings.check()
        model, task, _ = load_supernet(args.checkpoint)
        space = SearchSpace.from_file(args.space) if args.space else model.space
        if args.space:
            space.check_within(model.space, f"--space {args.space}", f"the supernet {args.checkpoint}")
        reference = reference_architecture(args.reference, model)
    except AttentionConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    architectures = list(distinct_samples(space, args.n, args.seed))
    if len(architectures) < args.n:  # distinct_samples stops at what the space holds: fewer would be measured unsaid
        where = f"--space {args.space}" if args.space else f"the space of {args.checkpoint}"
        sampled = f" (seed {args.seed} sampled {len(architectures)})" if len(architectures) < space.size() else ""
        print(f"error: -n {args.n}: {where} has {space.size()} distinct architectures{sampled}; expected -n at most "
              f"{len(architectures)}", file=sys.stderr)
        return 2
    from dataclasses import asdict

    inputs = {"checkpoint_sha256": file_sha256(args.checkpoint), "space": space.to_dict(), "n": args.n, "seed": args.seed,
              "load": args.load, "load_on_core": args.load_on_core, "latency": asdict(settings), "device": args.device,
              "reference": reference.to_dict(), "machine": machine()}
    report = {"inputs": inputs, "runs": [[], []]}
    if stored is not None:
        if not isinstance(stored, dict) or not isinstance(stored.get("inputs"), dict):
            print(f"error: --output {args.output}: not a report of this script (expected a JSON object with "
                  "'inputs'); give another --output", file=sys.stderr)
            return 2
        if stored["inputs"] != inputs:
            differing = sorted(k for k in inputs if stored["inputs"].get(k) != inputs[k])
            print(f"error: --output {args.output}: measured with other settings ({', '.join(differing)}); give another --output",
                  file=sys.stderr)
            return 2
        report = stored
    for run, load in enumerate((0, args.load)):
        done = len(report["runs"][run])
        if done == len(architectures):
            continue
        # --in-turn architectures at a time, their processes in turn; each group written when it is measured
        with Load(load, settings.cores()[0] if args.load_on_core else None):
            for group in groups(architectures[done:], settings):
                for architecture, measured in zip(group, measure_subnetworks(model, task.target_dictionary, group, reference,
                                                                             settings, args.device)):
                    report["runs"][run].append({"architecture": architecture.to_dict(), "load_processes": load,
                                                "load_average": load_average(), **measured})
                    print(f"[agreement] run {run + 1} ({load} busy): {len(report['runs'][run])}/{len(architectures)} "
                          f"{measured['latency_ms']:.1f} ms, {measured['relative_latency']:.4f}x (ratios spread "
                          f"{measured['ratio_range']:.3f}, between processes {measured['process_range']:.3f})",
                          file=sys.stderr, flush=True)
                write_json(args.output, report)
    first, second = report["runs"]
    report["summary"] = {
        "architectures": len(first),
        "relative_latency": agreement([r["relative_latency"] for r in first], [r["relative_latency"] for r in second], args.tolerance),
        "milliseconds": agreement([r["latency_ms"] for r in first], [r["latency_ms"] for r in second], args.tolerance),
        "ratio_range": {"run1_max": max(r["ratio_range"] for r in first), "run2_max": max(r["ratio_range"] for r in second)},
        # (reports measured before --processes: one process per measurement, no spread between processes)
        "process_range": {"run1_max": max(r.get("process_range", 0.0) for r in first),
                          "run2_max": max(r.get("process_range", 0.0) for r in second)}}
    write_json(args.output, report)
    print(json.dumps(report["summary"]))
    return 0 if report["summary"]["relative_latency"]["within"] else 1


if __name__ == "__main__":
    sys.exit(main())
