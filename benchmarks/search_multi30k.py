#!/usr/bin/env python
"""The architecture search on real data, measured (issue 15; docs/records/search.md): Multi30k de-en on this machine.

Stages, each resumable (a finished stage is read back from ``--results``, committed; checkpoints stay in
``--work-dir`` and are regenerated, not committed), each recording its revision, machine and time:

1. ``supernet``: the supernet of ``benchmarks/supernet_ranking.py`` (its supernet stage, trained there if
   missing).
2. ``collect``: inherited validation losses of ``--loss-samples`` and measured latencies of
   ``--latency-samples`` sampled architectures (beam 5, 30 source tokens, 30 decoder steps, batch 1; the
   latency protocol of ``fairseq_plugins/search/latency.py``: one process pinned to one core with one
   thread, each architecture interleaved with the softmax layout as the reference, in milliseconds and
   relative to it): ``python -m fairseq_plugins.search collect``.
3. ``rank``: the pairwise rankers and the pointwise baselines on the loss, the latency and the relative
   latency (``search rank``).
4. ``budgets``: the latency of the hand-written layouts at the space's size class (3 + 3 layers, width 128,
   FFN 512, 4 heads: softmax everywhere, cosFormer everywhere, cosFormer in the encoder, the mFormer layout
   of bench-quality) relative to the softmax reference, and the three budgets of relative latency: the
   mFormer layout's, 0.75x and 0.6x softmax's (``BUDGETS``; computed again when ``BUDGETS`` changes).
5. ``evolve``: ``search evolve`` at each budget (ranker fitness; the relative latency predicted, confirmed
   by measuring).
6. ``train``: every found architecture and every hand-written layout trained from scratch with
   bench-quality's Multi30k settings and ``--seeds`` seeds (``recipes/multi30k/train.sh`` with
   ``--architecture-file``), then ``generate.sh`` (sacreBLEU on test 2016 flickr, beam 5).
7. the report: BLEU mean and spread over seeds, paired bootstrap against softmax (sacreBLEU's, seed by
   seed), measured latency and counted FLOPs, the Pareto plots (BLEU against latency and against FLOPs,
   every point labelled), the CPU time of every stage, and whether the target holds.

    python benchmarks/search_multi30k.py                    # every stage (many hours on 2 CPU cores)
    python benchmarks/search_multi30k.py --stages collect   # one stage
    python benchmarks/search_multi30k.py --report-only      # re-render docs/records/search.md from the results
"""
import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import quality, supernet_ranking  # noqa: E402
from benchmarks.plotting import new_figure, save_png  # noqa: E402
from benchmarks.provenance import REPO, require_committed  # noqa: E402
from benchmarks.quality import (Context, paired_bleu, parse_train_log, prepare, recipe_env, relative,  # noqa: E402
                                scored_hypotheses, scored_references, shell_line, write_report)
from fairseq_plugins.files import atomic_output, write_json  # noqa: E402

STAGES = ("supernet", "collect", "rank", "budgets", "evolve", "train")
SUITE = supernet_ranking.SUITE
SPACE = supernet_ranking.SPACE
TRAIN_ENV = {**supernet_ranking.TRAIN_ENV, "GEN_EXTRA_ARGS": "--max-len-a 1.2 --max-len-b 10", "SUBSETS": "test"}
LATENCY = dict(source_length=30, decoder_steps=30, beam=5, threads=1)
LATENCY_OPTIONS = ["--source-length", str(LATENCY["source_length"]), "--target-length", str(LATENCY["decoder_steps"]),
                   "--beam", str(LATENCY["beam"]), "--threads", str(LATENCY["threads"])]
BASELINE = "softmax"
# The hand-written layouts at the space's size class: (encoder self, decoder self, cross) kinds per layer
LAYOUTS = {
    "softmax": (("softmax",) * 3, ("softmax",) * 3, ("softmax",) * 3),
    "cosformer_everywhere": (("cosformer",) * 3, ("cosformer",) * 3, ("cosformer",) * 3),
    "cosformer_encoder": (("cosformer",) * 3, ("softmax",) * 3, ("softmax",) * 3),
    "mformer": (("softmax", "cosformer", "softmax"), ("softmax",) * 3, ("softmax",) * 3),
}
# (layout, factor of its latency). Not 0.5x softmax's: 130 ms, below the fastest of the 292 sub-networks whose
# latency collect measured (143.5 ms, at 796fed2), so no architecture of the space meets it; 0.6x (156 ms)
# leaves 6 of the 292.
BUDGETS = (("mformer", 1.0), ("softmax", 0.75), ("softmax", 0.6))
SUPERNET_RESULTS = os.path.join(REPO, "docs", "records", "data", "supernet_multi30k")  # supernet_ranking.py's
REPORT_BEGIN = "<!-- search-multi30k:begin (written by benchmarks/search_multi30k.py; edit the script, not this section) -->"
REPORT_END = "<!-- search-multi30k:end -->"


def log(message: str):
    print(f"[search-multi30k] {message}", file=sys.stderr, flush=True)


def layout_architecture(name: str):
    from fairseq_plugins.models.architecture import Architecture, DecoderLayer, EncoderLayer

    encoder, decoder, cross = LAYOUTS[name]
    return Architecture(decoder_embed_dim=128, encoder_embed_dim=128,
                        encoder_layers=tuple(EncoderLayer(k, 4, 512) for k in encoder),
                        decoder_layers=tuple(DecoderLayer(k, 4, 512, c, 4, 1) for k, c in zip(decoder, cross))).check()


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
    output = ctx.run(SUITE.name, {}, [ctx.python, "-m", "fairseq_plugins.search", *argv], record=False)
    return json.loads(output.strip().splitlines()[-1])


# ------------------------------------------------------------------- stages ---
def reference_file(results: str) -> str:
    """The latency reference (the softmax layout) as ``--reference`` reads it."""
    path = os.path.join(results, "reference.json")
    with atomic_output(path) as f:
        f.write(layout_architecture(BASELINE).to_json() + "\n")
    return path


def collect(ctx: Context, results: str, checkpoint: str, loss_samples: int, latency_samples: int):
    latency = [*LATENCY_OPTIONS, "--reference", reference_file(results)]
    for what, n, extra in (("loss", loss_samples, []), ("latency", latency_samples, latency)):
        log(f"collect: {what} of {n} architectures (resumes {relative(os.path.join(results, what + '.jsonl'))})")
        search_cli(ctx, "collect", "--what", what, "--checkpoint", checkpoint, "--space", SPACE, "-n", str(n),
                   "--output", os.path.join(results, f"{what}.jsonl"), *extra)


def rank(ctx: Context, results: str):
    for target in ("loss", "latency", "relative_latency"):
        search_cli(ctx, "rank", "--data", os.path.join(results, f"{target}.jsonl"), "--target", target,
                   "--output", os.path.join(results, f"ranker_{target}"))


def measure_layouts(results: str, checkpoint: str) -> dict:
    """The latency of every hand-written layout inside the supernet (its exported sub-network, as collect
    measures: beside the softmax reference), and the budgets."""
    path = os.path.join(results, "budgets.json")
    stored = json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None
    if stored is not None and set(stored["layouts"]) == set(LAYOUTS) and all(
            "relative_latency" in m for m in stored["layouts"].values()):
        measured = stored["layouts"]
    else:
        from fairseq_plugins.search.latency import LatencySettings, measure_subnetwork
        from fairseq_plugins.search.subnetworks import load_supernet

        model, task, _ = load_supernet(checkpoint)
        settings = LatencySettings(**LATENCY)
        reference = layout_architecture(BASELINE)
        measured = {}
        for name in LAYOUTS:
            architecture = layout_architecture(name)
            model.space.check_contains(architecture, f"layout {name}")
            measured[name] = measure_subnetwork(model, task.target_dictionary, architecture, reference, settings)
            log(f"budgets: {name} {measured[name]['latency_ms']:.1f} ms, {measured[name]['relative_latency']:.3f}x softmax "
                f"(ratios spread {measured[name]['ratio_range']:.3f})")
    # the budgets follow BUDGETS, also when only BUDGETS changed since the layouts were measured
    result = {"layouts": measured, "budgets": budgets_of(measured)}
    if result != stored:
        write_json(path, result)
    return result


def budgets_of(measured: Dict[str, dict]) -> Dict[str, float]:
    """name -> relative latency (over the softmax reference's) of every budget in ``BUDGETS``, from the
    layouts' measured relative latencies."""
    return {f"{layout}_x{factor:g}": round(measured[layout]["relative_latency"] * factor, 4) for layout, factor in BUDGETS}


def evolve(ctx: Context, results: str, checkpoint: str, budgets: Dict[str, float]):
    for name, relative_latency in budgets.items():
        output = os.path.join(results, f"evolve_{name}")
        if os.path.isfile(os.path.join(output, "best.json")):
            log(f"evolve {name}: done before")
            continue
        log(f"evolve {name}: --relative-latency {relative_latency}")
        search_cli(ctx, "evolve", "--space", SPACE, "--fitness", "ranker", "--ranker", os.path.join(results, "ranker_loss", "ranker.txt"),
                   "--checkpoint", checkpoint, "--relative-latency", str(relative_latency),
                   "--latency-predictor", os.path.join(results, "ranker_relative_latency", "regressor.txt"),
                   *LATENCY_OPTIONS, "--reference", reference_file(results), "--output", output)


def candidates(results: str) -> Dict[str, dict]:
    """name -> architecture (dict) of everything trained from scratch: the layouts and the found ones."""
    found = {name: layout_architecture(name).to_dict() for name in LAYOUTS}
    for folder in sorted(os.listdir(results)):
        best = os.path.join(results, folder, "best.json")
        if folder.startswith("evolve_") and os.path.isfile(best):
            found["found_" + folder[len("evolve_"):]] = json.load(open(best, encoding="utf-8"))
    return found


def train(ctx: Context, results: str, seeds: Sequence[int], supernet: str):
    # seed by seed: a stage cut off by the end of a session has trained every architecture once before any twice
    found = candidates(results)
    for seed in seeds:
        for name, architecture in found.items():
            path = os.path.join(results, "train", f"{name}_seed{seed}.json")
            if os.path.isfile(path):
                continue
            save_dir = os.path.join(ctx.work_dir, "checkpoints", f"{name}_seed{seed}")
            shutil.rmtree(save_dir, ignore_errors=True)  # an unfinished run starts again (one uninterrupted time)
            architecture_path = os.path.join(ctx.work_dir, "architectures", f"{name}.json")
            os.makedirs(os.path.dirname(architecture_path), exist_ok=True)
            with atomic_output(architecture_path) as f:
                json.dump(architecture, f)
            env = recipe_env(ctx, SUITE, {**TRAIN_ENV, "SAVE_DIR": save_dir, "SEED": str(seed)})
            command = ["recipes/multi30k/train.sh", supernet_ranking.SCRATCH_PRESET, "--architecture-file", architecture_path]
            log(f"train: {name} seed {seed}")
            ctx.run(SUITE.name, env, command, record=False)
            ctx.run(SUITE.name, env, ["recipes/multi30k/generate.sh", supernet_ranking.SCRATCH_PRESET], record=False)
            with open(os.path.join(save_dir, "train.log"), encoding="utf-8") as f:
                training = parse_train_log(f.read())
            with open(os.path.join(save_dir, "generate", "score-test.json"), encoding="utf-8") as f:
                score = json.load(f)
            hypotheses = scored_hypotheses(ctx, SUITE, os.path.join(save_dir, "generate", "generate-test.txt"))
            record = {"name": name, "seed": seed, "architecture": architecture, "bleu": score["sacrebleu"],
                      "params": training["params"], "train_seconds": training["train_seconds"], "updates": training["updates"],
                      "valid": training.get("valid"), "hypotheses": hypotheses, "command": shell_line(env, command),
                      **supernet_ranking.provenance()}
            if seed == seeds[0]:  # the latency of the trained model itself (weights do not change the work)
                record["latency"] = measure_checkpoint(save_dir, supernet)
            write_json(path, record)


def measure_checkpoint(save_dir: str, supernet: str) -> dict:
    """The trained model's latency beside the reference (the softmax layout exported from ``supernet``: the
    weights do not change the work), and its counted FLOPs."""
    from fairseq import checkpoint_utils

    from fairseq_plugins.complexity import architecture_cost
    from fairseq_plugins.search.latency import LatencySettings, measure
    from fairseq_plugins.search.subnetworks import load_supernet

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([os.path.join(save_dir, "checkpoint_last.pt")])
    model = models[0]
    supernet_model, _, _ = load_supernet(supernet)
    reference = layout_architecture(BASELINE)
    measured = measure(lambda: model, lambda: supernet_model.subnetwork(reference), task.target_dictionary,
                       LatencySettings(**LATENCY))
    measured["reference"] = reference.to_dict()
    cost = architecture_cost(model.architecture, LATENCY["source_length"], LATENCY["decoder_steps"])
    return {**measured, "gflops": cost.total_flops(len(task.target_dictionary)) / 1e9}


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


def summary(runs: Dict[str, List[dict]]) -> Dict[str, dict]:
    rows = {}
    for name, records in runs.items():
        bleus = [r["bleu"] for r in records]
        latency = next((r["latency"] for r in records if "latency" in r), None)
        rows[name] = {"seeds": [r["seed"] for r in records], "bleu_mean": statistics.fmean(bleus),
                      "bleu_std": statistics.stdev(bleus) if len(bleus) > 1 else 0.0, "bleus": bleus,
                      "params": records[0]["params"], "latency_ms": latency["latency_ms"] if latency else None,
                      "relative_latency": latency.get("relative_latency") if latency else None,
                      "latency_std": latency["stdev_ms"] if latency else None, "gflops": latency["gflops"] if latency else None}
    return rows


def target_verdict(rows: Dict[str, dict]) -> str:
    """Issue 15's target: a found architecture within softmax's seed spread of its BLEU at <= 0.7x its latency,
    or better than every hand-written layout of equal or lower latency by more than the seed spread."""
    base = rows.get(BASELINE)
    if not base or base["latency_ms"] is None:
        return "not decided yet (softmax's runs are missing)"
    hits = []
    for name, row in rows.items():
        if not name.startswith("found_") or row["latency_ms"] is None:
            continue
        spread = max(base["bleu_std"], row["bleu_std"])
        if abs(row["bleu_mean"] - base["bleu_mean"]) <= spread and row["latency_ms"] <= 0.7 * base["latency_ms"]:
            hits.append(f"{name} matches softmax ({row['bleu_mean']:.2f} vs {base['bleu_mean']:.2f} BLEU, spread "
                        f"{spread:.2f}) at {row['latency_ms'] / base['latency_ms']:.2f}x its latency")
        cheaper = [n for n, r in rows.items() if n in LAYOUTS and r["latency_ms"] is not None and r["latency_ms"] <= row["latency_ms"]]
        if cheaper and all(row["bleu_mean"] - rows[n]["bleu_mean"] > max(row["bleu_std"], rows[n]["bleu_std"]) for n in cheaper):
            hits.append(f"{name} beats every hand-written layout of equal or lower latency ({', '.join(cheaper)}) by more "
                        "than the seed spread")
    if hits:
        return "; ".join(hits)
    return ("**missed**: no found architecture meets it at this budget of updates and seeds. "
            + ". ".join(why_missed(name, row, base, rows) for name, row in rows.items()
                        if name.startswith("found_") and row["latency_ms"] is not None))


def why_missed(name: str, row: dict, base: dict, rows: Dict[str, dict]) -> str:
    """One found architecture against both rules of the target, with the numbers that decided it."""
    spread = max(base["bleu_std"], row["bleu_std"])
    text = (f"{name}: {row['bleu_mean'] - base['bleu_mean']:+.2f} BLEU against softmax (spread {spread:.2f}) at "
            f"{row['latency_ms'] / base['latency_ms']:.2f}x its latency")
    cheaper = [n for n, r in rows.items() if n in LAYOUTS and r["latency_ms"] is not None and r["latency_ms"] <= row["latency_ms"]]
    if not cheaper:
        return text + "; no hand-written layout is as fast"
    return text + "; against the hand-written layouts as fast or faster: " + ", ".join(
        f"{n} {row['bleu_mean'] - rows[n]['bleu_mean']:+.2f} (spread {max(row['bleu_std'], rows[n]['bleu_std']):.2f})"
        for n in cheaper)


def plot(rows: Dict[str, dict], path: str):
    figure, axes = new_figure(1, 2, figsize=(11, 4.5))
    for axis, key, label in ((axes[0], "latency_ms", "measured latency (ms, beam 5, 30 + 30 tokens, 2 threads)"),
                             (axes[1], "gflops", "forward GFLOPs (30 + 30 tokens)")):
        for name, row in rows.items():
            if row[key] is None:
                continue
            marker = "*" if name.startswith("found_") else "o"
            # labelled through the legend: points of similar cost and BLEU overlap, their text labels would too
            axis.errorbar(row[key], row["bleu_mean"], yerr=row["bleu_std"], fmt=marker, markersize=9 if marker == "*" else 6,
                          capsize=3, label=name)
        axis.legend(fontsize=7, loc="best")
        axis.set_xlabel(label)
        axis.set_ylabel("sacreBLEU, test 2016 (mean ± std over seeds)")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    save_png(figure, path)


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
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
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
        best, confirmed = result["best"], result["confirmed_latency"]
        measured = next((c for c in confirmed if c["architecture"] == best["architecture"]), None)
        measured_text = (f"measured {measured['latency_ms']:.1f} ± {measured['stdev_ms']:.1f} ms"
                         + (f", {measured['relative_latency']:.3f}x the reference" if "relative_latency" in measured else "")
                         if measured else "not measured")
        history = result["history"]
        units = {"--latency-ms": " ms", "--relative-latency": "x the reference", "--flops": " GFLOPs", "--params": " M parameters"}
        budget = ", ".join(f"{limit}{units.get(option, ' ' + option)}" for option, limit in result["constraints"].items())
        predicted = (f"latency predicted {best['latency_ms']:.1f} ms" if "latency_ms" in best else
                     f"relative latency predicted {best['relative_latency']:.3f}" if "relative_latency" in best else "")
        lines.append(
            f"  * {name} ({budget}): {count(len(history), 'iteration')}"
            f"{' (stopped early)' if result['stopped_early'] else ''}, {history[-1]['evaluated']:,} architectures evaluated; "
            f"best: {supernet_ranking.describe(best['architecture'])}; {best['mparams']:.2f} M parameters, "
            f"{best['gflops']:.3f} GFLOPs; {predicted}, {measured_text}; "
            f"{sum(c['within_budget'] for c in confirmed)} of {len(confirmed)} measured candidates within the budget.")
    return lines


def render(ctx: Optional[Context], results: str, command: str, plot_path: Optional[str],
           supernet_results: str = SUPERNET_RESULTS) -> str:
    lines = [REPORT_BEGIN, "", "## Measured: the search on Multi30k de-en (ranking, evolution, trained from scratch)", ""]
    runs = load_runs(results)
    stages = json.load(open(os.path.join(results, "stages.json"), encoding="utf-8")) if os.path.isfile(
        os.path.join(results, "stages.json")) else {}
    lines += [f"Rendered by `{command}` from `{relative(results)}/` (committed stage results; each records its revision, "
              "machine and command).", ""]
    lines += collection_lines(results)
    for target in ("loss", "latency", "relative_latency"):
        report = os.path.join(results, f"ranker_{target}", "report.json")
        if os.path.isfile(report):
            r = json.load(open(report, encoding="utf-8"))
            lines.append(f"* Ranker of the {target} ({r['architectures']} architectures, {r['held_out']} held out): pairwise "
                         f"Kendall tau {r['pairwise']['kendall_tau']:.3f}, pair accuracy {r['pairwise']['pair_accuracy']:.3f}; "
                         f"pointwise tau {r['pointwise']['kendall_tau']:.3f}, pair accuracy {r['pointwise']['pair_accuracy']:.3f}.")
    budgets_path = os.path.join(results, "budgets.json")
    if os.path.isfile(budgets_path):
        budgets = json.load(open(budgets_path, encoding="utf-8"))
        lines.append("* Latency budgets (relative to the softmax layout's latency, measured beside it inside the supernet): " + ", ".join(
            f"{name} {value}" for name, value in budgets["budgets"].items()) + ".")
    lines += evolution_lines(results)
    supernet_path = os.path.join(supernet_results, "supernet.json")
    if os.path.isfile(supernet_path):
        supernet = json.load(open(supernet_path, encoding="utf-8"))
        # (train_seconds: every run of a resumed supernet; process_seconds is the last run's only)
        stages = {"supernet": {"seconds": supernet["train_seconds"], "runs": [supernet]}, **stages}
    if stages:
        lines.append("* Time of each stage on the machines its runs name, wall (and CPU: user + system of the stage's "
                     "processes, recorded since 2026-11-27; the supernet: `supernet.json` of "
                     "`benchmarks/supernet_ranking.py`): " + ", ".join(stage_time(name, entry) for name, entry in stages.items())
                     + ".")
    lines.append("")
    rows = summary(runs)
    if rows:
        references = scored_references(ctx, SUITE) if ctx else None
        lines += ["| architecture | kinds (enc / dec / cross) | params | GFLOPs | latency (ms) | BLEU per seed | mean ± std | "
                  "paired bootstrap vs softmax (p per seed) |", "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
        for name, row in sorted(rows.items(), key=lambda item: (item[1]["latency_ms"] or 0)):
            a = runs[name][0]["architecture"]
            kinds = " / ".join("".join(l[k][0] for l in a[side]) for side, k in (("encoder_layers", "attention_kind"),
                                                                              ("decoder_layers", "attention_kind"),
                                                                              ("decoder_layers", "cross_attention_kind")))
            tests = "-"
            if references and name != BASELINE and BASELINE in runs:
                by_seed = {r["seed"]: r for r in runs[BASELINE]}
                ps = [paired_bleu(r["hypotheses"], by_seed[r["seed"]]["hypotheses"], references).p_value
                      for r in runs[name] if r["seed"] in by_seed]
                tests = ", ".join(f"{p:.3f}" for p in ps)
            latency = f"{row['latency_ms']:.1f} ± {row['latency_std']:.1f}" if row["latency_ms"] is not None else "-"
            gflops = format(row["gflops"], ".3f") if row["gflops"] is not None else "-"
            bleus = ", ".join(format(b, ".2f") for b in row["bleus"])
            lines.append(f"| {name} | {kinds} | {row['params']:,} | {gflops} | {latency} | {bleus} | "
                         f"{row['bleu_mean']:.2f} ± {row['bleu_std']:.2f} | {tests} |")
        lines += ["", f"**Target** (a found architecture within softmax's seed spread at <= 0.7x its latency, or better than "
                  f"every hand-written layout of equal or lower latency by more than the spread): {target_verdict(rows)}.", ""]
        if plot_path:
            plot(rows, plot_path)
            lines += [f"![BLEU against latency and FLOPs]({os.path.basename(plot_path)})", ""]
        example = runs[BASELINE][0]["command"] if BASELINE in runs else next(iter(runs.values()))[0]["command"]
        lines += ["One training (the others differ in the architecture file and `SEED`):", "", "```bash", example, "```", ""]
    else:
        lines += ["No architecture trained from scratch yet.", ""]
    return "\n".join(lines + [REPORT_END, ""])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages (default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"), help="the shared data")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work_dirs", "search_multi30k"), help="(default: %(default)s)")
    parser.add_argument("--results", default=os.path.join(REPO, "docs", "records", "data", "search_multi30k"),
                        help="the stages' small results, committed (default: %(default)s)")
    parser.add_argument("--supernet-work-dir", default=os.path.join(REPO, "work_dirs", "supernet_ranking"),
                        help="supernet_ranking.py's work dir, whose supernet is searched (default: %(default)s)")
    parser.add_argument("--loss-samples", type=int, default=300, help="(default: %(default)s)")
    parser.add_argument("--latency-samples", type=int, default=300, help="(default: %(default)s)")
    parser.add_argument("--seeds", default="1,2,3", help="seeds of every from-scratch training (default: %(default)s)")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "records", "search.md"), help="the report (default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report")
    parser.add_argument("--allow-dirty", action="store_true", help="measure with uncommitted changes (recorded)")
    args = parser.parse_args(argv)
    stages = supernet_ranking.parse_stages(parser, args.stages, STAGES)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    os.makedirs(args.results, exist_ok=True)
    command = "python benchmarks/search_multi30k.py" + "".join(" " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    ctx = Context(data_root=os.path.abspath(args.data_root), work_dir=os.path.abspath(args.work_dir), quick=False)
    if not args.report_only:
        require_committed(args.allow_dirty, "benchmarks/search_multi30k.py")
        signal.signal(signal.SIGTERM, quality.stop_on_sigterm)  # a stopped stage still records its time
        prepare(ctx, SUITE)
        times = Stages(args.results)
        supernet_ctx = Context(data_root=ctx.data_root, work_dir=os.path.abspath(args.supernet_work_dir), quick=False)
        checkpoint = os.path.join(supernet_ranking.supernet_dir(supernet_ctx), "checkpoint_last.pt")
        if "supernet" in stages:  # (its time: supernet.json, where supernet_ranking.py records it)
            prepare(supernet_ctx, SUITE)
            os.makedirs(SUPERNET_RESULTS, exist_ok=True)
            supernet_ranking.train_supernet(supernet_ctx, SUPERNET_RESULTS, supernet_ranking.SUPERNET_UPDATES)
        if set(stages) - {"supernet", "train"} and not os.path.isfile(checkpoint):
            raise SystemExit(f"error: {relative(checkpoint)}: no supernet (run the supernet stage)")
        if "collect" in stages:
            timed(times, "collect", collect, ctx, args.results, checkpoint, args.loss_samples, args.latency_samples)
        if "rank" in stages:
            timed(times, "rank", rank, ctx, args.results)
        budgets = None
        if "budgets" in stages or "evolve" in stages:
            budgets = timed(times, "budgets", measure_layouts, args.results, checkpoint)["budgets"]
        if "evolve" in stages:
            timed(times, "evolve", evolve, ctx, args.results, checkpoint, budgets)
        if "train" in stages:
            timed(times, "train", train, ctx, args.results, seeds, checkpoint)
    prepare(ctx, SUITE)  # (the references of the paired test)
    report = render(ctx, args.results, command, os.path.join(os.path.dirname(os.path.abspath(args.output)), "search_pareto.png"))
    write_report(args.output, report, REPORT_BEGIN, REPORT_END)
    log(f"report: {relative(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
