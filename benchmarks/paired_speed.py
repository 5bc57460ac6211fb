#!/usr/bin/env python
"""Did a change make any kind slower? Times two checkouts of this project *interleaved*, in one run.

``compare_speed_reports.py`` compares whole reports of ``attention_speed.py`` taken one after the other; on a
machine whose speed drifts by more than the tolerance within minutes (a shared VM), the same code's ratios
then differ between its own reports by more than the 5 % to be decided. Here the drift cancels: one worker
process per checkout (``--before`` and ``--after``), each building its layers with its *own* checkout's
``benchmarks/attention_speed.py`` (``Cell`` for forward+backward, ``build`` for decoding: the measurement of
``make bench-speed``), and the two take turns, one measurement at a time, while the other waits. Only one
runs at any time, with all its threads.

The kinds compared are, by default, every kind both checkouts' attention_speed.py measure (their
``DECODE_KINDS``: the registered kinds; the report names any that only one side has), relative to the after
checkout's ratio reference (the registry's); ``--kinds`` and ``--reference`` choose others.

Each round measures, for every T and kind, one forward+backward of BEFORE and one of AFTER back to back (which
side goes first alternates between rounds), then, for every decoding prefix and kind, ``--decode-steps``
single-token steps of each side from a fresh prefix state (their median). Per round and cell this gives

    change = (after_kind / before_kind) / (after_reference / before_reference)

the change of the kind's time relative to the reference kind's (the issue's "ratio to softmax"; positive:
slower relative to it), each factor a ratio of two measurements taken seconds apart; for the reference
itself, its own after / before - 1 (a slower reference would otherwise make every other kind look faster).
Reported per cell: the median change over the rounds with a distribution-free confidence interval of the
median (order statistics of the rounds, binomial coverage: 6 rounds give [min, max] at 96.9 %, 10 give the
second smallest .. second largest at 97.9 %), the change of the kind's own time, and a verdict against
``--tolerance``:

- *slower*: the whole interval is above the tolerance (exit status 3);
- *unresolved*: the interval contains the tolerance (exit status 4 when nothing is slower): more rounds;
- *within*: the whole interval is at or below the tolerance (exit status 0 when every cell is).

Errors exit with 1 (a failed worker) or 2 (a bad option). The intervals hold per cell: over many cells, a
few may miss the true change by chance. The workers are started afresh every ``--restart-every`` rounds (new
processes, layers and inputs), so that what belongs to one process (its allocator, where its tensors lie)
varies between rounds too; one untimed run of every new cell comes first.

    git worktree add ../before REV
    python benchmarks/paired_speed.py --before ../before --output docs/records/speed_change.md

The report names the checkouts and the packages the workers imported relative to the after-checkout (``.``
and ``../before`` here), and repeats the command as typed: with relative paths, as above, a report committed
to the repository names no folder of the machine that measured it.
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SLOWER, UNRESOLVED, WITHIN = "slower", "unresolved", "within"
EXIT_STATUS = {WITHIN: 0, SLOWER: 3, UNRESOLVED: 4}  # 1 and 2: errors (a failed worker, a bad option)


# ---------------------------------------------------------------------------
# Worker side: one process per checkout, answering one JSON request per line.
# ---------------------------------------------------------------------------


def load_speed_module(checkout: str):
    """``checkout``'s benchmarks/attention_speed.py, loaded by its path with ``checkout`` first on sys.path, so
    that it and the ``fairseq_plugins`` it imports are that checkout's (checked: a package installed elsewhere,
    e.g. an editable install of another checkout, would otherwise measure the wrong code)."""
    import importlib.util

    path = os.path.join(checkout, "benchmarks", "attention_speed.py")
    if not os.path.isfile(path):
        raise SystemExit(f"error: {checkout}: no benchmarks/attention_speed.py (not a checkout of this project?)")
    sys.path.insert(0, checkout)
    spec = importlib.util.spec_from_file_location("attention_speed", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["attention_speed"] = module  # as an import would (dataclasses and pickle look it up)
    spec.loader.exec_module(module)
    import fairseq_plugins

    loaded = os.path.realpath(os.path.dirname(fairseq_plugins.__file__))
    if not loaded.startswith(os.path.realpath(checkout) + os.sep):
        raise SystemExit(f"error: the worker for {checkout} imported fairseq_plugins from {loaded}, not from that "
                         "checkout")
    return module, loaded


class Worker:
    """The measurements of one checkout, kept between requests (layers, inputs, decoding prefixes)."""

    def __init__(self, checkout: str, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.torch = torch
        self.speed, self.package = load_speed_module(checkout)
        self.cells, self.decoders, self.prefixes = {}, {}, {}

    def hello(self, request):
        """Where the package came from, and what this checkout measures by default: ``DECODE_KINDS`` of its
        attention_speed.py (its registered kinds, which decode step by step; baselines left out) and the kind
        its ratios are to (``ratio_reference``; None where the module has none, as before the registry)."""
        kinds = list(getattr(self.speed, "DECODE_KINDS", ()))
        ratio_reference = getattr(self.speed, "ratio_reference", None)
        return {"package": self.package, "torch": self.torch.__version__, "threads": self.torch.get_num_threads(),
                "kinds": kinds, "reference": ratio_reference(kinds) if ratio_reference else None}

    def time(self, request):
        """One timed forward+backward of (kind, T); a new cell first takes one untimed run (its warm-up)."""
        key = (request["kind"], request["length"])
        if key not in self.cells:
            self.torch.manual_seed(0)
            self.cells[key] = self.speed.Cell(*key)
            self.cells[key].step()
        return {"seconds": self.cells[key].timed_step()}

    def decode(self, request):
        """The median time per token of ``steps`` single-token steps (after ``warmup`` untimed ones) from a
        fresh incremental state that took a prefix of ``prefix`` tokens in one call: every round decodes
        after the same prefix length."""
        kind, prefix = request["kind"], request["prefix"]
        torch, speed = self.torch, self.speed
        if kind not in self.decoders:
            self.decoders[kind] = speed.build(kind).eval()
        module = self.decoders[kind]
        if prefix not in self.prefixes:
            generator = torch.Generator().manual_seed(prefix)
            self.prefixes[prefix] = (torch.randn(prefix, 1, speed.EMBED_DIM, generator=generator),
                                     torch.randn(request["warmup"] + request["steps"], 1, 1, speed.EMBED_DIM,
                                                 generator=generator))
        x, tokens = self.prefixes[prefix]
        state, times = {}, []
        with torch.no_grad():
            mask = speed.future_mask(prefix) if getattr(module, "uses_future_mask", False) else None
            module(x, x, x, incremental_state=state, attn_mask=mask, need_weights=False)
            for step, token in enumerate(tokens[:request["warmup"] + request["steps"]]):
                start = time.perf_counter()
                module(token, token, token, incremental_state=state, need_weights=False)
                if step >= request["warmup"]:
                    times.append(time.perf_counter() - start)
        return {"seconds": statistics.median(times)}


def serve(checkout: str, threads: int, reply_fd: int) -> None:
    """Answer requests from stdin on the pipe ``reply_fd``, so that nothing a library prints can get in the way
    (the driver sends the worker's stdout to its stderr)."""
    replies = os.fdopen(reply_fd, "w", buffering=1)
    worker = Worker(checkout, threads)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = getattr(worker, request["op"])(request)
        except Exception as exc:  # reported to the driver, which stops with it; the traceback goes to stderr
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")


# ---------------------------------------------------------------------------
# Driver side
# ---------------------------------------------------------------------------


class Side:
    """A worker process of one checkout and its requests."""

    def __init__(self, label: str, checkout: str, threads: int):
        self.label, self.checkout = label, checkout
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        read_end, write_end = os.pipe()  # the worker's replies (pass_fds keeps the descriptor's number)
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", checkout,
                                         "--threads", str(threads), "--reply-fd", str(write_end)],
                                        cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=sys.stderr.fileno(),
                                        text=True, pass_fds=(write_end,))
        os.close(write_end)
        self.replies = os.fdopen(read_end, "r")

    def stopped(self) -> SystemExit:
        status = self.process.wait()
        why = "was killed (out of memory?)" if status in (-9, 137) else f"stopped (exit status {status})"
        return SystemExit(f"error: the {self.label} worker ({self.checkout}) {why}; its messages are above")

    def ask(self, **request) -> dict:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:  # a broken pipe: the worker is gone
            raise self.stopped() from None
        line = self.replies.readline()
        if not line:
            raise self.stopped()
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"error: {self.label} ({self.checkout}), request {request}: {reply['error']} "
                             "(the worker's traceback is above)")
        return reply

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.replies.close()


def median_interval(values: Sequence[float], confidence: float) -> Tuple[float, float, float]:
    """(low, high, coverage): the distribution-free interval [x_(k), x_(n+1-k)] for the median of ``values``
    with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is still >= ``confidence`` (k >= 1: with
    fewer values than ``rounds_needed`` the interval is the whole range, whose coverage is then below the
    confidence asked; the command line refuses that)."""
    ordered, n = sorted(values), len(values)
    tail = lambda k: sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(B < k)  # noqa: E731
    k = 1
    while k < (n + 1) // 2 and 1 - 2 * tail(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], 1 - 2 * tail(k)


def rounds_needed(confidence: float) -> int:
    """The fewest rounds whose widest interval (min .. max) covers the median with ``confidence``."""
    if not 0 < confidence < 1:
        raise SystemExit(f"error: --confidence {confidence:g}: expected a number between 0 and 1")
    n = 1
    while 1 - 2 / 2 ** n < confidence:
        n += 1
    return n


def verdict(low: float, high: float, tolerance: float) -> str:
    return SLOWER if low > tolerance else (UNRESOLVED if high > tolerance else WITHIN)


def summarise(pairs: Dict[Tuple[str, int, str], List[Tuple[float, float]]], reference: str, tolerance: float,
              confidence: float) -> List[dict]:
    """Rows per (section, T or prefix, kind) from the rounds' (before, after) times: a kind's change relative to
    the reference in the same round; the reference's own change (after / before)."""
    rows = []
    for (section, size, kind), rounds in pairs.items():
        base = pairs.get((section, size, reference))
        if base is None:
            continue
        own = [a / b - 1 for b, a in rounds]
        changes = own if kind == reference else [(a / b) / (ra / rb) - 1 for (b, a), (rb, ra) in zip(rounds, base)]
        low, high, coverage = median_interval(changes, confidence)
        rows.append({"section": section, "size": size, "kind": kind, "rounds": len(changes),
                     "before": statistics.median(b for b, _ in rounds), "after": statistics.median(a for _, a in rounds),
                     "change": statistics.median(changes), "low": low, "high": high, "coverage": coverage,
                     "own_change": statistics.median(own), "verdict": verdict(low, high, tolerance)})
    return rows


def choose_kinds(requested: Optional[List[str]], reference: Optional[str], hello: Dict[str, dict]):
    """(kinds, reference, one-sided) from the workers' hello: the kinds both checkouts measure (in the after
    checkout's order) unless ``--kinds`` names them, the after checkout's ratio reference unless
    ``--reference`` names one, and the kinds only one side measures (not compared: said in the report).
    Raises ValueError naming the option."""
    listed = {label: hello[label]["kinds"] for label in ("before", "after")}
    if requested is None:
        for label, kinds in listed.items():
            if not kinds:
                raise ValueError(f"--kinds: the {label} checkout's benchmarks/attention_speed.py has no DECODE_KINDS "
                                 "to compare; name the kinds")
        kinds = [kind for kind in listed["after"] if kind in listed["before"]]
        one_sided = {label: [kind for kind in listed[label] if kind not in kinds] for label in listed}
    else:
        kinds, one_sided = requested, {}
        for label, known in listed.items():
            missing = [kind for kind in kinds if known and kind not in known]
            if missing:
                raise ValueError(f"--kinds: the {label} checkout does not measure {', '.join(missing)} (its "
                                 f"attention_speed.py's DECODE_KINDS: {', '.join(known)})")
    reference = reference or hello["after"]["reference"]
    if reference is None:
        raise ValueError("--reference: the after checkout's attention_speed.py names no ratio reference; name the "
                         "kind the times are relative to")
    if reference not in kinds:
        raise ValueError(f"--reference {reference} must be one of --kinds ({', '.join(kinds)})")
    return kinds, reference, one_sided


def measure(start, kinds: Sequence[str], lengths: Sequence[int], prefixes: Sequence[int], rounds: int,
            restart_every: int, decode_steps: int, decode_warmup: int, repeats: int = 1, log=print):
    """(section, size, kind) -> [(before seconds, after seconds) per round], interleaved as the module says;
    ``start()`` starts the two workers (before, after), again every ``restart_every`` rounds (0: never). With
    ``repeats`` > 1 the two sides take turns that many times per cell and round, and each keeps its fastest:
    what another process on the machine does can only add time to a measurement, never take it away."""
    pairs: Dict[Tuple[str, int, str], List[Tuple[float, float]]] = {}
    sides = None
    requests = [("forward+backward", length, kind, {"op": "time", "kind": kind, "length": length})
                for length in lengths for kind in kinds]
    requests += [("decoding per token", prefix, kind, {"op": "decode", "kind": kind, "prefix": prefix,
                                                       "steps": decode_steps, "warmup": decode_warmup})
                 for prefix in prefixes for kind in kinds]
    try:
        for index in range(rounds):
            if sides is None or (restart_every and index % restart_every == 0 and index):
                for side in sides or ():
                    side.close()
                sides = None
                sides = start()
            order = list(sides) if index % 2 == 0 else list(reversed(sides))
            started = time.monotonic()
            for section, size, kind, request in requests:
                seconds = {side.label: [] for side in order}
                for _ in range(repeats):
                    for side in order:
                        seconds[side.label].append(side.ask(**request)["seconds"])
                pairs.setdefault((section, size, kind), []).append((min(seconds["before"]), min(seconds["after"])))
            log(f"[paired-speed] round {index + 1}/{rounds}: {time.monotonic() - started:.0f} s")
    finally:
        for side in sides or ():
            side.close()
    return pairs


def render(rows: List[dict], header: List[str], reference: str, tolerance: float) -> str:
    from benchmarks.common import fmt_time

    lines = header + ["", f"| measured | T / prefix | kind | before | after | time / {reference}: change (median; "
                          f"{reference}: its own time) | interval (coverage) | own time: change | verdict |",
                      "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for row in rows:
        mark = {SLOWER: f"**slower by more than {tolerance:.0%}**", UNRESOLVED: "unresolved", WITHIN: "within"}
        lines.append(f"| {row['section']} | {row['size']} | {row['kind']} | {fmt_time(row['before'])} | "
                     f"{fmt_time(row['after'])} | {row['change']:+.1%} | {row['low']:+.1%} .. {row['high']:+.1%} "
                     f"({row['coverage']:.1%}) | {row['own_change']:+.1%} | {mark[row['verdict']]} |")
    counts = {v: sum(row["verdict"] == v for row in rows) for v in (WITHIN, UNRESOLVED, SLOWER)}
    lines += ["", f"{counts[WITHIN]} within, {counts[UNRESOLVED]} unresolved, {counts[SLOWER]} slower, of {len(rows)} "
                  f"cells (tolerance {tolerance:.0%} on the time relative to {reference}, and on {reference}'s own time). "
                  "Each interval holds for its cell: over many cells, a few may miss the true change by chance."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="checkout of the revision before the change (e.g. a git worktree)")
    parser.add_argument("--after", default=ROOT, help="checkout of the revision after it (default: this one)")
    parser.add_argument("--kinds", help="kinds to compare, comma-separated (default: every kind both checkouts' "
                                        "attention_speed.py measure, its DECODE_KINDS)")
    parser.add_argument("--reference", help="the kind the times are relative to (default: the after checkout's "
                                            "ratio reference, from its registry)")
    parser.add_argument("--lengths", default="4096,8192", help="forward+backward T, comma-separated (default: %(default)s)")
    parser.add_argument("--prefixes", default="128,1024,4096",
                        help="decoding prefixes, comma-separated; empty: no decoding (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds, an even number (default: %(default)s; 6 give a 95%% interval of min .. max)")
    parser.add_argument("--restart-every", type=int, default=5,
                        help="start the workers afresh every N rounds; 0: never (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="turns per cell and round, each side keeping its fastest (default: %(default)s)")
    parser.add_argument("--decode-steps", type=int, default=50, help="timed steps per decoding cell and round (default: %(default)s)")
    parser.add_argument("--decode-warmup", type=int, default=5, help="untimed steps before them (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="allowed slow-down relative to the reference (default: %(default)s)")
    parser.add_argument("--confidence", type=float, default=0.95, help="coverage of the intervals (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of each worker (default: the cores available)")
    parser.add_argument("--output", help="also write the report (markdown) here")
    parser.add_argument("--json", help="also write every round's times here (JSON), to analyse them again")
    parser.add_argument("--serve", metavar="CHECKOUT", help=argparse.SUPPRESS)  # a worker (started by the driver)
    parser.add_argument("--reply-fd", type=int, help=argparse.SUPPRESS)  # the worker's pipe to the driver
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.threads, args.reply_fd)
        return 0

    from fairseq_plugins.files import atomic_output
    from fairseq_plugins.provenance import available_cores, cpu_model, git_revision, load_average

    if not args.before:
        parser.error("--before is required: a checkout of the revision before the change")
    def ints(option: str, text: str) -> List[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            parser.error(f"{option} {text!r}: expected positive integers, comma-separated")
        if any(value <= 0 for value in values):
            parser.error(f"{option} {text!r}: expected positive integers, comma-separated")
        return values

    requested = [k.strip() for k in args.kinds.split(",") if k.strip()] if args.kinds is not None else None
    if requested == []:
        parser.error("--kinds is empty: name the kinds to compare, or leave it out for every kind both checkouts measure")
    lengths, prefixes = ints("--lengths", args.lengths), ints("--prefixes", args.prefixes)
    if not lengths and not prefixes:
        parser.error("nothing to measure: --lengths and --prefixes are both empty")
    if args.rounds % 2:
        parser.error(f"--rounds {args.rounds}: expected an even number (each side goes first in half the rounds)")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected at least 1")
    if args.restart_every < 0:
        parser.error(f"--restart-every {args.restart_every}: expected 0 (never) or a number of rounds")
    needed = rounds_needed(args.confidence)
    if args.rounds < needed:
        parser.error(f"--rounds {args.rounds}: an interval of the median over so few rounds covers less than "
                     f"--confidence {args.confidence:g}; that needs at least {needed} rounds")
    threads = args.threads or available_cores()
    checkouts = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for label, checkout in checkouts.items():
        if not os.path.isfile(os.path.join(checkout, "benchmarks", "attention_speed.py")):
            parser.error(f"--{label} {checkout}: no benchmarks/attention_speed.py (not a checkout of this project?)")
    revisions = {label: git_revision(checkout) for label, checkout in checkouts.items()}

    def shown(path: str) -> str:
        """``path`` relative to the after-checkout: a report committed there names no folder of the machine
        it was measured on (``.``, ``fairseq_plugins``, ``../before/fairseq_plugins``)."""
        return os.path.relpath(os.path.realpath(path), os.path.realpath(checkouts["after"]))

    load_start, started = load_average(), time.monotonic()
    hello = {}

    def start():
        sides = []
        try:
            for label, checkout in checkouts.items():
                sides.append(Side(label, checkout, threads))
            hello.update({side.label: side.ask(op="hello") for side in sides})
        except BaseException:
            for side in sides:
                side.close()
            raise
        return sides

    # The first workers tell what each checkout measures; they then take the first rounds.
    started_sides = [start()]
    try:
        kinds, reference, one_sided = choose_kinds(requested, args.reference, hello)
    except ValueError as exc:
        for side in started_sides.pop():
            side.close()
        parser.error(str(exc))

    def workers():  # the first pair, then fresh ones
        return started_sides.pop() if started_sides else start()

    pairs = measure(workers, kinds, lengths, prefixes, args.rounds, args.restart_every, args.decode_steps,
                    args.decode_warmup, args.repeats, log=lambda text: print(text, file=sys.stderr, flush=True))
    rows = summarise(pairs, reference, args.tolerance, args.confidence)
    # quoted as a shell reads it: an empty value (--prefixes '') would otherwise vanish from the command
    command = "python benchmarks/paired_speed.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = ["# Speed before and after a change, interleaved (CPU)", "",
              "Generated by `benchmarks/paired_speed.py` (its docstring says how it measures):", "",
              "```", command, "```", ""]
    header += [f"- {label}: `{shown(checkouts[label])}` at git {revisions[label]} (fairseq_plugins from "
               f"`{shown(hello[label]['package'])}`), torch {hello[label]['torch']}, {hello[label]['threads']} threads"
               for label in ("before", "after")]
    if requested is None:
        left_out = "; ".join(f"{', '.join(one_sided[label])} ({label} only)" for label in one_sided if one_sided[label])
        header += [f"- kinds: every kind both checkouts measure ({', '.join(kinds)}), relative to {reference}"
                   + (f"; measured by one checkout only, not compared: {left_out}" if left_out else "")]
    header += [f"- {available_cores()} cores ({cpu_model()}); load average {load_start} at the start and "
               f"{load_average()} at the end; run time {(time.monotonic() - started) / 60:.1f} min",
               f"- {args.rounds} rounds, the workers started afresh "
               + (f"every {args.restart_every} rounds" if args.restart_every else "once")
               + (f"; each side's fastest of {args.repeats} turns per cell and round" if args.repeats > 1 else "")
               + f"; decoding: median of {args.decode_steps} steps after {args.decode_warmup} untimed ones, from a fresh "
               "prefix state each round; before/after: medians over the rounds"]
    text = render(rows, header, reference, args.tolerance)
    print(text)
    if args.output:
        with atomic_output(args.output) as f:
            f.write(text)
    if args.json:
        with atomic_output(args.json) as f:
            json.dump({"command": command, "revisions": revisions,
                       "checkouts": {label: shown(checkout) for label, checkout in checkouts.items()},
                       "cells": [{"section": section, "size": size, "kind": kind, "before_after_seconds": rounds}
                                 for (section, size, kind), rounds in pairs.items()]}, f, indent=1)
    verdicts = {row["verdict"] for row in rows}
    return EXIT_STATUS[SLOWER if SLOWER in verdicts else UNRESOLVED if UNRESOLVED in verdicts else WITHIN]


if __name__ == "__main__":
    if "--serve" not in sys.argv and os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0]):
        sys.path[0] = ROOT  # run by path: the checkout, not benchmarks/, is the import root
    elif "--serve" in sys.argv and os.path.abspath(sys.path[0]) == HERE:
        del sys.path[0]  # a worker imports only its own checkout (load_speed_module puts it first)
    sys.exit(main())
