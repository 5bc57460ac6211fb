#!/usr/bin/env python
"""The architecture search on Multi30k de-en at the convergence budget, against scaled baselines (issue 33's
"real run"; docs/records/search.md).

Every from-scratch training runs at the convergence budget B that ``benchmarks/convergence.py`` measured for
``multi30k`` (softmax's test2016 BLEU within 0.5 of its BLEU at 2B), with bench-quality's ``multi30k_converged``
settings, exactly as ``benchmarks/quality.py`` reads it (a one-line error until B is measured). The trainings
go through bench-quality's ``run_row`` in ``--quality-work-dir``: the hand-written layouts (softmax, cosFormer
in the encoder, mFormer, cosFormer everywhere) *are* bench-quality's ``multi30k_converged`` rows (same command,
data and seeds, the same result file), so each is trained once for both reports. Scored as those rows are:
``checkpoint_best.pt``, or the average of the last ten checkpoints (as the paper) where the convergence
ladder's rung at B showed averaging beating the last checkpoint on the validation set.

Stages, each resumable (a finished stage is read back from ``--results``, committed; checkpoints stay in the
work folders), each recording its revision, machine and time:

1. ``supernet``: the supernet over ``search_spaces/multi30k_bracket.yaml`` (widths and depths below and above
   the hand-written layouts), ``recipes/multi30k/supernet.sh`` for ``--supernet-updates`` (default 2B) updates
   with the converged settings but its own peak learning rate (``SUPERNET_LR``), a checkpoint every 25
   updates, resumed only with the settings it started with (``--device cuda``: on a GPU).
2. ``collect``: inherited validation losses of ``--loss-samples`` and relative latencies of
   ``--latency-samples`` sampled architectures (``search collect``; the protocol of
   ``fairseq_plugins/search/latency.py``: processes pinned to one core with one thread (its default
   ``--processes``, the medians over them), each interleaving the architecture with the softmax layout as
   the reference, ten architectures at a time with their processes taken in turn (``--in-turn``); beam 5,
   30 source tokens, 30 decoder steps).
3. ``rank``: the pairwise rankers and the pointwise baselines over ten held-out splits (``search rank``).
4. ``budgets``: the hand-written layouts and a family of softmax Transformers scaled in width and depth
   (HAT's baselines, ``scaled_family``) measured by the protocol (ms and relative to the softmax layout) and
   FLOPs counted; three scaled baselines picked nearest to ``BASELINE_TARGETS`` (``select_baselines``); their
   latencies are the three latency budgets, the middle one's FLOPs the FLOPs budget.
5. ``evolve``: ``search evolve`` at each budget (ranker fitness; a latency budget is ``--latency-of`` the
   baseline: a candidate's predicted relative latency at most the baseline's predicted one, then the fittest
   final candidates measured beside the baseline, no slower than it; a budget whose fittest final candidates
   all measured slower gets no found row for now, is reported, and is searched again by the next run, the
   other stages going on).
6. ``inherited``: the validation loss inside the supernet of every architecture trained from scratch; with
   the found and baseline rows, single-seed architectures spread over the space (``spread.jsonl``) bring the
   distinct architectures to ``RANKED``.
7. ``train``: every planned row (``plan``) at each of its seeds, seed by seed, ``--jobs`` at once
   (``--device cuda``: on one GPU; ``bash benchmarks/gpu_rows.sh`` with ``BENCH=search`` in one device call).
8. ``latency``: every planned architecture measured by the protocol beside the reference, FLOPs counted.
9. the report: sacreBLEU test2016 mean and spread over seeds, the paired bootstrap against softmax over the
   concatenated seeds, latency (ms and relative), FLOPs, the Pareto plot with the found and the scaled-softmax
   fronts, the target (``front_verdict``), Kendall's tau of the inherited order against the from-scratch one
   beside parameter count and FLOPs, the rankers over the splits and the latency predictor's share within 10 %.

``--quick``: a smoke run of every stage for real at toy size, as ``benchmarks/quality.py --quick`` (its
``Context(quick=True)``: the first lines of each data file under ``WORK_DIR/quick_raw``, the rows at
bench-quality's quick budget, which stands in for B, so no convergence budget is needed), differing from
the real run in sizes only (``QUICK``: a supernet of a few small updates over the same bracket space, the
latency protocol at its minimum, 12 samples per collection, a small evolution, 12 distinct architectures
at one seed), in its own work folder (``work_dirs/search_multi30k_quick``; the stage results in
``WORK_DIR/records``, the rows trained there too), never writing into docs/records/ (the report only to
``--output``, else printed) and never asking for a committed revision: minutes, to find a broken stage
before days of compute do.

    python benchmarks/search_multi30k.py                          # every stage (days on 2 CPU cores)
    python benchmarks/search_multi30k.py --stages train --device cuda --jobs 16    # the trainings on a GPU
    python benchmarks/search_multi30k.py --report-only            # re-render docs/records/search.md
    python benchmarks/search_multi30k.py --quick --output /tmp/search.md   # every stage at toy size (minutes)
"""
import argparse
import functools
import json
import math
import os
import resource
import shlex
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import quality, supernet_ranking  # noqa: E402
from benchmarks.plotting import new_figure, save_png  # noqa: E402
from benchmarks.provenance import REPO, require_committed  # noqa: E402
from benchmarks.quality import Context, prepare, relative, scored_references, write_report  # noqa: E402
from benchmarks.common import read_json, read_jsonl  # noqa: E402
from benchmarks.supernet_ranking import architecture_key, require_finished_supernet  # noqa: E402
from fairseq_plugins.files import atomic_output, write_json  # noqa: E402

STAGES = ("supernet", "collect", "rank", "budgets", "evolve", "inherited", "train", "latency")
SPACE = os.path.join(REPO, "search_spaces", "multi30k_bracket.yaml")
DATA_SUITE = supernet_ranking.SUITE  # the prepared Multi30k (the supernet's data)
CONVERGED = quality.SUITES["multi30k_converged"]
# The search's own rows: bench-quality's converged settings, the model given by an architecture file
SEARCH_SUITE = replace(CONVERGED, name="search_multi30k", model_args=(), rows=(), quick_rows=())
CONVERGED_ROWS = {row.name: row for row in CONVERGED.rows}
LATENCY = dict(quality.BEAM_SEARCH_LATENCY)  # (bench-quality times its rows' beam search with it too)
BASELINE = "softmax"
# The hand-written layouts (bench-quality's multi30k_converged rows of these names, 3 + 3 layers of width 128,
# FFN 512, 4 heads): (encoder self, decoder self, cross) kinds per layer
LAYOUTS = {
    "softmax": (("softmax",) * 3, ("softmax",) * 3, ("softmax",) * 3),
    "cosformer_encoder": (("cosformer",) * 3, ("softmax",) * 3, ("softmax",) * 3),
    "mformer": (("softmax", "cosformer", "softmax"), ("softmax",) * 3, ("softmax",) * 3),
    "cosformer_everywhere": (("cosformer",) * 3, ("cosformer",) * 3, ("cosformer",) * 3),
}
# HAT's baselines: softmax Transformers scaled in width (embedding -> FFN, 4 heads) and depth (encoder,
# decoder layers), all inside the space (so that the supernet measures them as it measures the found ones)
SCALED_WIDTHS = {96: 512, 128: 512, 192: 1024, 256: 1024}
SCALED_DEPTHS = ((2, 1), (3, 3), (6, 4))
# The relative latencies (over the softmax layout's) the three scaled baselines are picked nearest to: one
# below the hand-written layouts, two above (the space reaches widths and depths beyond them)
BASELINE_TARGETS = (0.6, 1.3, 2.0)
RANKED = 20  # distinct architectures trained from scratch for the ranking (spread ones added to reach it)
SPREAD_POOL, SPREAD_SEED = 1000, 1
SEEDS = quality.CONVERGED_SEEDS
ONE_SEED = quality.ONE_SEED
SUPERNET_FACTOR = 2  # the supernet's updates, in units of B (each of its updates trains 2 x kinds + 2 sub-networks)
# The supernet's peak learning rate (the rows train at the converged settings' 5e-3). At 5e-3 the bracket
# space's supernet got worse once warm-up passed about 3e-3: its largest sub-network's validation loss went
# 8.70, 7.93, 8.21 bits at updates 121, 242, 363 while the smallest's fell to 6.41 (docs/records/search.md,
# "the converged search's supernet learning rate"); the earlier supernet of supernet_ranking.py trained
# smoothly at 2e-3, the rate HAT's supernets are near (1e-3 to 1.5e-3).
SUPERNET_LR = "2e-3"


@dataclass(frozen=True)
class Scale:
    """The sizes of a run, the only thing ``--quick`` changes (every stage runs the same code either way):
    the supernet's updates and batches, the latency protocol's settings, collect's spread check, evolve's population and
    length, the samples collected, the distinct architectures trained from scratch and the pool the spread ones
    come from, and the seeds (None: each row's own)."""
    latency: Dict[str, object]              # LatencySettings fields (the others: its defaults)
    supernet_updates: Optional[int] = None  # None: SUPERNET_FACTOR x B
    supernet_env: Dict[str, str] = field(default_factory=dict)  # recipe variables of the supernet's training
    collect_options: Tuple[str, ...] = ()   # collect --what latency's spread check (empty: its defaults)
    evolution_options: Tuple[str, ...] = ()  # evolve's population and iterations (empty: HAT's defaults)
    confirm: Optional[int] = None           # evolve's candidates measured under a latency budget (None: its default)
    loss_samples: int = 300
    latency_samples: int = 300
    ranked: int = RANKED
    spread_pool: int = SPREAD_POOL
    seeds: Optional[Tuple[int, ...]] = None

    def latency_options(self, measured: bool = True) -> List[str]:
        """The protocol's settings as the search CLIs' options; ``measured=False``: the lengths only (what a
        search that measures nothing, a FLOPs budget, counts its costs at: it refuses the measurement's)."""
        from fairseq_plugins.search.latency import OPTIONS

        lengths = ("source_length", "decoder_steps")
        return [a for key, value in self.latency.items() if measured or key in lengths for a in (OPTIONS[key], str(value))]


REAL = Scale(LATENCY)
# --quick: a smoke run of every stage at toy size (recipes/lib/search.sh's SEARCH_TINY sizes): 6 updates of 256
# tokens for the supernet (each of its updates trains 6 sub-networks, two of them the space's largest), the
# latency protocol at its minimum (one process of 2 rounds of 3 timed runs, 8 + 8 tokens, beam 2) with every
# measurement kept (a collection too small to drop any), 12 samples per collection (``rank`` needs 10), an
# evolution of 6 over 2 iterations whose whole final population is measured, 12 distinct architectures
# trained (at least one spread one), one seed
QUICK = Scale(dict(quality.QUICK_BEAM_SEARCH_LATENCY),
              supernet_updates=6, supernet_env={"MAX_TOKENS": "256", "TOKENS_PER_UPDATE": "256"},
              collect_options=("--max-spread", "10", "--remeasure", "0"),
              evolution_options=("--population", "6", "--parents", "2", "--mutations", "2", "--crossovers", "2",
                                 "--iterations", "2"), confirm=6,
              loss_samples=12, latency_samples=12, ranked=12, spread_pool=100, seeds=quality.ONE_SEED)
REPORT_BEGIN = "<!-- search-multi30k:begin (written by benchmarks/search_multi30k.py; edit the script, not this section) -->"
REPORT_END = "<!-- search-multi30k:end -->"


def log(message: str):
    print(f"[search-multi30k] {message}", file=sys.stderr, flush=True)


def uniform_architecture(width: int, ffn: int, kinds: Tuple[Sequence[str], Sequence[str], Sequence[str]]):
    from fairseq_plugins.models.architecture import Architecture, DecoderLayer, EncoderLayer

    encoder, decoder, cross = kinds
    return Architecture(decoder_embed_dim=width, encoder_embed_dim=width,
                        encoder_layers=tuple(EncoderLayer(k, 4, ffn) for k in encoder),
                        decoder_layers=tuple(DecoderLayer(k, 4, ffn, c, 4, 1) for k, c in zip(decoder, cross))).check()


def layout_architecture(name: str):
    return uniform_architecture(128, 512, LAYOUTS[name])


def scaled_family() -> Dict[str, object]:
    """name -> architecture of every scaled softmax Transformer but the softmax layout itself (the reference)."""
    family = {}
    reference = layout_architecture(BASELINE)
    for width, ffn in SCALED_WIDTHS.items():
        for encoder, decoder in SCALED_DEPTHS:
            architecture = uniform_architecture(width, ffn, (("softmax",) * encoder, ("softmax",) * decoder,
                                                             ("softmax",) * decoder))
            if architecture != reference:
                family[f"scaled_d{width}_{encoder}+{decoder}"] = architecture
    return family


def select_baselines(relative_latency: Dict[str, float], targets: Sequence[float] = BASELINE_TARGETS) -> List[str]:
    """One scaled baseline per target relative latency: the one not yet picked whose relative latency is
    nearest to it on a log scale (ties: the name), in the order of ``targets``."""
    if len(relative_latency) < len(targets):
        raise SystemExit(f"error: {len(relative_latency)} scaled baselines measured, fewer than the {len(targets)} targets")
    picked: List[str] = []
    for target in targets:
        picked.append(min((name for name in relative_latency if name not in picked),
                          key=lambda name: (abs(math.log(relative_latency[name] / target)), name)))
    return picked


class Stages:
    """Wall and CPU time of every stage, accumulated over runs (``stages.json``), interrupted ones included (the
    search spans sessions: a stage cut off by the end of one continues in the next). CPU time: user + system
    of this process and the commands it ran (``cpu_seconds``; runs before 2026-11-27 recorded wall time only)."""

    def __init__(self, results: str):
        self.path = os.path.join(results, "stages.json")
        self.times = json.load(open(self.path, encoding="utf-8")) if os.path.isfile(self.path) else {}

    def add(self, stage: str, seconds: float, cpu_seconds: float, interrupted: bool = False):
        from benchmarks.provenance import available_cores, cpu_model, measured_revision

        entry = self.times.setdefault(stage, {"seconds": 0.0, "runs": []})
        entry["seconds"] += seconds
        entry["cpu_seconds"] = entry.get("cpu_seconds", 0.0) + cpu_seconds
        run = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1), "git": measured_revision(),
               "cores": available_cores(),
               "cpu": cpu_model(), "threads": os.environ.get("OMP_NUM_THREADS") or "torch's default"}
        entry["runs"].append({**run, "interrupted": True} if interrupted else run)
        write_json(self.path, self.times)


def cpu_time() -> float:
    """User + system seconds of this process and of its finished commands (and theirs, waited for in turn)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(stages: Stages, name: str, function, *args):
    """``function(*args)``, its wall and CPU time added to ``name`` in ``stages``, also when it fails or is
    stopped (Ctrl-C, or SIGTERM, which ``main`` turns into an exception)."""
    started, cpu_started, finished = time.time(), cpu_time(), False
    try:
        result = function(*args)
        finished = True
        return result
    finally:
        stages.add(name, time.time() - started, cpu_time() - cpu_started, interrupted=not finished)


def search_cli(ctx: Context, *argv: str) -> dict:
    output = ctx.run(DATA_SUITE.name, {}, [ctx.python, "-m", "fairseq_plugins.search", *argv], record=False)
    return json.loads(output.strip().splitlines()[-1])


# ------------------------------------------------------------------- stages ---
def convergence_budget(quick: bool = False) -> int:
    """B, as bench-quality's multi30k_converged suite reads it (a one-line error until it is measured); a smoke
    run (``--quick``) needs none: its rows train the suite's quick budget (as ``quality.budget_measured``)."""
    if quick:
        return int(CONVERGED.quick_env["MAX_UPDATE"])
    return quality.convergence_budget(CONVERGED.budget_from)


def supernet_checkpoint(ctx: Context) -> str:
    return os.path.join(supernet_ranking.supernet_dir(ctx), "checkpoint_last.pt")


def supernet_env(ctx: Context, updates: int, scale: Scale = REAL) -> Dict[str, str]:
    """The recipe settings of the supernet's training: the converged ones (not the rows' checkpoint averaging:
    the stages read the supernet's last checkpoint) at ``SUPERNET_LR``; a one-line error for ``updates`` the
    schedule cannot take."""
    env = {k: v for k, v in {**quality.suite_env(ctx, CONVERGED, averaging=False), "LR": SUPERNET_LR,
                             **scale.supernet_env}.items()
           if k not in ("GEN_EXTRA_ARGS", "SUBSETS")}
    if env.get("LR_SCHEDULER") == "cosine" and updates <= int(env["WARMUP"]):  # (fairseq divides by the difference)
        raise SystemExit(f"error: --supernet-updates {updates}: expected more than the {env['WARMUP']} warm-up updates "
                         "(the cosine schedule decays over the updates after them)")
    return env


def train_supernet(ctx: Context, results: str, updates: int, scale: Scale = REAL) -> dict:
    """supernet_ranking.py's supernet stage over this search's space, with the converged settings."""
    return supernet_ranking.train_supernet(ctx, results, updates, space=SPACE, train_env=supernet_env(ctx, updates, scale))


def reference_file(results: str) -> str:
    """The latency reference (the softmax layout) as ``--reference`` reads it."""
    path = os.path.join(results, "reference.json")
    with atomic_output(path) as f:
        f.write(layout_architecture(BASELINE).to_json() + "\n")
    return path


def collect(ctx: Context, results: str, checkpoint: str, loss_samples: int, latency_samples: int, scale: Scale = REAL):
    latency = [*scale.latency_options(), *scale.collect_options, "--reference", reference_file(results)]
    for what, n, extra in (("loss", loss_samples, []), ("latency", latency_samples, latency)):
        log(f"collect: {what} of {n} architectures (resumes {relative(os.path.join(results, what + '.jsonl'))})")
        search_cli(ctx, "collect", "--what", what, "--checkpoint", require_finished_supernet(checkpoint, results),
                   "--space", SPACE, "-n", str(n), "--output", os.path.join(results, f"{what}.jsonl"), *extra)


# the collection each ranker learns from: the relative latency is a field of the latency collection's records
RANKED_FROM = {"loss": "loss", "latency": "latency", "relative_latency": "latency"}


def rank(ctx: Context, results: str):
    for target, collection in RANKED_FROM.items():
        search_cli(ctx, "rank", "--data", os.path.join(results, f"{collection}.jsonl"), "--target", target,
                   "--output", os.path.join(results, f"ranker_{target}"))


MEASURED = "measured_latency.jsonl"  # every architecture measured by the protocol, by architecture


def measured_latency(results: str, checkpoint: str, named: Dict[str, dict], scale: Scale = REAL) -> Dict[str, dict]:
    """name -> the protocol's record (ms, relative latency over the softmax layout, its repeatability) and the
    counted GFLOPs and parameters of every architecture of ``named``, measured inside the supernet where not
    measured before (``MEASURED``, one line per architecture, appended as each is measured)."""
    from dataclasses import asdict

    from fairseq_plugins.search.latency import LatencySettings, recorded_settings

    path = os.path.join(results, MEASURED)
    done = {architecture_key(r["architecture"]): r for r in read_jsonl(path)}
    wanted = asdict(LatencySettings(**scale.latency))
    for record in done.values():  # one protocol for every latency compared (a budget, a Pareto front)
        stored = recorded_settings({k: record[k] for k in wanted if k in record})
        if stored != wanted:
            differ = ", ".join(f"{k} {stored.get(k)} (now {v})" for k, v in wanted.items() if stored.get(k) != v)
            raise SystemExit(f"error: {relative(path)}: {record.get('name', 'an architecture')} was measured with other "
                             f"latency settings ({differ}): move the file away to measure every architecture again")
    missing = [name for name, architecture in named.items() if architecture_key(architecture) not in done]
    if missing:
        from fairseq_plugins.models.architecture import Architecture
        from fairseq_plugins.search.latency import groups, measure_subnetworks
        from fairseq_plugins.search.subnetworks import counted_cost, load_supernet

        model, task, _ = load_supernet(require_finished_supernet(checkpoint, results))
        reference = layout_architecture(BASELINE)
        settings = LatencySettings(**scale.latency)
        architectures = {name: Architecture.from_dict(named[name]) for name in missing}
        for name, architecture in architectures.items():
            model.space.check_contains(architecture, name)
        # --in-turn at a time, their processes in turn; a group's lines appended when it is measured
        for group in groups(missing, settings):
            measured = measure_subnetworks(model, task.target_dictionary, [architectures[n] for n in group], reference,
                                           settings)
            for name, record in zip(group, measured):
                cost = counted_cost(model, task, architectures[name], settings.source_length, settings.decoder_steps)
                # (the provenance first: its "threads", this process's, must not replace the measurement's setting,
                # which the next run compares)
                record = {**supernet_ranking.provenance(), **record, "architecture": named[name], "name": name,
                          "gflops": cost["forward_flops"] / 1e9, "mparams": cost["parameters"] / 1e6}
                log(f"latency: {name} {record['latency_ms']:.1f} ms, {record['relative_latency']:.3f}x the softmax layout "
                    f"(ratios spread {record['ratio_range']:.3f}), {record['gflops']:.3f} GFLOPs")
                supernet_ranking.append_jsonl(path, record)
                done[architecture_key(named[name])] = record
    return {name: done[architecture_key(architecture)] for name, architecture in named.items()}


def measure_budgets(results: str, checkpoint: str, scale: Scale = REAL) -> dict:
    """The layouts and the scaled family measured, three baselines picked, the budgets (``budgets.json``;
    computed again from the stored measurements when ``BASELINE_TARGETS`` changes)."""
    family = {name: a.to_dict() for name, a in scaled_family().items()}
    layouts = {name: layout_architecture(name).to_dict() for name in LAYOUTS}
    measured = measured_latency(results, checkpoint, {**layouts, **family}, scale)
    baselines = select_baselines({name: measured[name]["relative_latency"] for name in family})
    middle = baselines[len(baselines) // 2]
    result = {"targets": list(BASELINE_TARGETS), "baselines": baselines,
              "relative_latency": {name: round(measured[name]["relative_latency"], 4) for name in baselines},
              "gflops": {"of": middle, "limit": round(measured[middle]["gflops"], 4)},
              "family": {name: {"relative_latency": round(r["relative_latency"], 4), "latency_ms": round(r["latency_ms"], 2),
                                "gflops": round(r["gflops"], 4)} for name, r in measured.items()}}
    path = os.path.join(results, "budgets.json")
    if not os.path.isfile(path) or json.load(open(path, encoding="utf-8")) != result:
        write_json(path, result)
    return result


def searches(results: str, budgets: dict) -> List[Tuple[str, List[str]]]:
    """(name, constraint options) of each budget's evolution: the three latency budgets (each the latency of
    its scaled baseline, ``--latency-of``: the predicted constraint the predictor's value for the baseline,
    which lies at the space's corner for the smallest, where a regressor fitted on uniform samples is biased
    upwards; the final candidates measured beside it), then the FLOPs one."""
    family = scaled_family()
    found = [(f"latency_{name}", ["--latency-of", relative(architecture_file(results, name, family[name].to_dict())),
                                  "--latency-predictor", relative(os.path.join(results, "ranker_relative_latency", "regressor.txt"))])
             for name in budgets["relative_latency"]]
    return found + [(f"flops_{budgets['gflops']['of']}", ["--flops", str(budgets["gflops"]["limit"])])]


def finished_best(results: str, name: str) -> Optional[dict]:
    """best.json's architecture of ``name``'s evolution once that search finished (its result.json, which
    ``evolve`` writes last, holds ``best``); None: not searched yet, searched without an architecture
    (``missed``), or stopped between writing best.json and result.json (searched again)."""
    output = os.path.join(results, f"evolve_{name}")
    result, best = os.path.join(output, "result.json"), os.path.join(output, "best.json")
    if not (os.path.isfile(result) and os.path.isfile(best)) or json.load(open(result, encoding="utf-8")).get("best") is None:
        return None
    return json.load(open(best, encoding="utf-8"))


def missed(results: str, name: str) -> Optional[dict]:
    """The result of ``name``'s evolution when it ended without an architecture (``search evolve`` keeps it in
    result.json without ``best``, and searches again when run again): none of the fittest final candidates
    measured within the latency budget (``confirmed_latency``: what it found and measured), or no architecture
    drawn met the budget (``unsatisfiable``: why); else None."""
    path = os.path.join(results, f"evolve_{name}", "result.json")
    if not os.path.isfile(path):
        return None
    result = json.load(open(path, encoding="utf-8"))
    return result if result.get("best") is None and (result.get("confirmed_latency") or result.get("unsatisfiable")) else None


def file_version(path: str) -> Optional[Tuple[int, int, int]]:
    """What changes when ``path`` is written (again, or replaced by an atomic write); None: no such file."""
    if not os.path.isfile(path):
        return None
    stat = os.stat(path)
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def evolve(ctx: Context, results: str, checkpoint: str, budgets: dict, scale: Scale = REAL):
    """``search evolve`` at each budget. A search finished before is found done by the command itself, which
    compares its inputs (the supernet, the rankers, the baseline, the space, the settings) with those of its
    result.json and refuses a result of other inputs: a retrained supernet does not leave a stale found row. A
    budget the search ends without an architecture (``missed``: the fittest final candidates all measured above
    it, the predictor off or the machine loaded; or too few of the architectures drawn met it) gets no found row
    this time: logged, shown in the report, searched again by the next run of this stage, and the other budgets
    and stages go on (a run of days must not stop its trainings for it)."""
    without = []
    for name, constraint in searches(results, budgets):
        output = os.path.join(results, f"evolve_{name}")
        log(f"evolve {name}: {' '.join(constraint[:2])}")
        result_path = os.path.join(output, "result.json")
        before = file_version(result_path)
        try:
            # (paths relative to the checkout, where the CLI runs: result.json's train_command and latency_of name
            # the committed results' files, not this machine's folders)
            # (the measurement's settings only under a latency budget, whose fittest candidates are measured
            # beside the reference: evolve refuses them where it measures nothing)
            measured = constraint[0] == "--latency-of"
            confirm = ["--confirm", str(scale.confirm)] if measured and scale.confirm is not None else []
            reference = ["--reference", relative(reference_file(results))] if measured else []
            searched = search_cli(ctx, "evolve", "--space", relative(SPACE), "--fitness", "ranker",
                                  "--ranker", relative(os.path.join(results, "ranker_loss", "ranker.txt")),
                                  "--checkpoint", relative(require_finished_supernet(checkpoint, results)), *constraint,
                                  *scale.latency_options(measured), *scale.evolution_options, *confirm, *reference,
                                  "--output", relative(output))
            if searched.get("done_before"):
                log(f"evolve {name}: done before (the same inputs)")
        except quality.CommandFailed as error:  # (only the command's one-line error; a crash goes on)
            message = error.one_line_error()
            if not (message is not None and missed(results, name) is not None
                    and file_version(result_path) != before):  # (written by this search)
                raise
            log(f"evolve {name}: {message}; no found row at this budget for now (the next run of the evolve stage "
                "searches it again)")
            without.append(name)
    if without:
        log(f"evolve: {count(len(without), 'budget')} without an architecture within it: {', '.join(without)}")


# ------------------------------------------------------------------- the plan ---
@dataclass(frozen=True)
class Planned:
    """One architecture trained from scratch at B: its row name, its group (``layout``: a hand-written layout,
    bench-quality's row; ``scaled``: a scaled baseline; ``found``: found at a latency budget; ``found_flops``: at
    the FLOPs budget; ``spread``: added for the ranking), its architecture (dict) and seeds; ``trained_as``: the
    row planned before it with the same architecture (a search may find its own baseline, or two budgets the
    same architecture), whose trainings it shares (``shared``)."""
    name: str
    group: str
    architecture: dict
    seeds: Tuple[int, ...]
    trained_as: Optional["Planned"] = None


def evolved(results: str, budgets: Optional[dict]) -> Dict[str, Optional[dict]]:
    """name of the found row -> best.json's architecture of each budget's search (None: not searched yet, or
    searched without an architecture within the budget: ``missed``)."""
    if budgets is None:
        return {}
    return {f"found_{name}": finished_best(results, name) for name, _ in searches(results, budgets)}


def read_budgets(results: str) -> Optional[dict]:
    path = os.path.join(results, "budgets.json")
    return json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None


def plan(results: str, scale: Scale = REAL) -> List[Planned]:
    """Every row trained from scratch, as far as the finished stages decide it: the hand-written layouts at
    bench-quality's seeds (cosFormer everywhere at one), once ``budgets`` ran the three scaled baselines at three
    seeds, once ``evolve`` ran the found architectures (latency budgets: three seeds; FLOPs budget: one), and
    the spread architectures (``spread.jsonl``: one seed each); every row at ``scale.seeds`` where it names them."""
    rows = [Planned(name, "layout", layout_architecture(name).to_dict(), quality.seeds_of(CONVERGED, CONVERGED_ROWS[name]))
            for name in LAYOUTS]
    budgets = read_budgets(results)
    if budgets is not None:
        family = scaled_family()
        rows += [Planned(name, "scaled", family[name].to_dict(), SEEDS) for name in budgets["baselines"]]
    for name, architecture in evolved(results, budgets).items():
        if architecture is not None:
            rows.append(Planned(name, "found_flops" if name.startswith("found_flops_") else "found", architecture,
                                ONE_SEED if name.startswith("found_flops_") else SEEDS))
    rows += [Planned(f"spread_{r['index']:02d}", "spread", r["architecture"], ONE_SEED)
             for r in read_jsonl(os.path.join(results, "spread.jsonl"))]
    return shared(rows if scale.seeds is None else [replace(row, seeds=scale.seeds) for row in rows])


def shared(rows: Sequence[Planned]) -> List[Planned]:
    """``rows`` with each row whose architecture a row before it has ``trained_as`` that one: the same
    architecture at the same seed is the same training (the seed decides the initialisation and the batches),
    so it runs once and both rows report it."""
    first: Dict[str, Planned] = {}
    kept = []
    for row in rows:
        key = architecture_key(row.architecture)
        kept.append(row if key not in first else replace(row, trained_as=first[key]))
        first.setdefault(key, row)
    return kept


def choose_spread(results: str, scale: Scale = REAL) -> List[dict]:
    """Once every other row is decided (the budgets searched), the single-seed architectures that bring the
    distinct architectures trained from scratch to ``scale.ranked``: evenly spaced FLOPs quantiles of
    ``scale.spread_pool`` seeded samples of the space (supernet_ranking's choice), none already planned; chosen
    once (``spread.jsonl``)."""
    path = os.path.join(results, "spread.jsonl")
    if os.path.isfile(path):
        return read_jsonl(path)
    found = evolved(results, read_budgets(results))
    # (a budget searched without a result counts as searched: its search again may add a found row beyond ranked)
    if not found or any(a is None and missed(results, name[len("found_"):]) is None for name, a in found.items()):
        log("spread: waits for the budgets' searches (evolve)")
        return []
    planned = {architecture_key(p.architecture) for p in plan(results)}
    needed = scale.ranked - len(planned)
    picks: List[dict] = []
    count = needed
    while len(picks) < needed:
        picks = [a for a in supernet_ranking.spread_architectures(SPACE, count, scale.spread_pool, SPREAD_SEED)
                 if architecture_key(a) not in planned]
        count += 1
    records = [{"index": i, "architecture": a, "pool": scale.spread_pool, "seed": SPREAD_SEED} for i, a in enumerate(picks)]
    with atomic_output(path) as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
    return records


def distinct(rows: Sequence[Planned]) -> List[Planned]:
    """The first row of every distinct architecture (those ``shared`` trains as themselves)."""
    return [row for row in shared(rows) if row.trained_as is None]


def inherited(ctx: Context, results: str, rows: Sequence[Planned]):
    """The validation loss inside the supernet of every distinct planned architecture (supernet_ranking.py's
    ``inherited.jsonl``, against the supernet that ``supernet.json`` records)."""
    supernet_ranking.inherited_losses(ctx, results, [row.architecture for row in distinct(rows)])


def quality_row(results: str, row: Planned) -> Tuple[quality.Suite, quality.Row]:
    """The row as bench-quality trains it: a layout is its multi30k_converged row itself; any other architecture
    is written to ``results/architectures/NAME.json`` (committed: the command names it relative to the
    checkout, so that the row's fingerprint is the same on every machine) and trained with the same settings.
    A row ``trained_as`` another is that row's training."""
    row = row.trained_as or row
    if row.group == "layout":
        return CONVERGED, CONVERGED_ROWS[row.name]
    path = architecture_file(results, row.name, row.architecture)
    return SEARCH_SUITE, quality.Row(row.name, supernet_ranking.SCRATCH_PRESET, ("--architecture-file", relative(path)),
                                     seeds=row.seeds)


def architecture_file(results: str, name: str, architecture: dict) -> str:
    """``results/architectures/NAME.json`` holding ``architecture`` (written when it differs), as
    ``--architecture-file`` and ``search evolve --latency-of`` read it."""
    path = os.path.join(results, "architectures", f"{name}.json")
    text = json.dumps(architecture, sort_keys=True) + "\n"
    if not os.path.isfile(path) or open(path, encoding="utf-8").read() != text:
        with atomic_output(path) as f:
            f.write(text)
    return path


def record_path(results: str, name: str, seed: int) -> str:
    return os.path.join(results, "train", f"{name}_seed{seed}.json")


def trained(ctx: Context, results: str, row: Planned, seed: int) -> bool:
    """Whether (row, seed) has its record with the current settings (B, data, command)."""
    path = record_path(results, row.name, seed)
    if not os.path.isfile(path):
        return False
    suite, qrow = quality_row(results, row)
    stored = json.load(open(path, encoding="utf-8")).get("fingerprint")
    return stored == quality.fingerprint(quality.row_settings(ctx, suite, qrow, seed))


def pending(ctx: Context, results: str, rows: Sequence[Planned]) -> List[Tuple[Planned, int]]:
    """(row, seed) still to train, seed by seed (a stage cut off has trained every row once before any twice),
    the rows ``trained_as`` another last (by then that training has finished: theirs is read back, not waited
    for in a second job)."""
    todo = [(row, seed) for seed in sorted({s for row in rows for s in row.seeds}) for row in rows
            if seed in row.seeds and not trained(ctx, results, row, seed)]
    return [t for t in todo if t[0].trained_as is None] + [t for t in todo if t[0].trained_as is not None]


RECORD_KEYS = ("params", "gflops", "updates", "train_seconds", "valid", "hypotheses", "train_command", "evaluate_command",
               "fingerprint", "git", "torch", "fairseq", "cores", "cpu", "load_average", "threads", "device", "finished")


def train_one(ctx: Context, results: str, row: Planned, seed: int):
    """bench-quality's ``run_row`` (which reads its own result back when that training finished before, e.g. in
    ``benchmarks/quality.py --suites multi30k_converged``), then this run's small record (committed)."""
    suite, qrow = quality_row(results, row)
    log(f"train: {row.name} seed {seed}" + (f" (the training of {row.trained_as.name})" if row.trained_as else ""))
    result = quality.run_row(ctx, suite, qrow, seed=seed)
    record = {"name": row.name, "group": row.group, "seed": seed, "architecture": row.architecture,
              **({"trained_as": row.trained_as.name} if row.trained_as else {}),
              "bleu": result["score"]["sacrebleu"], "suite": suite.name,
              "result": relative(quality.result_path(ctx, suite, qrow, seed)),
              **{key: result[key] for key in RECORD_KEYS if key in result}}
    write_json(record_path(results, row.name, seed), record)


def train(ctx: Context, results: str, rows: Sequence[Planned], jobs: int):
    todo = pending(ctx, results, rows)
    log(f"train: {len(todo)} trainings to go ({jobs} at once, on {ctx.device})")
    quality.run_parallel(ctx, [functools.partial(train_one, ctx, results, row, seed) for row, seed in todo], jobs)


def training_count(rows: Sequence[Planned]) -> int:
    """The trainings ``rows`` run: a row ``trained_as`` another shares its (architecture, seed) trainings."""
    return len({((row.trained_as or row).name, seed) for row in rows for seed in row.seeds})


# ------------------------------------------------------------------- the target ---
@dataclass(frozen=True)
class Point:
    """One row on the BLEU-latency plane: its relative latency, mean BLEU over seeds and their spread (std)."""
    name: str
    relative_latency: float
    bleu: float
    spread: float = 0.0


def pareto_front(points: Sequence[Point]) -> List[Point]:
    """The points no other point dominates (as fast or faster and as good or better, one of them strictly),
    by latency."""
    def dominated(p: Point) -> bool:
        return any(q.relative_latency <= p.relative_latency and q.bleu >= p.bleu
                   and (q.relative_latency < p.relative_latency or q.bleu > p.bleu) for q in points)

    return sorted((p for p in points if not dominated(p)), key=lambda p: (p.relative_latency, p.name))


def front_verdict(found: Sequence[Point], baselines: Sequence[Point]) -> dict:
    """Issue 33's target: the found front dominates the scaled-softmax front. For every baseline on the
    baselines' Pareto front, the best found architecture of equal or lower latency must be at least as good
    (its BLEU at least the baseline's), and at one of them at least better by more than the seed spread
    (the larger std of the two). Returns ``met``, one comparison per front baseline (the found row, ``margin``
    = found - baseline BLEU, ``spread``) and, when missed, ``shortfall``: the largest BLEU the found rows lack
    at a baseline (``deficit``; None where no found architecture is as fast: ``unreached``), else how much
    more than its spread the best margin needed (``spread_gap``)."""
    comparisons = []
    for baseline in pareto_front(baselines):
        within = [f for f in found if f.relative_latency <= baseline.relative_latency]
        if not within:
            comparisons.append({"baseline": baseline.name, "found": None, "margin": None, "spread": None})
            continue
        best = max(within, key=lambda f: (f.bleu, -f.relative_latency, f.name))
        comparisons.append({"baseline": baseline.name, "found": best.name, "margin": best.bleu - baseline.bleu,
                            "spread": max(best.spread, baseline.spread)})
    reached = [c for c in comparisons if c["found"] is not None]
    as_good = bool(comparisons) and len(reached) == len(comparisons) and all(c["margin"] >= 0 for c in reached)
    beyond = any(c["margin"] > c["spread"] for c in reached)
    verdict = {"met": as_good and beyond, "comparisons": comparisons}
    if not verdict["met"]:
        deficits = [-c["margin"] for c in reached if c["margin"] < 0]
        verdict["shortfall"] = {"unreached": [c["baseline"] for c in comparisons if c["found"] is None],
                                "deficit": max(deficits) if deficits else None,
                                "spread_gap": min((c["spread"] - c["margin"] for c in reached), default=None) if not beyond else None}
    return verdict


def verdict_text(verdict: dict) -> str:
    def comparison(c: dict) -> str:
        if c["found"] is None:
            return f"{c['baseline']}: no found architecture as fast"
        return f"{c['baseline']}: {c['found']} {c['margin']:+.2f} BLEU (spread {c['spread']:.2f})"

    if not verdict["comparisons"]:
        return "not decided yet (no scaled baseline and found architecture trained)"
    lines = "; ".join(comparison(c) for c in verdict["comparisons"])
    if verdict["met"]:
        return f"**met**: the found front dominates the scaled-softmax front ({lines})"
    short = verdict["shortfall"]
    why = []
    if short["unreached"]:
        why.append(f"no found architecture is as fast as {', '.join(short['unreached'])}")
    if short["deficit"] is not None:
        why.append(f"the found rows lack up to {short['deficit']:.2f} BLEU at a baseline's latency")
    if short["spread_gap"] is not None:
        why.append(f"no margin exceeds the seed spread (the closest falls {short['spread_gap']:.2f} BLEU short)")
    return f"**missed**: {'; '.join(why)} ({lines})"


# ------------------------------------------------------------------- report ---
def load_runs(results: str) -> Dict[str, List[dict]]:
    runs: Dict[str, List[dict]] = {}
    folder = os.path.join(results, "train")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        record = json.load(open(os.path.join(folder, name), encoding="utf-8"))
        runs.setdefault(record["name"], []).append(record)
    for records in runs.values():
        records.sort(key=lambda r: r["seed"])
    return runs


def trainings_done(runs: Dict[str, List[dict]]) -> int:
    """The trainings the records hold (a row ``trained_as`` another counts that one's training)."""
    return len({(r.get("trained_as") or r["name"], r["seed"]) for records in runs.values() for r in records})


def summary(runs: Dict[str, List[dict]], latencies: Dict[str, dict]) -> Dict[str, dict]:
    """name -> BLEU per seed, mean and std, parameters, mean validation loss, and the protocol's latency (ms,
    relative) and counted GFLOPs of its architecture (``latencies``: by architecture key)."""
    rows = {}
    for name, records in runs.items():
        bleus = [r["bleu"] for r in records]
        latency = latencies.get(architecture_key(records[0]["architecture"]))
        losses = [r["valid"]["loss"] for r in records if "loss" in (r.get("valid") or {})]
        rows[name] = {"group": records[0]["group"], "trained_as": records[0].get("trained_as"),
                      "architecture": records[0]["architecture"],
                      "seeds": [r["seed"] for r in records], "bleus": bleus, "bleu_mean": statistics.fmean(bleus),
                      "bleu_std": statistics.stdev(bleus) if len(bleus) > 1 else 0.0, "params": records[0]["params"],
                      "valid_loss": statistics.fmean(losses) if losses else None,
                      "latency_ms": latency["latency_ms"] if latency else None,
                      "relative_latency": latency["relative_latency"] if latency else None,
                      "gflops": latency["gflops"] if latency else records[0].get("gflops")}
    return rows


def points(rows: Dict[str, dict], groups: Sequence[str]) -> List[Point]:
    return [Point(name, row["relative_latency"], row["bleu_mean"], row["bleu_std"]) for name, row in rows.items()
            if row["group"] in groups and row["relative_latency"] is not None]


# the scaled-softmax front: the scaled baselines and the softmax layout (scale 1); the found front: every
# found row (latency and FLOPs budgets)
BASELINE_GROUPS = ("scaled", "softmax")
FOUND_GROUPS = ("found", "found_flops")


def row_points(rows: Dict[str, dict]) -> Tuple[List[Point], List[Point]]:
    """(found, baselines) of the target."""
    tagged = {name: {**row, "group": "softmax" if name == BASELINE else row["group"]} for name, row in rows.items()}
    return points(tagged, FOUND_GROUPS), points(tagged, BASELINE_GROUPS)


def ranking_lines(results: str, rows: Dict[str, dict], ranked: int = RANKED) -> List[str]:
    """Kendall's tau of the inherited order against the from-scratch one (validation loss at B, mean over
    seeds) beside parameter count and FLOPs (supernet_ranking.py's bootstrap), the rankers over the held-out
    splits, and the latency predictor's share within 10 %."""
    lines = []
    inherited = {architecture_key(r["architecture"]): r for r in read_jsonl(os.path.join(results, "inherited.jsonl"))}
    complete, seen = [], set()
    for row in rows.values():
        key = architecture_key(row["architecture"])
        if key in inherited and row["valid_loss"] is not None and key not in seen:
            seen.add(key)
            complete.append((row["architecture"], inherited[key], {"loss": row["valid_loss"], "params": row["params"]}))
    if len(complete) >= 3:
        table = supernet_ranking.trivial_baselines(complete)  # (its first line says what the table holds)
        lines += [f"**Ranking** ({len(complete)} distinct architectures trained from scratch at B, target {ranked}): the "
                  "inherited validation loss inside the supernet against the from-scratch validation loss (mean over "
                  "seeds). " + table[0], "", *table[2:]]
    else:
        lines += [f"Ranking: not yet ({len(complete)} architectures with both losses; target {ranked}).", ""]
    report = os.path.join(results, "ranker_loss", "report.json")
    if os.path.isfile(report):
        splits = json.load(open(report, encoding="utf-8")).get("held_out_splits")
        if splits:
            p, q = splits["pairwise"], splits["pointwise"]
            lines += [f"* Rankers of the inherited loss over {splits['splits']} random held-out splits: pairwise Kendall tau "
                      f"{p['mean']:.3f} ± {p['std']:.3f}, pointwise {q['mean']:.3f} ± {q['std']:.3f} (mean ± std); the "
                      f"pairwise one better in {splits['pairwise_better']} of {splits['splits']}."]
    report = os.path.join(results, "ranker_relative_latency", "report.json")
    if os.path.isfile(report):
        r = json.load(open(report, encoding="utf-8"))
        over = (r.get("held_out_splits") or {}).get("pointwise", {})
        if "within_10_percent" in over:  # judged over every held-out split
            share, per = over["within_10_percent"], over["within_10_percent_per_split"]
            lines += [f"* Latency predictor (the pointwise model of the relative latency) over {r['held_out_splits']['splits']} "
                      f"random held-out splits: {share:.0%} of {over['held_out_predictions']} held-out predictions within 10 % "
                      f"(per split {per['mean']:.0%} ± {per['std']:.0%}; target 90 %: {'met' if share >= 0.9 else 'missed'}), "
                      f"mean relative error {over['mean_relative_error']:.1%}."]
        else:  # (a report of one split)
            share = r["pointwise"]["within_10_percent"]
            lines += [f"* Latency predictor (the pointwise model of the relative latency): {share:.0%} of {r['held_out']} "
                      f"held-out architectures within 10 % (one split; target 90 %: {'met' if share >= 0.9 else 'missed'}), "
                      f"mean relative error {r['pointwise']['mean_relative_error']:.1%}."]
    return lines + [""] if lines[-1] else lines


def kinds_cell(a: dict) -> str:
    return " / ".join("".join(l[k][0] for l in a[side]) for side, k in (
        ("encoder_layers", "attention_kind"), ("decoder_layers", "attention_kind"), ("decoder_layers", "cross_attention_kind")))


def plot(rows: Dict[str, dict], path: str):
    """BLEU against relative latency (the found and the scaled-softmax fronts drawn) and against FLOPs."""
    figure, axes = new_figure(1, 2, figsize=(12, 4.8))
    found, baselines = row_points(rows)
    markers = {"found": "*", "found_flops": "P", "scaled": "s", "layout": "o", "spread": "."}
    for axis, key, label in ((axes[0], "relative_latency", "latency relative to the softmax layout (beam 5, 30 + 30 tokens, 1 core)"),
                             (axes[1], "gflops", "forward GFLOPs (30 + 30 tokens)")):
        for name, row in sorted(rows.items()):
            if row[key] is None:
                continue
            marker = markers[row["group"]]
            axis.errorbar(row[key], row["bleu_mean"], yerr=row["bleu_std"], fmt=marker, capsize=3,
                          markersize=10 if marker == "*" else 5 if marker == "." else 6,
                          label=name if row["group"] != "spread" else None, alpha=0.5 if row["group"] == "spread" else 1.0)
        if key == "relative_latency":
            for front, style, label_text in ((pareto_front(found), "-", "found front"),
                                             (pareto_front(baselines), "--", "scaled-softmax front")):
                if front:
                    axis.step([p.relative_latency for p in front], [p.bleu for p in front], style, where="post",
                              color="black", alpha=0.6, label=label_text)
        axis.legend(fontsize=6, loc="best")
        axis.set_xlabel(label)
        axis.set_ylabel("sacreBLEU, test 2016 (mean ± std over seeds)")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    save_png(figure, path)


def table_lines(ctx: Optional[Context], runs: Dict[str, List[dict]], rows: Dict[str, dict]) -> List[str]:
    references = scored_references(ctx, DATA_SUITE) if ctx else None
    lines = ["| architecture | group | kinds (enc / dec / cross) | params | GFLOPs | latency (ms) | relative latency | "
             "BLEU per seed | mean ± std | paired bootstrap vs softmax (concatenated seeds) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for name, row in sorted(rows.items(), key=lambda item: (item[1]["relative_latency"] or 0, item[0])):
        test = "-"
        if name != BASELINE and BASELINE in runs:
            paired, why = quality.paired_over_seeds(CONVERGED, runs[name], runs[BASELINE], references)
            test = (f"{paired.ours:.2f} vs {paired.theirs:.2f}, {quality.format_p(paired.p_value)}" if paired else why)
        latency = f"{row['latency_ms']:.1f}" if row["latency_ms"] is not None else "-"
        rel = f"{row['relative_latency']:.3f}" if row["relative_latency"] is not None else "-"
        gflops = format(row["gflops"], ".3f") if row["gflops"] is not None else "-"
        group = row["group"] + (f" (= {row['trained_as']})" if row.get("trained_as") else "")
        lines.append(f"| {name} | {group} | {kinds_cell(row['architecture'])} | {row['params']:,} | {gflops} | "
                     f"{latency} | {rel} | {', '.join(format(b, '.2f') for b in row['bleus'])} | "
                     f"{row['bleu_mean']:.2f} ± {row['bleu_std']:.2f} | {test} |")
    return lines + [""]


def budget_lines(results: str) -> List[str]:
    budgets = read_budgets(results)
    if budgets is None:
        return []
    family = ", ".join(f"{name} {r['relative_latency']:.3f}x ({r['latency_ms']:.1f} ms, {r['gflops']:.3f} GFLOPs)"
                       for name, r in sorted(budgets["family"].items(), key=lambda item: item[1]["relative_latency"]))
    return [f"* Measured by the protocol beside the softmax layout (relative latency, ms, counted GFLOPs): {family}.",
            f"* Scaled baselines (nearest to {', '.join(f'{t:g}x' for t in budgets['targets'])}): "
            f"{', '.join(budgets['baselines'])}; latency budgets (relative): "
            + ", ".join(f"{name} {value}" for name, value in budgets["relative_latency"].items())
            + f"; FLOPs budget: {budgets['gflops']['limit']} GFLOPs ({budgets['gflops']['of']}'s)."]


QUICK_NOTE = ("**A smoke run (`--quick`)**: every stage at toy size (the first lines of the data, a few updates, the "
              "latency protocol at its minimum, one seed); its numbers measure nothing.")


def render(ctx: Optional[Context], results: str, command: str, plot_path: Optional[str], scale: Scale = REAL) -> str:
    lines = [REPORT_BEGIN, "", "## Measured: the search on Multi30k de-en at the convergence budget, against scaled baselines", ""]
    if scale == QUICK:
        lines += [QUICK_NOTE, ""]
    runs = load_runs(results)
    stages = json.load(open(os.path.join(results, "stages.json"), encoding="utf-8")) if os.path.isfile(
        os.path.join(results, "stages.json")) else {}
    lines += [f"Rendered by `{command}` from `{relative(results)}/` (committed stage results; each records its revision, "
              "machine and command). Space: `search_spaces/multi30k_bracket.yaml`.", ""]
    updates = sorted({r.get("updates") for records in runs.values() for r in records if r.get("updates")})
    planned = plan(results, scale)
    lines += [f"* Every from-scratch row: {', '.join(map(str, updates)) or 'B'} updates (the convergence budget B of "
              "`benchmarks/convergence.py --suite multi30k`), bench-quality's `multi30k_converged` settings; the "
              "hand-written layouts are that suite's rows (the same trainings). Scored as those rows are, beam 5: "
              "`checkpoint_best.pt`, or the average of the last ten checkpoints where the convergence ladder showed "
              "averaging helping softmax on the validation set at B.",
              f"* Planned: {count(len(distinct(planned)), 'distinct architecture')}, "
              f"{count(training_count(planned), 'training')}; {count(trainings_done(runs), 'training')} done."]
    lines += collection_lines(results)
    lines += budget_lines(results)
    lines += evolution_lines(results)
    supernet_path = os.path.join(results, "supernet.json")
    if os.path.isfile(supernet_path):
        supernet = json.load(open(supernet_path, encoding="utf-8"))
        stages = {"supernet": {"seconds": supernet["train_seconds"], "runs": [supernet]}, **stages}
    if stages:
        lines.append("* Time of each stage on the machines its runs name, wall (and CPU: user + system of the stage's "
                     "processes): " + ", ".join(stage_time(name, entry) for name, entry in stages.items()) + ".")
    lines.append("")
    latencies = {architecture_key(r["architecture"]): r for r in read_jsonl(os.path.join(results, MEASURED))}
    rows = summary(runs, latencies)
    if rows:
        lines += table_lines(ctx, runs, rows)
        found, baselines = row_points(rows)
        lines += [f"**Target** (the found front dominates the scaled-softmax front: for every baseline on it, a found "
                  "architecture of equal or lower latency at least as good, and better by more than the seed spread at "
                  f"one at least): {verdict_text(front_verdict(found, baselines))}.", ""]
        if plot_path:
            plot(rows, plot_path)
            lines += [f"![BLEU against relative latency and FLOPs]({os.path.basename(plot_path)})", ""]
        lines += ranking_lines(results, rows, scale.ranked)
        example = next(iter(runs.values()))[0]
        lines += ["One training (the others differ in the architecture and `SEED`):", "", "```bash",
                  example.get("train_command", ""), "```", ""]
    else:
        lines += ["No architecture trained from scratch yet.", ""]
    return "\n".join(lines + [REPORT_END, ""])


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def stage_time(name: str, entry: dict) -> str:
    """"train 2.10 h (CPU 3.50 h in 12 of 21 runs; 1 run interrupted)": the wall time of every run, the CPU time
    of the runs that recorded it."""
    runs = entry["runs"]
    notes = []
    with_cpu = [run for run in runs if "cpu_seconds" in run]
    if with_cpu:
        notes.append(f"CPU {duration(sum(run['cpu_seconds'] for run in with_cpu))}"
                     + ("" if len(with_cpu) == len(runs) else f" in {len(with_cpu)} of {count(len(runs), 'run')}"))
    interrupted = sum(1 for run in runs if run.get("interrupted"))
    if interrupted:
        notes.append(f"{count(interrupted, 'run')} interrupted")
    return f"{name} {duration(entry['seconds'])}" + (f" ({'; '.join(notes)})" if notes else "")


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def collection_lines(results: str) -> List[str]:
    """What ``collect`` gathered: architectures sampled per target, and the latency samples dropped because their
    spread stayed above the limit after the re-measurements (their records are kept, marked ``dropped``)."""
    lines = []
    for what in ("loss", "latency"):
        path = os.path.join(results, f"{what}.jsonl")
        if not os.path.isfile(path):
            continue
        records = read_jsonl(path)
        header = next((r for r in records if r.get("record") == "collection"), {})
        samples = [r for r in records if r.get("record") != "collection"]
        dropped = sum(1 for r in samples if r.get("dropped"))
        text = f"* Collected ({what}): {len(samples)} sampled architectures"
        if what == "latency":
            settings = header.get("latency", {})
            text += (f", each measured {settings.get('repeats', '?')} times after {settings.get('warmup', '?')} warm-up runs "
                     f"(beam {settings.get('beam', '?')}, {settings.get('source_length', '?')} source tokens, "
                     f"{settings.get('decoder_steps', '?')} decoder steps, {settings.get('threads', '?')} threads); "
                     f"{dropped} dropped (spread, stdev / trimmed mean, still above {header.get('max_spread', '?')} after "
                     f"{header.get('remeasure', '?')} re-measurements), so {len(samples) - dropped} used")
        else:
            text += f", inherited {header.get('subset', 'valid')} loss"
        lines.append(text + ".")
    return lines


UNITS = {"--latency-ms": " ms", "--relative-latency": "x the reference", "--flops": " GFLOPs", "--params": " M parameters"}


def budget_text(result: dict, option: str, limit: float) -> str:
    """A search's budget as the report names it: ``--latency-of`` the latency of the baseline its name names
    (the predictor's value for it, and its measurement beside the final candidates), or the bound and its unit."""
    of = result.get("latency_of")
    if option != "--latency-of" or not of:
        return f"{limit}{UNITS.get(option, ' ' + option)}"
    key = latency_key(result)
    unit = (lambda value: f"{value:.3f}x") if key == "relative_latency" else (lambda value: f"{value:.1f} ms")
    beside = of.get("measurements", [of] if key in of else [])  # (one per group of candidates measured beside it)
    measured = f", measured {', '.join(unit(m[key]) for m in beside)} beside the final candidates" if beside else ""
    return (f"as fast as the baseline: predicted {unit(limit)}{' the reference' if key == 'relative_latency' else ''}"
            f"{measured}")


def latency_key(result: dict) -> str:
    """What a search's latency budget bounds: ``latency_ms`` or ``relative_latency`` (``--latency-of``: what its
    predictor predicts)."""
    of = result.get("latency_of") or {}
    return "latency_ms" if "--latency-ms" in result["constraints"] or "predicted_latency_ms" in of else "relative_latency"


def evolution_lines(results: str) -> List[str]:
    """One line per budget searched (``evolve_*/result.json``): the search's length, the best architecture
    within the budget, its predicted and measured latency, and how many measured candidates met the budget."""
    found = [(folder[len("evolve_"):], json.load(open(os.path.join(results, folder, "result.json"), encoding="utf-8")))
             for folder in sorted(os.listdir(results))
             if folder.startswith("evolve_") and os.path.isfile(os.path.join(results, folder, "result.json"))]
    if not found:
        return []
    s = found[0][1]["settings"]
    lines = [f"* Evolution (population {s['population']}, {s['parents']} parents, {s['mutations']} mutations with per-gene "
             f"probability {s['mutation_probability']}, {s['crossovers']} crossovers, at most {s['iterations']} iterations, "
             + (f"stopped after {s['patience']} without improvement" if s.get('patience') else "no early stop")
             + "; fitness: the loss ranker; the latency predicted by the latency regressor, then the final candidates "
             "measured):"]
    for name, result in found:
        best, confirmed = result["best"], result["confirmed_latency"] or []  # (None: a FLOPs budget, counted)
        history = result["history"]
        budget = ", ".join(budget_text(result, option, limit) for option, limit in result["constraints"].items())
        if result.get("unsatisfiable"):  # (``missed``: searched again by the next run of the evolve stage)
            lines.append(f"  * {name} ({budget}): **no architecture**: {result['unsatisfiable']} (the same at every "
                         "search of these inputs: loosen it); no found row at this budget.")
            continue
        searched = (f"  * {name} ({budget}): {count(len(history), 'iteration')}"
                    f"{' (stopped early)' if result['stopped_early'] else ''}, {history[-1]['evaluated']:,} architectures evaluated; ")
        if best is None:  # (``missed``: searched again by the next run of the evolve stage)
            key = latency_key(result)
            measured = ", ".join(f"{c[key]:.3g}" for c in confirmed)
            of = result.get("latency_of") or {}
            beside = ("; the baseline beside them: " + ", ".join(f"{m[key]:.3g}" for m in of.get("measurements", [of]))
                      if key in of else "")
            lines.append(searched + f"**no architecture**: none of the {len(confirmed)} fittest final candidates measured "
                         f"within the budget (measured: {measured}{beside}); no found row at this budget yet.")
            continue
        measured = next((c for c in confirmed if c["architecture"] == best["architecture"]), None)
        measured_text = (f"measured {measured['latency_ms']:.1f} ± {measured['stdev_ms']:.1f} ms"
                         + (f", {measured['relative_latency']:.3f}x the reference" if "relative_latency" in measured else "")
                         if measured else "not measured")
        predicted = (f"latency predicted {best['latency_ms']:.1f} ms" if "latency_ms" in best else
                     f"relative latency predicted {best['relative_latency']:.3f}" if "relative_latency" in best else "")
        lines.append(
            searched + f"best: {supernet_ranking.describe(best['architecture'])}; {best['mparams']:.2f} M parameters, "
            f"{best['gflops']:.3f} GFLOPs; "
            + (f"{predicted}, {measured_text}; {sum(c['within_budget'] for c in confirmed)} of {len(confirmed)} measured "
               "candidates within the budget." if result["confirmed_latency"] is not None else "FLOPs counted, not measured."))
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages (default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"), help="the shared data")
    parser.add_argument("--work-dir", help="the supernet and the search's data (default: work_dirs/search_multi30k_converged; "
                                           "--quick: work_dirs/search_multi30k_quick)")
    parser.add_argument("--quality-work-dir", help="bench-quality's work folder, where every from-scratch row trains (shared "
                                                   "with its multi30k_converged suite; default: work_dirs/bench_quality; "
                                                   "--quick: the --work-dir)")
    parser.add_argument("--results", help="the stages' small results, committed (default: "
                                          "docs/records/data/search_multi30k_converged; --quick: WORK_DIR/records)")
    parser.add_argument("--supernet-updates", type=int, help=f"(default: {SUPERNET_FACTOR} B; --quick: {QUICK.supernet_updates})")
    parser.add_argument("--loss-samples", type=int, help=f"(default: {REAL.loss_samples}; --quick: {QUICK.loss_samples})")
    parser.add_argument("--latency-samples", type=int, help=f"(default: {REAL.latency_samples}; --quick: {QUICK.latency_samples})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the supernet and the rows train (cuda: one GPU, float32); latency is always "
                             "measured on the CPU by the protocol (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once (default: %(default)s; a GPU holds a dozen+)")
    parser.add_argument("--output", help="the report (default: docs/records/search.md; --quick: none unless given, printed)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: every stage for real at toy size (the first lines of the data, bench-quality's "
                             "quick budget for the rows, a few updates for the supernet, no convergence budget needed, the "
                             "latency protocol at its minimum, a small evolution, one seed); nothing written outside the "
                             "work folder but --output")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report")
    parser.add_argument("--allow-dirty", action="store_true", help="measure with uncommitted changes (recorded); "
                                                                   "--quick never asks")
    args = parser.parse_args(argv)
    stages = supernet_ranking.parse_stages(parser, args.stages, STAGES)
    if args.jobs < 1:
        parser.error(f"--jobs: expected at least 1, got {args.jobs}")
    for option in ("supernet_updates", "loss_samples", "latency_samples"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')}: expected at least 1, got {getattr(args, option)}")
    # An option of a stage that does not run would be ignored: refused. (Where the runs go, --device, --jobs and
    # --quality-work-dir, may name stages that do not run: a lent GPU's one call passes them whatever it runs.)
    running = set() if args.report_only else set(stages)
    for option, given, readers in (("--supernet-updates", args.supernet_updates is not None, {"supernet"}),
                                   ("--loss-samples", args.loss_samples is not None, {"collect"}),
                                   ("--latency-samples", args.latency_samples is not None, {"collect"}),
                                   ("--jobs", args.report_only and args.jobs != 1, {"train"}),
                                   ("--device", args.report_only and args.device != "cpu", {"supernet", "train"}),
                                   ("--quality-work-dir", args.report_only and args.quality_work_dir, {"train"})):
        if given and not readers & running:
            parser.error(f"{option}: an option of the {' and '.join(sorted(readers))} stage"
                         f"{'s' * (len(readers) > 1)}, which "
                         f"{'--report-only does not run' if args.report_only else '--stages ' + args.stages + ' leaves out'} "
                         "(it would be ignored)")
    scale = QUICK if args.quick else REAL
    if not args.report_only and {"supernet", "train"} & set(stages):
        budget = convergence_budget(args.quick)  # (before any long work: a one-line error until B is measured)
        log(f"the convergence budget B: {budget} updates" + (" (--quick: bench-quality's quick budget)" if args.quick else ""))
    work_dir = os.path.abspath(args.work_dir or os.path.join(
        REPO, "work_dirs", "search_multi30k_quick" if args.quick else "search_multi30k_converged"))
    quality_work_dir = os.path.abspath(args.quality_work_dir or (
        work_dir if args.quick else os.path.join(REPO, "work_dirs", "bench_quality")))
    results = os.path.abspath(args.results or (
        os.path.join(work_dir, "records") if args.quick else os.path.join(REPO, "docs", "records", "data", "search_multi30k_converged")))
    output = args.output if args.output is not None else (None if args.quick else os.path.join(REPO, "docs", "records", "search.md"))
    os.makedirs(results, exist_ok=True)
    command = "python benchmarks/search_multi30k.py" + "".join(" " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    ctx = Context(data_root=os.path.abspath(args.data_root), work_dir=work_dir, quick=args.quick, device=args.device)
    if not args.report_only and "supernet" in stages:
        supernet_updates = args.supernet_updates or scale.supernet_updates or SUPERNET_FACTOR * budget
        supernet_env(ctx, supernet_updates, scale)  # (its one-line error before any long work)
    if not args.report_only:
        if not args.quick:
            require_committed(args.allow_dirty, "benchmarks/search_multi30k.py")
        signal.signal(signal.SIGTERM, quality.stop_on_sigterm)  # a stopped stage still records its time
        prepare(ctx, DATA_SUITE)
        times = Stages(results)
        checkpoint = supernet_checkpoint(ctx)
        if "supernet" in stages:  # (its time: supernet.json)
            train_supernet(ctx, results, supernet_updates, scale)
        if "collect" in stages:
            timed(times, "collect", collect, ctx, results, checkpoint, args.loss_samples or scale.loss_samples,
                  args.latency_samples or scale.latency_samples, scale)
        if "rank" in stages:
            timed(times, "rank", rank, ctx, results)
        if "budgets" in stages or "evolve" in stages:
            budgets = timed(times, "budgets", measure_budgets, results, checkpoint, scale)
            if "evolve" in stages:
                timed(times, "evolve", evolve, ctx, results, checkpoint, budgets, scale)
        choose_spread(results, scale)
        rows = plan(results, scale)
        log(f"plan: {count(len(distinct(rows)), 'distinct architecture')}, {count(training_count(rows), 'training')}")
        if "inherited" in stages:
            timed(times, "inherited", inherited, ctx, results, rows)
        if "train" in stages:
            quality_ctx = Context(data_root=ctx.data_root, work_dir=quality_work_dir, quick=args.quick, device=args.device)
            prepare(quality_ctx, CONVERGED)
            timed(times, "train", train, quality_ctx, results, rows, args.jobs)
        if "latency" in stages:
            timed(times, "latency", measured_latency, results, checkpoint,
                  {row.name: row.architecture for row in distinct(rows)}, scale)
    prepare(ctx, DATA_SUITE)  # (the references of the paired test)
    plot_path = os.path.join(os.path.dirname(os.path.abspath(output)), "search_pareto.png") if output else None
    report = render(ctx, results, command, plot_path, scale)
    if output:
        write_report(output, report, REPORT_BEGIN, REPORT_END)
        log(f"report: {relative(output)}")
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
