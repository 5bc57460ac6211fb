#!/usr/bin/env python
"""Can the supernet rank architectures? The measured run of docs/records/search.md on Multi30k de-en.

Stages, each resumable (a finished stage is read back, not run again) and each writing small files
under ``--results`` (default ``docs/records/data/supernet_multi30k/``, committed, so that a later
session on another machine continues where this one stopped; checkpoints stay in ``--work-dir``):

1. ``supernet``: Multi30k prepared as ``make bench-quality`` prepares it, then
   ``recipes/multi30k/supernet.sh`` (the ``multi30k_cpu`` space, the sandwich rule) for ``--supernet-updates``
   updates with bench-quality's Multi30k settings (lr, warm-up, dropout, batch); records the wall time and the
   validation loss of the largest and of the smallest sub-network at every validation (``supernet.json``).
2. ``architectures``: ``--architectures`` architectures spread over the space: ``--pool`` samples of the space
   (seeded), ordered by forward FLOPs without the output projection (the registry's counts), one taken at each of evenly spaced quantiles
   (``architectures.jsonl``).
3. ``inherited``: the validation loss of each inside the supernet, ``python -m fairseq_plugins.search evaluate``
   (``inherited.jsonl``).
4. ``scratch``: each trained from scratch with ``recipes/multi30k/train.sh ... --architecture-file`` for
   ``--scratch-updates`` updates, bench-quality's settings; its validation loss at the end (``scratch.jsonl``).
5. the report: both losses per architecture and Kendall's tau between the two orders (scipy), the number that
   says whether inherited losses can rank architectures (Hardware-Aware Transformers and RankNAS rely on it).

    python benchmarks/supernet_ranking.py                      # every stage (hours on 2 CPU cores)
    python benchmarks/supernet_ranking.py --stages supernet    # one stage
    python benchmarks/supernet_ranking.py --report-only        # re-render docs/records/search.md from the results
"""
import argparse
import datetime
import functools
import json
import os
import re
import shlex
import sys
import shutil
import time
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import pipe_fields, read_json, read_jsonl  # noqa: E402
from benchmarks.provenance import (REPO, available_cores, cpu_model, load_average, measured_revision,  # noqa: E402
                                   require_committed)
from benchmarks.quality import (SUITES, Context, data_fingerprint, parse_train_log, prepare, recipe_env,  # noqa: E402
                                relative, shell_line, write_report)
from fairseq_plugins.files import atomic_output, write_json  # noqa: E402

STAGES = ("supernet", "architectures", "inherited", "scratch")
SUITE = SUITES["multi30k"]
SPACE = os.path.join(REPO, "search_spaces", "multi30k_cpu.yaml")
# The supernet's checkpoint every SAVE_INTERVAL updates (only the last kept, no epoch checkpoints): a session
# that ends mid-run loses at most that many updates (a Multi30k epoch of the bracket space is 121 updates of
# about 11 s each on one core)
SAVE_INTERVAL = 25
# bench-quality's Multi30k settings (its suite env) for every training here; the supernet trains longer
# (it trains many sub-networks; four per update under the sandwich rule)
TRAIN_ENV = {key: value for key, value in SUITE.env.items() if key not in ("GEN_EXTRA_ARGS", "SUBSETS")}
SUPERNET_UPDATES = 2000
SCRATCH_UPDATES = 500
ARCHITECTURES = 12
POOL = 1000
SEED = 1
SCRATCH_PRESET = "mixed_transformer_iwslt_de_en"  # positions and defaults of the from-scratch models
REPORT_BEGIN = "<!-- supernet-ranking:begin (written by benchmarks/supernet_ranking.py; edit the script, not this section) -->"
REPORT_END = "<!-- supernet-ranking:end -->"


def log(message: str):
    print(f"[supernet-ranking] {message}", file=sys.stderr, flush=True)


def provenance() -> Dict[str, str]:
    return {"git": measured_revision(), "cores": available_cores(), "cpu": cpu_model(), "load_average": load_average(),
            "threads": os.environ.get("OMP_NUM_THREADS") or f"torch's default ({available_cores()} cores)",
            "finished": datetime.datetime.now().isoformat(timespec="seconds")}


def append_jsonl(path: str, record: dict):
    """One more line (the file is rewritten whole and atomically, so that an interrupted run loses nothing)."""
    records = read_jsonl(path) + [record]
    with atomic_output(path) as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)


def parse_stages(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> List[str]:
    """``--stages a,b`` -> ["a", "b"]; an unknown stage is a usage error naming the known ones."""
    stages = [s for s in text.split(",") if s]
    unknown = [s for s in stages if s not in known]
    if unknown:
        parser.error(f"--stages: unknown {', '.join(unknown)} (stages: {', '.join(known)})")
    return stages


def architecture_key(architecture: dict) -> str:
    return json.dumps(architecture, sort_keys=True)


# ------------------------------------------------------------------- stages ---
def train_supernet(ctx: Context, results: str, updates: int, space: str = SPACE,
                   train_env: Optional[Dict[str, str]] = None) -> dict:
    """``recipes/multi30k/supernet.sh`` over ``space`` with ``train_env`` (default: ``TRAIN_ENV``, bench-quality's
    Multi30k settings) for ``updates`` updates; ``supernet.json`` in ``results`` (read back when it exists)."""
    path = os.path.join(results, "supernet.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            done = json.load(f)
        if done["updates"] == updates:
            log(f"supernet: done before ({relative(path)})")
            return done
        raise SystemExit(f"error: {relative(path)} holds a supernet of {done['updates']} updates, not --supernet-updates "
                         f"{updates}: remove it (and {relative(supernet_dir(ctx))}) to train again")
    save_dir = supernet_dir(ctx)
    env = recipe_env(ctx, SUITE, {**(TRAIN_ENV if train_env is None else train_env), "MAX_UPDATE": str(updates),
                                  "SAVE_DIR": save_dir, "SAVE_INTERVAL_UPDATES": str(SAVE_INTERVAL),
                                  "KEEP_INTERVAL_UPDATES": "1",
                                  **({} if space == SPACE else {"SEARCH_SPACE": space})})
    command = ["recipes/multi30k/supernet.sh", "--no-epoch-checkpoints"]
    check_resumed_settings(save_dir, training_settings(env, command))
    log(f"supernet: training ({updates} updates; a rerun resumes from {relative(save_dir)}/checkpoint_last.pt)")
    started = time.time()
    ctx.run(SUITE.name, env, command, record=False)
    elapsed = time.time() - started
    with open(os.path.join(save_dir, "train.log"), encoding="utf-8") as f:
        text = f.read()
    training = parse_train_log(text)
    from fairseq_plugins.search.collect import file_sha256

    result = {"command": shell_line(env, command), "updates": training["updates"], "params": training["params"],
              "checkpoint_sha256": file_sha256(os.path.join(save_dir, "checkpoint_last.pt")),
              **training_time(text), "process_seconds": round(elapsed, 1), "validations": supernet_validations(text),
              "space": relative(space), **provenance()}
    if result["updates"] != updates:
        raise SystemExit(f"error: the supernet stopped at {result['updates']} updates, not {updates} (see its train.log)")
    write_json(path, result, sort_keys=True)
    return result


def training_time(text: str) -> dict:
    """The training's wall time from its log, over every run of it (a session may end before the supernet
    does; the next run resumes from checkpoint_last.pt, and fairseq's clock starts again at 0): the sum of
    each run's last ``wall`` (a stopped run's time after its last checkpoint, trained again by the next run,
    is spent and counted), and how many runs it took."""
    runs = re.split(r"^.*\| fairseq_cli\.train \| task: .*$", text, flags=re.M)[1:]
    walls = [float(found[-1]) for found in (re.findall(r"(?:\| wall |\bwall=)([0-9.]+)", run) for run in runs) if found]
    if not walls:
        raise SystemExit("error: the supernet's train.log has no training time ('wall' of fairseq's progress lines)")
    return {"train_seconds": sum(walls), "runs": len(runs)}


# Recipe variables that say where and on what a training runs, and how often it logs and saves, not what it
# trains: a supernet started on one machine (or device) resumes on another
PLACEMENT = ("NUM_GPUS", "DATA_WORKERS", "DATA_BIN", "WORK_DIR", "SAVE_DIR", "FP16", "LOG_INTERVAL",
             "SAVE_INTERVAL_UPDATES", "KEEP_INTERVAL_UPDATES")


def training_settings(env: Dict[str, str], command: Sequence[str]) -> dict:
    """What decides the weights a supernet training produces: its recipe variables but ``PLACEMENT`` (the
    search space named relative to the checkout), the prepared data's fingerprint (bench-quality's: its
    dictionaries and preparation settings, not its folder), and its script and flags."""
    settings = {key: relative(value) if key == "SEARCH_SPACE" else value
                for key, value in env.items() if key not in PLACEMENT}
    data = data_fingerprint(env["DATA_BIN"]) if "DATA_BIN" in env else None
    return {"env": dict(sorted(settings.items())), "data": data, "command": list(command)}


def check_resumed_settings(save_dir: str, settings: dict):
    """A supernet resumes from its ``checkpoint_last.pt`` only with the settings it started with
    (``training_settings``, kept beside the checkpoints in ``settings.json``, written before the first update):
    a rerun with others (another learning rate, space, budget ...), or a checkpoint from before the file
    existed, is a one-line error instead of fairseq quietly going on from weights trained otherwise. Before
    the first checkpoint a rerun starts again with its own settings; the machine, device and folders may
    change between runs."""
    path = os.path.join(save_dir, "settings.json")
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    started = read_json(path)
    if os.path.isfile(checkpoint):  # (no checkpoint yet: nothing trained to resume, whatever started it)
        if started is None:
            raise SystemExit(f"error: {relative(checkpoint)}: a supernet whose settings are not recorded "
                             f"({relative(path)} is missing): remove {relative(save_dir)} to train again")
        if not (isinstance(started, dict) and set(started) == set(settings)):
            raise SystemExit(f"error: {relative(path)}: not the settings of a supernet training as this revision "
                             f"writes them (keys {', '.join(sorted(settings))}): remove {relative(save_dir)} to train again")
        if started != settings:
            changed = sorted({key for key in {**started["env"], **settings["env"]}
                              if started["env"].get(key) != settings["env"].get(key)}
                             | ({"data"} if started["data"] != settings["data"] else set())
                             | ({"flags"} if started["command"] != settings["command"] else set()))
            raise SystemExit(f"error: {relative(save_dir)} holds a supernet started with other settings "
                             f"({', '.join(changed)} differ): remove the folder to train again")
        return
    log_path = os.path.join(save_dir, "train.log")
    if started is not None and started != settings and os.path.isfile(log_path):
        # a start with other settings stopped before its first checkpoint: its log is not this training's
        # (training_time would count it), kept aside
        aside = next(f"{log_path}.other_settings{n}" for n in range(1, 1000) if not os.path.exists(f"{log_path}.other_settings{n}"))
        os.replace(log_path, aside)
    os.makedirs(save_dir, exist_ok=True)
    write_json(path, settings, sort_keys=True)


def require_finished_supernet(checkpoint: str, results: str) -> str:
    """The finished supernet: the checkpoint ``supernet.json`` records (a supernet still training, or stopped
    by the end of a session, has a ``checkpoint_last.pt`` too, which the later stages must not read)."""
    done = read_json(os.path.join(results, "supernet.json"))
    if done is None or not os.path.isfile(checkpoint):
        raise SystemExit(f"error: {relative(checkpoint)}: no finished supernet ({relative(results)}/supernet.json "
                         "is written when it finishes): run the supernet stage")
    if checkpoint_sha256(checkpoint) != done["checkpoint_sha256"]:
        raise SystemExit(f"error: {relative(checkpoint)} is not the supernet {relative(results)}/supernet.json records "
                         "(it trained on, or another replaced it): remove supernet.json and its folder to train again")
    return checkpoint


@functools.lru_cache(maxsize=4)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    from fairseq_plugins.search.collect import file_sha256

    return file_sha256(path)


def checkpoint_sha256(path: str) -> str:
    """(hashed once per version of the file: several stages check the same supernet)"""
    stat = os.stat(path)
    return _sha256(path, stat.st_mtime_ns, stat.st_size)


def supernet_dir(ctx: Context) -> str:
    return os.path.join(ctx.work_dir, "checkpoints", "supernet")


# The report's validation table: at most this many rows (a supernet saving every SAVE_INTERVAL updates also
# validates at each save; every validation stays in supernet.json)
SHOWN_VALIDATIONS = 20


def thinned(rows: Sequence[dict], most: int) -> List[dict]:
    """At most ``most`` of ``rows``, evenly spaced, the first and the last among them."""
    if len(rows) <= most:
        return list(rows)
    return [rows[round(i * (len(rows) - 1) / (most - 1))] for i in range(most)]


def supernet_validations(text: str) -> List[dict]:
    """Every validation of the train log (all runs, a resumed one appends): update, the largest sub-network's
    loss (``loss``) and the smallest's (``smallest_loss``), in bits."""
    rows = {}
    for line in text.splitlines():
        if "| valid on 'valid' subset |" in line:
            values = pipe_fields(line)
            if "num_updates" in values and "smallest_loss" in values:
                rows[int(values["num_updates"])] = {"update": int(values["num_updates"]), "largest_loss": values["loss"],
                                                    "smallest_loss": values["smallest_loss"]}
    return [rows[u] for u in sorted(rows)]


def spread_architectures(space_path: str, count: int, pool: int, seed: int) -> List[dict]:
    """``count`` architectures of ``pool`` seeded samples, at evenly spaced quantiles of their forward FLOPs
    (one sentence pair of 30 tokens; the registry's counts), each once."""
    import fairseq_plugins  # noqa: F401  (kinds)
    from fairseq_plugins.complexity import architecture_cost
    from fairseq_plugins.search.space import SearchSpace

    space = SearchSpace.from_file(space_path)
    unique = {}
    for architecture in space.samples(pool, seed):
        unique.setdefault(architecture, None)
    if len(unique) < count:
        raise SystemExit(f"error: {space_path}: {len(unique)} distinct architectures in {pool} samples, fewer than {count}")
    # (the FLOPs without the output projection, whose size depends on the dictionary)
    costed = sorted(unique, key=lambda a: (architecture_cost(a, 30, 30).flops, a.to_json()))
    picks = [costed[min(len(costed) - 1, int((i + 0.5) * len(costed) / count))] for i in range(count)]
    return [a.to_dict() for a in picks]


def choose_architectures(results: str, count: int, pool: int, seed: int) -> List[dict]:
    path = os.path.join(results, "architectures.jsonl")
    chosen = read_jsonl(path)
    if chosen:
        settings = (len(chosen), chosen[0].get("pool"), chosen[0].get("seed"))
        if settings != (count, pool, seed):
            raise SystemExit(f"error: {relative(path)} holds {settings[0]} architectures of pool {settings[1]}, seed "
                             f"{settings[2]}, not --architectures {count} --pool {pool} --seed {seed}: remove it (and the "
                             "losses measured on them) to choose again")
        log(f"architectures: chosen before ({relative(path)})")
        return [entry["architecture"] for entry in chosen]
    picks = spread_architectures(SPACE, count, pool, seed)
    with atomic_output(path) as f:
        for index, architecture in enumerate(picks):
            f.write(json.dumps({"index": index, "architecture": architecture, "pool": pool, "seed": seed}, sort_keys=True) + "\n")
    return picks


def architecture_file(ctx: Context, index: int, architecture: dict) -> str:
    path = os.path.join(ctx.work_dir, "architectures", f"a{index:02d}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_output(path) as f:
        json.dump(architecture, f)
    return path


def inherited_losses(ctx: Context, results: str, architectures: List[dict]) -> List[dict]:
    path = os.path.join(results, "inherited.jsonl")
    with open(os.path.join(results, "supernet.json"), encoding="utf-8") as f:
        supernet = json.load(f)["checkpoint_sha256"]
    records = read_jsonl(path)
    stale = [r for r in records if r.get("supernet_sha256") != supernet]
    if stale:
        raise SystemExit(f"error: {relative(path)}: {len(stale)} losses were measured in another supernet than supernet.json's: "
                         "remove the file to measure them again")
    done = {architecture_key(r["architecture"]): r for r in records}
    checkpoint = os.path.join(supernet_dir(ctx), "checkpoint_last.pt")
    missing, seen = [], set(done)
    for index, architecture in enumerate(architectures):
        if architecture_key(architecture) not in seen:
            seen.add(architecture_key(architecture))
            missing.append((index, architecture))
    if missing:
        from fairseq_plugins.models.architecture import Architecture

        require_finished_supernet(checkpoint, results)
        # one process for all of them (the supernet and the validation set are loaded once), each result kept
        # as it is printed: an interrupted run measures only those still missing
        command = [ctx.python, "-m", "fairseq_plugins.search", "evaluate", "--checkpoint", checkpoint]
        for index, architecture in missing:
            command += ["--architecture", architecture_file(ctx, index, architecture)]
            log(f"inherited: architecture {index}")
        pending = list(missing)

        def keep(line: str):
            if not line.startswith('{"architecture"'):
                return
            result = json.loads(line)
            if not pending or Architecture.from_dict(result["architecture"]) != Architecture.from_dict(pending[0][1]):
                raise SystemExit(f"error: `{shell_line({}, command)}` printed a result for another architecture than "
                                 "the next one asked for, or more results than architectures")
            index, architecture = pending.pop(0)
            record = {"index": index, "architecture": architecture, "supernet_sha256": supernet,
                      "loss": result["loss"], "nll_loss": result["nll_loss"],
                      "tokens": result["tokens"], "command": shell_line({}, command), **provenance()}
            append_jsonl(path, record)
            done[architecture_key(architecture)] = record

        ctx.run(SUITE.name, {}, command, record=False, on_line=keep)
        if pending:
            raise SystemExit(f"error: `{shell_line({}, command)}` printed {len(missing) - len(pending)} results for "
                             f"{len(missing)} architectures")
    return [done[architecture_key(a)] for a in architectures]


def scratch_losses(ctx: Context, results: str, architectures: List[dict], updates: int) -> List[dict]:
    path = os.path.join(results, "scratch.jsonl")
    done = {architecture_key(r["architecture"]): r for r in read_jsonl(path) if r["updates"] == updates}
    for index, architecture in enumerate(architectures):
        if architecture_key(architecture) in done:
            continue
        save_dir = os.path.join(ctx.work_dir, "checkpoints", "scratch", f"a{index:02d}")
        # an unfinished training starts again (its time is one uninterrupted run)
        if os.path.isdir(save_dir):
            shutil.rmtree(save_dir)
        env = recipe_env(ctx, SUITE, {**TRAIN_ENV, "MAX_UPDATE": str(updates), "SAVE_DIR": save_dir})
        command = ["recipes/multi30k/train.sh", SCRATCH_PRESET, "--architecture-file", architecture_file(ctx, index, architecture)]
        log(f"scratch: architecture {index} ({updates} updates)")
        started = time.time()
        ctx.run(SUITE.name, env, command, record=False)
        elapsed = time.time() - started
        with open(os.path.join(save_dir, "train.log"), encoding="utf-8") as f:
            training = parse_train_log(f.read())
        if "valid" not in training:
            raise SystemExit(f"error: {relative(save_dir)}/train.log has no validation")
        record = {"index": index, "architecture": architecture, "updates": training["updates"], "params": training["params"],
                  "loss": training["valid"]["loss"], "nll_loss": training["valid"]["nll_loss"],
                  "train_seconds": training["train_seconds"], "process_seconds": round(elapsed, 1),
                  "command": shell_line(env, command), **provenance()}
        append_jsonl(path, record)
        done[architecture_key(architecture)] = record
    return [done[architecture_key(a)] for a in architectures]


# ------------------------------------------------------------------- report ---
def kendall_tau(first: Sequence[float], second: Sequence[float]):
    """Kendall's tau-b between two orders and its two-sided p-value (``search.ranking.kendall``: scipy)."""
    from fairseq_plugins.search.ranking import kendall

    return kendall(first, second)


def width(architecture: dict) -> str:
    """The embedding widths, encoder/decoder (``None`` for a language model's encoder)."""
    return f"d {architecture.get('encoder_embed_dim')}/{architecture['decoder_embed_dim']}"


def order_agreement(pairs) -> str:
    """Kendall's tau between the inherited and the from-scratch order of (inherited, scratch) records, on the
    label-smoothed loss and on the NLL, with their p-values."""
    tau, p = kendall_tau([i["loss"] for i, _ in pairs], [s["loss"] for _, s in pairs])
    tau_nll, p_nll = kendall_tau([i["nll_loss"] for i, _ in pairs], [s["nll_loss"] for _, s in pairs])
    return f"{tau:.3f} (p = {p:.3g}) on the loss, {tau_nll:.3f} (p = {p_nll:.3g}) on the NLL"


def describe(architecture: dict) -> str:
    """A compact line: widths, depths and the kinds of every sub-layer (s = softmax, c = cosformer ...)."""
    def letters(layers, field):
        return "".join(layer[field][0] for layer in layers)

    encoder, decoder = architecture.get("encoder_layers", []), architecture["decoder_layers"]
    parts = [width(architecture),
             f"{len(encoder)}+{len(decoder)} layers",
             f"enc {letters(encoder, 'attention_kind')}", f"dec {letters(decoder, 'attention_kind')}"]
    if decoder and "cross_attention_kind" in decoder[0]:
        parts.append(f"cross {letters(decoder, 'cross_attention_kind')}")
        parts.append("connect " + "".join(str(layer["encoder_decoder_connect"]) for layer in decoder))
    parts.append("FFN " + "/".join(str(layer["ffn_embed_dim"]) for layer in encoder + decoder))
    parts.append("heads " + "/".join(str(layer["attention_heads"]) for layer in encoder + decoder))
    return ", ".join(parts)


def run_count(supernet: dict) -> str:
    runs = supernet.get("runs", 1)
    return f", over {runs} runs, each resuming the last one's checkpoint" if runs > 1 else ""


def render(results: str, command: str, scratch_updates: Optional[int] = None) -> str:
    lines = [REPORT_BEGIN, "", "## Measured: can the supernet rank architectures? (Multi30k de-en)", ""]
    supernet_path = os.path.join(results, "supernet.json")
    if not os.path.isfile(supernet_path):
        return "\n".join(lines + ["No results yet: run `python benchmarks/supernet_ranking.py`.", "", REPORT_END, ""])
    with open(supernet_path, encoding="utf-8") as f:
        supernet = json.load(f)
    architectures = [entry["architecture"] for entry in read_jsonl(os.path.join(results, "architectures.jsonl"))]
    inherited = {architecture_key(r["architecture"]): r for r in read_jsonl(os.path.join(results, "inherited.jsonl"))}
    # (one budget of updates: the one asked for, else the latest run's)
    scratch_records = read_jsonl(os.path.join(results, "scratch.jsonl"))
    budget = scratch_updates or (scratch_records[-1]["updates"] if scratch_records else None)
    scratch = {architecture_key(r["architecture"]): r for r in scratch_records if r["updates"] == budget}
    revisions = sorted({r["git"] for r in [supernet, *inherited.values(), *scratch.values()]})
    machines = sorted({f"{r['cores']} cores ({r['cpu']}), threads {r['threads']}" for r in [supernet, *scratch.values()]})
    lines += [
        f"Rendered by `{command}` from `{relative(results)}/` (the stages' results, committed). Measured at git "
        f"{', '.join(revisions)} on {'; '.join(machines)}; each result records its revision, machine, load and exact "
        "command. `$DATA_ROOT` in the commands is the shared data folder (`multi30k/`).", "",
        "### The supernet", "",
        f"`{supernet['command']}` (space `{supernet['space']}`, the sandwich rule: the largest, the smallest and two "
        f"sampled sub-networks per update): {supernet['updates']} updates in {supernet['train_seconds'] / 60:.1f} min "
        f"(fairseq's wall clock{run_count(supernet)}), {supernet['params']:,} parameters in the supernet's containers.", "",
        "| update | valid loss, largest (bits) | valid loss, smallest (bits) |", "| ---: | ---: | ---: |"]
    lines += [f"| {v['update']} | {v['largest_loss']:.3f} | {v['smallest_loss']:.3f} |"
              for v in thinned(supernet["validations"], SHOWN_VALIDATIONS)]
    lines += ["", "### Inherited against trained-from-scratch validation loss", ""]
    rows = [(a, inherited.get(architecture_key(a)), scratch.get(architecture_key(a))) for a in architectures]
    complete = [(a, i, s) for a, i, s in rows if i and s]
    if architectures:
        first = next((s for _, _, s in complete), None)
        lines += [f"{len(architectures)} architectures spread over the space (evenly spaced quantiles of the forward FLOPs "
                  "of 1,000 seeded samples). *Inherited*: `python -m fairseq_plugins.search evaluate` inside the "
                  "supernet, nothing trained. *Scratch*: the same architecture trained alone"
                  + (f" for {first['updates']} updates, bench-quality's Multi30k settings (`{first['command']}`)" if first else "")
                  + ". Label-smoothed loss and NLL on the validation set, bits per token.", "",
                  "| # | architecture | params (scratch) | inherited loss | scratch loss | inherited NLL | scratch NLL | scratch time |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        def cell(record, key, form):
            return format(record[key], form) if record else "-"

        for index, (a, i, s) in enumerate(rows):
            lines.append(f"| {index} | {describe(a)} | {cell(s, 'params', ',')} | {cell(i, 'loss', '.3f')} | "
                         f"{cell(s, 'loss', '.3f')} | {cell(i, 'nll_loss', '.3f')} | {cell(s, 'nll_loss', '.3f')} | "
                         f"{cell(s, 'train_seconds', '.0f') + ' s' if s else '-'} |")
        lines.append("")
    if len(complete) >= 3:
        overall = order_agreement([(i, s) for _, i, s in complete])
        lines += [f"**Kendall's tau** between the inherited and the from-scratch order over {len(complete)} architectures: "
                  f"**{overall.replace(' (p', '** (p', 1)} (`scipy.stats.kendalltau`, tau-b; 1: the same order, 0: unrelated).", ""]
        lines += trivial_baselines(complete)
        lines += width_taus(complete)
    else:
        lines += [f"Kendall's tau: not yet ({len(complete)} of {len(architectures)} architectures have both losses).", ""]
    return "\n".join(lines + [REPORT_END, ""])


BOOTSTRAP_DRAWS = 2000
FLOPS_VOCAB = 10_000  # Multi30k's joint BPE: the dictionary-sized FLOPs (output projection) of the count below


def bootstrap_tau(first: Sequence[float], second: Sequence[float], draws: int = BOOTSTRAP_DRAWS, seed: int = 0):
    """Kendall's tau and its 95 % percentile interval over architectures resampled with replacement."""
    import numpy as np

    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    tau, _ = kendall_tau(first, second)
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(draws):
        index = rng.integers(0, len(first), len(first))
        value, _ = kendall_tau(first[index], second[index])
        if value == value:  # a resample of one repeated architecture has no order (nan)
            samples.append(value)
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(tau), float(low), float(high)


def architecture_gflops(architecture: dict, source_length: int = 30, target_length: int = 30) -> float:
    from fairseq_plugins.complexity import architecture_cost
    from fairseq_plugins.models.architecture import Architecture

    cost = architecture_cost(Architecture.from_dict(architecture), source_length, target_length)
    return cost.total_flops(FLOPS_VOCAB) / 1e9


def trivial_baselines(complete) -> List[str]:
    """The inherited order's tau against the from-scratch order beside the taus of ranking by size alone (more
    parameters, more FLOPs: lower loss), each with its bootstrap interval: the supernet earns its cost only
    where it orders architectures better than counting."""
    scratch = [s["loss"] for _, _, s in complete]
    orders = {"inherited loss (the supernet)": [i["loss"] for _, i, _ in complete],
              "parameter count alone": [-s["params"] for _, _, s in complete],
              "forward FLOPs alone": [-architecture_gflops(a) for a, _, _ in complete]}
    cells = []
    for name, order in orders.items():
        tau, low, high = bootstrap_tau(order, scratch)
        cells.append(f"| {name} | {tau:.3f} | {low:.2f} to {high:.2f} |")
    return [f"Against ranking by size alone (Kendall's tau with the from-scratch loss, 95 % interval over "
            f"{BOOTSTRAP_DRAWS:,} bootstrap resamples of the {len(complete)} architectures; FLOPs of 30 + 30 tokens "
            f"with a {FLOPS_VOCAB:,}-entry dictionary):", "", "| order | tau | 95 % interval |", "| --- | ---: | --- |",
            *cells, ""]


def width_taus(complete) -> List[str]:
    """Kendall's tau inside each embedding width with at least 3 architectures: whether the supernet also orders
    architectures of one width (a high overall tau can come from the widths alone, which few-update training
    from scratch separates most)."""
    groups: Dict[str, list] = {}
    numeric: Dict[str, tuple] = {}  # (the widths in increasing order; a language model has no encoder width)
    for architecture, inherited, scratch in complete:
        label = width(architecture)
        groups.setdefault(label, []).append((inherited, scratch))
        numeric[label] = (architecture.get("encoder_embed_dim") or 0, architecture["decoder_embed_dim"])
    cells = [f"{label} ({len(pairs)} architectures): {order_agreement(pairs)}"
             for label, pairs in sorted(groups.items(), key=lambda item: numeric[item[0]]) if len(pairs) >= 3]
    if len(groups) < 2 or not cells:
        return []
    return ["Inside one embedding width (the overall tau also counts the pairs of different widths): "
            + "; ".join(cells) + ".", ""]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to run (default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"),
                        help="the shared data folder (multi30k/)")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work_dirs", "supernet_ranking"),
                        help="data and checkpoints (default: %(default)s)")
    parser.add_argument("--results", default=os.path.join(REPO, "docs", "records", "data", "supernet_multi30k"),
                        help="the stages' small results, committed (default: %(default)s)")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "records", "search.md"), help="the report (default: %(default)s)")
    parser.add_argument("--supernet-updates", type=int, default=SUPERNET_UPDATES, help="(default: %(default)s)")
    parser.add_argument("--scratch-updates", type=int, default=None,
                        help=f"(default: {SCRATCH_UPDATES}; the report: the latest run's)")
    parser.add_argument("--architectures", type=int, default=ARCHITECTURES, help="(default: %(default)s)")
    parser.add_argument("--pool", type=int, default=POOL, help="samples the architectures are chosen from (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the samples (default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report from --results")
    parser.add_argument("--allow-dirty", action="store_true", help="measure even with uncommitted changes (recorded)")
    args = parser.parse_args(argv)
    stages = parse_stages(parser, args.stages, STAGES)
    for name in ("supernet_updates", "scratch_updates", "architectures", "pool"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected at least 1")
    if args.architectures > args.pool:
        parser.error(f"--architectures {args.architectures}: more than the --pool {args.pool} samples they are chosen from")
    os.makedirs(args.results, exist_ok=True)
    command = "python benchmarks/supernet_ranking.py" + "".join(" " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if not args.report_only:
        require_committed(args.allow_dirty, "benchmarks/supernet_ranking.py")
        ctx = Context(data_root=os.path.abspath(args.data_root), work_dir=os.path.abspath(args.work_dir), quick=False)
        # (chosen first, in seconds: a pool with too few distinct architectures, or a stored choice of other
        # settings, is an error before the supernet trains for hours)
        architectures = choose_architectures(args.results, args.architectures, args.pool, args.seed) \
            if {"architectures", "inherited", "scratch"} & set(stages) else []
        prepare(ctx, SUITE)
        if "supernet" in stages:
            train_supernet(ctx, args.results, args.supernet_updates)
        if "inherited" in stages:
            inherited_losses(ctx, args.results, architectures)
        if "scratch" in stages:
            scratch_losses(ctx, args.results, architectures, args.scratch_updates or SCRATCH_UPDATES)
    write_report(args.output, render(args.results, command, args.scratch_updates), REPORT_BEGIN, REPORT_END)
    log(f"report: {relative(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
