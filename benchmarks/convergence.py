#!/usr/bin/env python
"""The convergence budget of a suite: the number of updates B that the baseline's metric at 2B improves on by
less than the tolerance, or not at all (issues "Architecture search that delivers" and "Every kind at convergence").

Each rung of a ladder of budgets b0, 2 b0, 4 b0, ... is its own run from scratch whose learning rate warms up
and decays to ~0 at exactly that budget (``LR_SCHEDULER=cosine``, ``MAX_UPDATE=b``): the model a row of the
suite gets when it trains for b updates. (An inverse-square-root schedule, whose rate does not depend on
``--max-update``, would let one run serve every rung, but never anneals: the retired ladders
``*_inverse_sqrt`` climbed that way were still gaining 1 BLEU per doubling at 16,000 updates.) The rungs are
independent, so several can train side by side (``--rung``). Each rung's checkpoint is scored the recipe's
way and its small result written to ``--results`` (command, revision, machine, date). The budget B is the
first b that 2b improves on by less than the tolerance (a worse 2b, a model that overfits, decides it too).

* ``multi30k``: bench-quality's Multi30k model (3 + 3 layers, d = 128) and settings, with the recipe's
  dropout 0.3 for a long run and lr 5e-3; sacreBLEU on test 2016 and on the validation set, beam 5; tolerance 0.5 BLEU
  on test 2016 (as the search issue defines it; the validation BLEU is recorded beside it).
* ``shakespeare8``: a character-level LM on tiny Shakespeare (bench-quality's data), 8 layers, d = 64,
  FFN 256, 4 heads, 512-token context, 4,096 tokens per update, lr 5e-3; tolerance 1 % of the validation
  loss; test bits per character recorded. (The retired ladder, which started at 250 updates, also asked 2B
  to be within it of 4B: a character LM's early plateau, before it uses its context, is not convergence. The
  current ladder's first rung, 1,000 annealed updates, is past it: 3.20 bits against the plateau's 3.46-3.58
  at 250-1,000 updates of the retired ladder.)

Every rung resumes: a rung with a result is skipped, an interrupted training resumes from its
``checkpoint_last.pt`` (the time fairseq's checkpoints carry across runs is the rung's training time). A
rung's record holds its settings (fingerprint) and the data's; one of other settings is an error, never
reused, and so is a rung folder started with other settings. One process at a time climbs a rung (a lock in
its folder): a second one that reaches it waits and reads its result; processes that start together prepare
the data one after the other. The budget is decided only once every rung below it has its record. Records
name the machine's folders as ``<work-dir>``, ``<data-root>``, ``<checkout>``. Run it from a separate clone
at a committed revision, niced, with ``OMP_NUM_THREADS=1`` (the result then does not depend on the
machine's load).

    OMP_NUM_THREADS=1 nice python benchmarks/convergence.py --suite multi30k
    OMP_NUM_THREADS=1 nice python benchmarks/convergence.py --suite multi30k --rung 8000   # beside it
    python benchmarks/convergence.py --report-only                            # every ladder, as recorded
"""
import argparse
import dataclasses
import datetime
import functools
import json
import os
import shutil
import signal
import sys
import time
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import quality  # noqa: E402
from benchmarks.common import pipe_fields, read_json  # noqa: E402
from benchmarks.provenance import REPO, require_committed  # noqa: E402
from fairseq_plugins.files import atomic_output, exclusive_lock, write_json  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Ladder:
    suite: quality.Suite        # data, recipe and the settings every rung shares
    row: quality.Row            # the baseline trained up the ladder
    first: int                  # b0
    max_budget: int
    tolerance: float            # m(2b) better than m(b) by less than it: converged at b
    relative: bool              # tolerance relative to m(2b) (a share) or absolute
    metric: str                 # the decision's metric key in a rung's result
    lower_is_better: bool       # the metric's direction (a loss; else a score)
    floor: Optional[float]      # a rung counts only once the metric reaches it (a model that has learnt nothing
                                # "converges" at BLEU 0)
    subsets: Sequence[str]      # what is scored at every rung
    # B also needs 2B within the tolerance of 4B: a loss plateau before a model starts to use its context
    # (character LMs sit near 3.5 bits for hundreds of updates) would otherwise pass for convergence
    confirm: bool = False
    # also score the average of the last N checkpoints, saved every budget / (4 N) updates (the last quarter of
    # the run; the mFormer paper and HAT average the last ten): whether averaging helps, at every rung
    average_last: int = 0
    valid_metric: str = ""      # the validation score that decides whether averaging helps
    # the retired ladders: shown in the report from their records, never climbed again; ``note`` says why
    retired: bool = False
    note: str = ""


# The baselines of bench-quality's suites at the convergence budget (their settings, defined there), one run
# per rung; the LM's sizes on the command line (the same model as its architecture file)
MULTI30K = quality.SUITES["multi30k"]
SHAKESPEARE = quality.SUITES["shakespeare"]
DEFAULT_RESULTS = os.path.join(REPO, "docs", "records", "data", "convergence")
_MULTI30K = dict(row=quality.Row("softmax", "mixed_transformer_iwslt_de_en"), first=1000, max_budget=64000,
                 tolerance=0.5, relative=False, metric="test_sacrebleu", lower_is_better=False, floor=quality.BLEU_FLOOR,
                 subsets=("valid", "test"))
AVERAGED_SHARE = 4  # the averaged checkpoints span the last 1 / AVERAGED_SHARE of a rung's run
_SHAKESPEARE8 = dict(row=quality.Row("softmax", "softmax_1head_lm"), max_budget=64000, tolerance=0.01, relative=True,
                     metric="valid_loss", lower_is_better=True, floor=None, subsets=("test",))


_ONE_RUN = ("One run up the ladder with a schedule that ignores --max-update (each rung is where that run "
            "stopped): it never anneals, so it was still gaining at 16,000 updates.")


def _inverse_sqrt(env: Dict[str, str], lr: str) -> Dict[str, str]:
    """A suite's settings as the retired ladders trained them: fairseq's inverse square root at ``lr``."""
    return {**{k: v for k, v in env.items() if k != "LR_SCHEDULER"}, "LR": lr}


LADDERS = {
    "multi30k": Ladder(suite=dataclasses.replace(MULTI30K, env={**quality.CONVERGED_MULTI30K_ENV, "SUBSETS": "valid test"}),
                       average_last=10, valid_metric="valid_tokenized_bleu", **_MULTI30K),
    "shakespeare8": Ladder(suite=dataclasses.replace(SHAKESPEARE, model_args=quality.LM8_SIZES, env=quality.LM8_ENV),
                           first=1000, **_SHAKESPEARE8),  # (its first rung is past the early plateau: no confirming)
    # the first ladders: one inverse-square-root run each, which never anneals (the schedule the suites left)
    "multi30k_inverse_sqrt": Ladder(
        suite=dataclasses.replace(MULTI30K, title=MULTI30K.title + ", inverse square root (retired)",
                                  env=_inverse_sqrt({**quality.CONVERGED_MULTI30K_ENV, "SUBSETS": "valid test"}, "2e-3")),
        retired=True, note=_ONE_RUN, **_MULTI30K),
    "shakespeare8_inverse_sqrt": Ladder(
        suite=dataclasses.replace(SHAKESPEARE, title=SHAKESPEARE.title + ", 8 layers, inverse square root (retired)",
                                  model_args=quality.LM8_SIZES, env=_inverse_sqrt(quality.LM8_ENV, "2e-3")),
        first=250, retired=True, note=_ONE_RUN, **{**_SHAKESPEARE8, "confirm": True, "max_budget": 32000}),
    "multi30k_cosine_lr2e-3": Ladder(
        suite=dataclasses.replace(MULTI30K, title=MULTI30K.title + ", cosine at lr 2e-3 (retired)",
                                  env={**quality.CONVERGED_MULTI30K_ENV, "SUBSETS": "valid test", "LR": "2e-3"}),
        average_last=10, valid_metric="valid_tokenized_bleu", retired=True,
        note="The cosine at the 500-update suite's lr 2e-3 scored below the inverse-square-root run at 1000 and 2000 "
             "updates: too little learning rate for a run that decays; at lr 5e-3 (the LM's) the 2000 rung scored "
             "2.3 BLEU more (the current ladder, above), and the suite moved there.",
        **_MULTI30K),
}


def log(message: str):
    print(f"[convergence] {message}", file=sys.stderr, flush=True)


def rungs(ladder: Ladder) -> List[int]:
    budgets, b = [], ladder.first
    while b <= ladder.max_budget:
        budgets.append(b)
        b *= 2
    return budgets


def result_path(results: str, ladder_name: str, row: str, seed: int, budget: int) -> str:
    return os.path.join(results, ladder_name, f"{row}_seed{seed}_u{budget}.json")


def converged(ladder: Ladder, value: float, doubled: float) -> bool:
    """Whether twice the budget gains less than the tolerance over it; a doubled rung that is worse (a model
    that overfits with more updates) gains nothing: b is converged, and no larger rung could decide otherwise."""
    if ladder.floor is not None and min(value, doubled) < ladder.floor:
        return False
    gain = value - doubled if ladder.lower_is_better else doubled - value
    return gain < (ladder.tolerance * abs(doubled) if ladder.relative else ladder.tolerance)


def budget_of(ladder: Ladder, records: Sequence[dict]) -> Optional[int]:
    """The budget B of one seed's rungs: the first rung b that 2b improves on by less than the tolerance (and 2b
    that 4b does, with ``confirm``); None while no rung qualifies, and while a rung below a qualifying one (or one that
    decides it) has no record yet: rungs climbed side by side finish in any order, and a lower rung still to
    come could be B (a budget once measured never moves)."""
    by_updates = {r["updates"]: r[ladder.metric] for r in records}
    for b in rungs(ladder):
        steps = [b, 2 * b] + ([4 * b] if ladder.confirm else [])
        if not all(u in by_updates for u in steps):
            return None
        if all(converged(ladder, by_updates[u], by_updates[2 * u]) for u in steps[:-1]):
            return b
    return None


def save_dir_of(ctx: quality.Context, ladder_name: str, seed: int, budget: int) -> str:
    """Where a rung trains: its own run's folder."""
    return os.path.join(ctx.work_dir, "checkpoints", ladder_name, f"{LADDERS[ladder_name].row.name}_seed{seed}_u{budget}")


def save_interval(ladder: Ladder, budget: int) -> int:
    """Updates between the checkpoints a rung averages (0: it averages none)."""
    return max(1, budget // (AVERAGED_SHARE * ladder.average_last)) if ladder.average_last else 0


def interval_env(ladder: Ladder, budget: int) -> Dict[str, str]:
    """The recipe settings that save (and keep) the checkpoints a rung at ``budget`` averages."""
    return {"SAVE_INTERVAL_UPDATES": str(save_interval(ladder, budget)),
            "KEEP_INTERVAL_UPDATES": str(ladder.average_last)} if ladder.average_last else {}


def rung_settings(ladder: Ladder, seed: int, budget: int) -> dict:
    """Everything that decides a rung's model and scores (its fingerprint): the suite's settings, the row, the
    budget, the seed, the checkpoints it averages and what it scores; not the machine's folders nor the device
    (the data is checked apart, where it is prepared)."""
    suite, row = ladder.suite, ladder.row
    return {"arch": row.arch, "args": [*suite.model_args, *row.args, *suite.train_args],
            "env": {**suite.env, "MAX_UPDATE": str(budget), "SEED": str(seed), **interval_env(ladder, budget)},
            "average_last": ladder.average_last, "subsets": list(ladder.subsets)}


def differences(recorded: dict, current: dict, prefix: str = "") -> List[str]:
    """``key: recorded -> current`` for every setting that differs (nested keys joined by dots)."""
    changed = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += differences(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(f"{prefix}{key}: {old} -> {new}")
    return changed


def is_current(ladder: Ladder, record: dict) -> bool:
    """Whether a rung's record was climbed with the ladder's current settings (a record of before fingerprints
    is taken as it is)."""
    return "fingerprint" not in record or \
        record["fingerprint"] == quality.fingerprint(rung_settings(ladder, record["seed"], record["updates"]))


def other_settings(path: str, recorded: dict, settings: dict, what: str, remedy: str) -> SystemExit:
    """The error for a rung's record or run folder of other settings: never reused, nor overwritten silently."""
    changed = differences(recorded, settings) or ["the fingerprint"]
    return SystemExit(f"error: {path}: {what} with other settings ({'; '.join(changed[:4])}"
                      f"{'; ...' if len(changed) > 4 else ''}): {remedy}")


def averaged_name(ladder: Ladder, budget: int) -> str:
    return f"checkpoint_u{budget}_avg{ladder.average_last}.pt"


def train_rung(ctx: quality.Context, ladder: Ladder, save_dir: str, budget: int, seed: int) -> dict:
    """Train up to ``budget`` updates (resuming from checkpoint_last.pt) and keep that checkpoint (and the
    average of the last ``average_last``)."""
    kept = os.path.join(save_dir, f"checkpoint_u{budget}.pt")
    suite, row = ladder.suite, ladder.row
    env = quality.recipe_env(ctx, suite, {**suite.env, "MAX_UPDATE": str(budget), "SAVE_DIR": save_dir,
                                          "SEED": str(seed), **interval_env(ladder, budget)})
    command = quality.training_command(suite, row)
    last = os.path.join(save_dir, "checkpoint_last.pt")
    started = time.time()
    # the settings the run in this folder started with, and its device: a resumed run must be the same run
    # (a run trained to the end is scored on any device: only its training time is the device's)
    settings = rung_settings(ladder, seed, budget)
    settings_file = os.path.join(save_dir, "rung.json")
    if os.path.isfile(settings_file):
        started_with = read_json(settings_file)
        if not quality.same_run(started_with, settings, ctx.device, finished=lambda: os.path.isfile(kept)):
            expected = quality.run_settings("cpu" if os.path.isfile(kept) else ctx.device, settings)
            if os.path.isfile(kept):
                started_with = {k: v for k, v in started_with.items() if k != "device"}
            raise other_settings(settings_file, started_with, expected, "this rung's run started",
                                 f"remove {save_dir} to train the rung again with the current settings")
    elif not os.path.isfile(last) and not os.path.isfile(kept):  # (a folder of before rung.json: taken as it is)
        write_json(settings_file, quality.run_settings(ctx.device, settings), sort_keys=True)
    if not os.path.isfile(kept):
        # fairseq-train resumed at its --max-update trains one more update: never start it there
        done = quality.checkpoint_updates(last)
        if done > budget:
            raise SystemExit(f"error: {last} is at {done} updates, past the rung {budget} it trains for: "
                             f"remove {save_dir} to train the rung again")
        if done < budget:
            log(f"{ladder.row.name} seed {seed}: training to {budget} updates (from {done})")
            ctx.run(suite.name, env, command, log_path=None)
        if ladder.average_last:
            ctx.run(suite.name, {}, [ctx.python, "recipes/lib/average_checkpoints.py", "--dir", save_dir,
                                     "--last", str(ladder.average_last),
                                     "--output", os.path.join(save_dir, averaged_name(ladder, budget))])
        with open(last, "rb") as f_in, atomic_output(kept, "wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
        # the run is over: what it keeps is all a report needs
        for name in os.listdir(save_dir):
            if name in ("checkpoint_last.pt", "checkpoint_best.pt") or quality.recipe_lib("average_checkpoints").UPDATE_CHECKPOINT.fullmatch(name):
                os.remove(os.path.join(save_dir, name))
    with open(os.path.join(save_dir, "train.log"), encoding="utf-8") as f:
        text = f.read()
    return {"train_command": quality.shell_line(env, command), "env": env, "stage_seconds": round(time.time() - started, 1),
            "train_seconds_total": quality.total_train_seconds(kept, text), **valid_at(text, budget)}


def valid_at(text: str, budget: int) -> dict:
    """The validation that fairseq-train ran at ``budget`` updates (it validates when it stops there)."""
    for line in reversed(text.splitlines()):
        if "| valid on 'valid' subset |" in line:
            fields = pipe_fields(line)
            if int(fields.get("num_updates", -1)) == budget:
                return {"valid_loss": fields["loss"], "valid_nll_loss": fields.get("nll_loss"), "valid_ppl": fields.get("ppl")}
    raise SystemExit(f"error: the training log has no validation at update {budget}")


def score_rung(ctx: quality.Context, ladder: Ladder, save_dir: str, budget: int, env: Dict[str, str]) -> dict:
    """The rung's scores: ``SUBSET_KEY`` of its last checkpoint, ``avgN_SUBSET_KEY`` of the averaged one."""
    suite, row = ladder.suite, ladder.row
    scores: Dict[str, object] = {}
    checkpoints = [("", f"checkpoint_u{budget}.pt", f"score_u{budget}")]
    if ladder.average_last:
        prefix = f"avg{ladder.average_last}_"
        checkpoints.append((prefix, averaged_name(ladder, budget), f"score_u{budget}_avg{ladder.average_last}"))
    for prefix, checkpoint, folder in checkpoints:
        out = os.path.join(save_dir, folder)
        score_env = {**env, "CHECKPOINT": os.path.join(save_dir, checkpoint), "OUT_DIR": out,
                     "SUBSETS": " ".join(ladder.subsets)}
        score_env.pop("MAX_UPDATE", None)
        evaluate_env, evaluate = quality.evaluation_command(suite, row, score_env)
        ctx.run(suite.name, evaluate_env, evaluate)
        scores[f"{prefix}evaluate_command"] = quality.shell_line(evaluate_env, evaluate)
        for subset in ladder.subsets:
            with open(os.path.join(out, f"score-{subset}.json"), encoding="utf-8") as f:
                score = json.load(f)
            for key, value in score.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    scores[f"{prefix}{subset}_{key}"] = value
    return scores


def recorded_rung(ctx: quality.Context, name: str, path: str, settings: dict) -> Optional[dict]:
    """The rung's record (None: none yet); one of other settings or data is an error (never reused as the
    current ladder's rung, never overwritten)."""
    record = read_json(path)
    if record is None:
        return None
    remedy = (f"the {name} ladder changed since; retire its records (a new ladder name) or remove this record "
              "and the rung's folder to climb it again")
    if not is_current(LADDERS[name], record):
        raise other_settings(path, record.get("settings", {}), settings, "this rung was climbed", remedy)
    data = quality.data_fingerprint(quality.data_bin(ctx, LADDERS[name].suite))
    if record.get("data", data) != data:
        raise SystemExit(f"error: {path}: this rung was climbed on other data (fingerprint {record['data']}, the "
                         f"prepared data's is {data}): {remedy}")
    return record


def climb_rung(ctx: quality.Context, name: str, results: str, seed: int, budget: int) -> dict:
    """Train and score one rung and write its result (a rung with a result is read, not trained again). One
    process at a time climbs a rung: another one that reaches it waits, then reads its result."""
    ladder = LADDERS[name]
    path = result_path(results, name, ladder.row.name, seed, budget)
    settings = rung_settings(ladder, seed, budget)
    record = recorded_rung(ctx, name, path, settings)
    if record is not None:
        return record
    save_dir = save_dir_of(ctx, name, seed, budget)
    label = f"{ladder.row.name} seed {seed} at {budget}"
    with exclusive_lock(os.path.join(save_dir, "rung.lock"),
                        on_wait=lambda: log(f"{label}: another process is climbing this rung: waiting for it"),
                        while_waiting=lambda: ctx.raise_if_stopping(f"{label}: waiting for another process's climb")):
        record = recorded_rung(ctx, name, path, settings)  # (the process waited for has finished it)
        if record is not None:
            return record
        trained = train_rung(ctx, ladder, save_dir, budget, seed)
        env = trained.pop("env")
        scores = score_rung(ctx, ladder, save_dir, budget, env)
        record = {"ladder": name, "row": ladder.row.name, "seed": seed, "updates": budget, **trained, **scores,
                  "settings": settings, "fingerprint": quality.fingerprint(settings),
                  "data": quality.data_fingerprint(quality.data_bin(ctx, ladder.suite)),
                  "finished": datetime.datetime.now().isoformat(timespec="seconds"), **quality.provenance(ctx.device)}
        # committed: the machine's folders as placeholders (<work-dir>, <data-root>, <checkout>); the settings,
        # which name none, as they are
        record = {**quality.portable_record(ctx, record), "settings": settings}
        write_json(path, record, sort_keys=True)
    log(f"{ladder.row.name} seed {seed} at {budget}: {ladder.metric} = {record[ladder.metric]}")
    return record


def run_ladder(ctx: quality.Context, name: str, results: str, seed: int,
               only: Optional[Sequence[int]] = None, jobs: int = 1) -> Optional[int]:
    """Climb the ladder (or only the rungs ``only``), up to the first budget B that the rungs recorded so far
    (other processes' included) show, and return it (None: none yet). ``jobs`` > 1: the rungs ``only``, that
    many side by side (a lent GPU trains a whole ladder at once)."""
    ladder = LADDERS[name]
    if ladder.retired:
        raise SystemExit(f"error: the {name} ladder is retired: its records are reported, it is not climbed again")
    quality.prepare(ctx, ladder.suite)
    chosen = [b for b in rungs(ladder) if only is None or b in only]
    if jobs > 1:
        quality.run_parallel(ctx, (functools.partial(climb_rung, ctx, name, results, seed, b) for b in chosen), jobs)
    for budget in [] if jobs > 1 else chosen:
        climb_rung(ctx, name, results, seed, budget)
        if measured_budget(results, name, seed) is not None:
            break
    found = measured_budget(results, name, seed)
    if found is not None:
        log(f"converged: B = {found} updates ({ladder.metric} " + ", ".join(
            f"{r[ladder.metric]} at {r['updates']}" for r in seed_records(results, name, seed)
            if r["updates"] >= found) + ")")
    return found


def averaging_env(results: str, name: str, budget: int) -> Dict[str, str]:
    """The recipe settings that make a row at ``budget`` train and score as the ladder's rung there did with
    averaging (checkpoints every budget / (4 N) updates, generate.sh on the average of the last N), when that
    rung's average beat its last checkpoint on the validation set; else none (the suites choose on validation)."""
    ladder = LADDERS[name]
    if not ladder.average_last:
        return {}
    record = next((r for r in seed_records(results, name, 1) if r["updates"] == budget), None)
    averaged = f"avg{ladder.average_last}_{ladder.valid_metric}"
    if record is None or averaged not in record:
        return {}
    helps = record[averaged] > record[ladder.valid_metric] if ladder.suite.higher_is_better \
        else record[averaged] < record[ladder.valid_metric]
    return {**interval_env(ladder, budget), "AVERAGE_LAST": str(ladder.average_last)} if helps else {}


def seed_records(results: str, name: str, seed: int) -> List[dict]:
    """The seed's rungs climbed with the ladder's current settings (a budget is never measured on others)."""
    ladder = LADDERS[name]
    return [r for r in load_records(results, name)
            if r["seed"] == seed and r["row"] == ladder.row.name and is_current(ladder, r)]


def measured_budget(results: str, name: str, seed: int = 1) -> Optional[int]:
    """The first rung of the ladder that the next one improves on by less than the tolerance (None: not yet)."""
    return budget_of(LADDERS[name], seed_records(results, name, seed))


def load_records(results: str, name: str) -> List[dict]:
    folder = os.path.join(results, name)
    records = [read_json(os.path.join(folder, file)) for file in (sorted(os.listdir(folder)) if os.path.isdir(folder) else [])
               if file.endswith(".json")]
    return sorted(records, key=lambda r: (r["row"], r["seed"], r["updates"]))


def render(results: str, names: Sequence[str]) -> str:
    lines = ["# Convergence budgets", "",
             "Written by `benchmarks/convergence.py` from its records in `docs/records/data/convergence/`: the baseline "
             "of each suite trained at a ladder of budgets, each rung its own run whose learning rate decays to ~0 at "
             "that budget (a cosine); the budget B is the first rung whose metric the next rung's improves on by less "
             "than the tolerance (or not at all: a model that overfits). The retired ladders at the end were climbed "
             "with earlier settings of the suites; each says why it was retired.", ""]
    for name in sorted(names, key=lambda n: (LADDERS[n].retired, n)):
        ladder = LADDERS[name]
        every = load_records(results, name)
        # (a retired ladder's records are its whole account: its settings, built from the suites' current
        # ones, are not checked against them, so a later change to a suite never hides them)
        records = every if ladder.retired else [r for r in every if is_current(ladder, r)]
        unit = f"{ladder.tolerance:.0%} (relative)" if ladder.relative else f"{ladder.tolerance:g}"
        lines += [f"## {ladder.suite.title}: {ladder.row.name} ({ladder.row.arch} {' '.join(ladder.suite.model_args)})", "",
                  f"Decision: `{ladder.metric}` within {unit} of the next rung's, or better than it"
                  + (", and the next rung's within it of the one after (a plateau is not convergence)" if ladder.confirm else "")
                  + (f", once it has reached {ladder.floor:g}" if ladder.floor is not None else "") + ".", ""]
        if ladder.note:
            lines += [f"Retired: {ladder.note}", ""]
        if len(records) < len(every):
            lines += [f"{len(every) - len(records)} rung record(s) climbed with other settings are not shown "
                      f"(`{os.path.join(os.path.basename(results.rstrip(os.sep)), name)}/`; the ladder changed since).", ""]
        if not records:
            lines += ["No rung has finished yet.", ""]
            continue
        scored = ("valid_tokenized_bleu", "test_sacrebleu", "test_bits_per_character", "test_perplexity")
        averaged = [f"avg{ladder.average_last}_{k}" for k in scored] if ladder.average_last else []
        keys = [k for k in ("valid_loss", *scored, *averaged) if any(k in r for r in records)]
        lines.append("| seed | updates | " + " | ".join(keys) + " | change to next rung | training time | revision | machine | date |")
        lines.append("|" + " --- |" * (len(keys) + 7))
        by_seed: Dict[int, List[dict]] = {}
        for record in records:
            by_seed.setdefault(record["seed"], []).append(record)
        verdicts = []
        for seed, rows in by_seed.items():
            found = budget_of(ladder, rows)
            by_updates = {record["updates"]: record for record in rows}
            for record in rows:
                following = by_updates.get(2 * record["updates"])  # the next rung (one side by side may be missing)
                if following is None:
                    change = "(no next rung yet)"
                else:
                    delta = following[ladder.metric] - record[ladder.metric]
                    ok = converged(ladder, record[ladder.metric], following[ladder.metric])
                    change = f"{delta:+.3f}" + (" (converged)" if ok else "")
                cells = [f"{record[k]:.3f}" if isinstance(record.get(k), float) else str(record.get(k, "")) for k in keys]
                lines.append(f"| {seed} | {record['updates']} | " + " | ".join(cells) +
                             f" | {change} | {record.get('train_seconds_total', 0) / 3600:.2f} h | {record['git']} | "
                             f"{record['cores']} cores, {record['threads']} | {record['finished'][:10]} |")
            to_climb = [str(b) for b in rungs(ladder) if b < rows[-1]["updates"] and b not in by_updates]
            verdicts.append(f"seed {seed}: " + (f"converged at B = {found} updates" if found else
                                                 f"not decided before rungs {', '.join(to_climb)} are climbed" if to_climb
                                                 else f"not converged by {rows[-1]['updates']} updates"))
        lines += ["", "Budget: " + "; ".join(verdicts) + ".", "",
                  "Losses are fairseq's, in bits per token. Training time is fairseq's own wall clock of the run so far, "
                  "on a machine shared with other work (each record holds its load average): a cost, not a speed measurement. "
                  + (f"`avg{ladder.average_last}_` columns score the average of the last {ladder.average_last} "
                     f"checkpoints, saved every budget / {AVERAGED_SHARE * ladder.average_last} updates (the run's last "
                     f"1/{AVERAGED_SHARE}); the budget is decided on the last checkpoint. " if ladder.average_last else "")
                  + "The first rung's commands (`<work-dir>`: the run's `--work-dir`; each rung differs in `MAX_UPDATE`, "
                  + ("" if ladder.note == _ONE_RUN else "`SAVE_DIR`, ") + "`CHECKPOINT` and `OUT_DIR`):", "",
                  "```bash", quality.portable_command(quality.Context(data_root=os.path.join(os.path.dirname(REPO), "shared", "data"),
                                                                      work_dir="", quick=False), records[0]["train_command"]),
                  records[0]["evaluate_command"], "```", ""]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    climbable = sorted(name for name, ladder in LADDERS.items() if not ladder.retired)
    parser.add_argument("--suite", choices=climbable, action="append",
                        help="ladder(s) to climb (repeatable; default: all)")
    parser.add_argument("--rung", type=int, action="append",
                        help="climb only this rung (repeatable): independent runs, so another process can train other "
                             "rungs of the same ladder beside it (one that reaches a rung under way waits for it)")
    parser.add_argument("--seed", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"), help="the shared data")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work_dirs", "convergence"), help="(default: %(default)s)")
    parser.add_argument("--results", default=DEFAULT_RESULTS,
                        help="one JSON per rung, committed (default: %(default)s)")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "records", "convergence.md"), help="the report (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="train the --rung rungs this many side by side (default: %(default)s: one after another, "
                             "up to the first budget found)")
    parser.add_argument("--first", type=int, help="the first rung (default: the ladder's)")
    parser.add_argument("--max-budget", type=int, help="the last rung at most (default: the ladder's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the recipes train and score (cuda: one GPU, float32; default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report")
    parser.add_argument("--allow-dirty", action="store_true", help="train with uncommitted changes (recorded)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, quality.stop_on_sigterm)
    names = args.suite or climbable
    for option in ("first", "max_budget"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option.replace('_', '-')} must be a positive number of updates, got {value}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.jobs > 1 and not args.rung:
        parser.error(f"--jobs {args.jobs} trains the rungs named by --rung side by side: name them (--rung 1000 --rung 2000 ...)")
    overrides = {k: v for k, v in (("first", args.first), ("max_budget", args.max_budget)) if v is not None}
    for name in names:
        LADDERS[name] = dataclasses.replace(LADDERS[name], **overrides)
        if not rungs(LADDERS[name]):
            parser.error(f"--first {LADDERS[name].first} is above --max-budget {LADDERS[name].max_budget}: the {name} "
                         "ladder would have no rung")
        for rung in args.rung or ():
            if rung not in rungs(LADDERS[name]):
                parser.error(f"--rung {rung} is not a rung of the {name} ladder: expected one of "
                             + ", ".join(map(str, rungs(LADDERS[name]))))
    if args.report_only:  # (it renders every ladder's results as they are: a training option would be ignored)
        training = [option for option, given in (("--suite", args.suite), ("--rung", args.rung), ("--jobs", args.jobs != 1),
                                                 ("--seed", args.seed != 1), ("--device", args.device != "cpu")) if given]
        if training:
            parser.error(f"{training[0]}: an option of climbing a ladder, which --report-only does not (it renders every "
                         "ladder; it would be ignored)")
    if not args.report_only:
        require_committed(args.allow_dirty, "convergence runs")
        # absolute: the recipes run from the checkout, this process from wherever it was started
        ctx = quality.Context(data_root=os.path.abspath(args.data_root), work_dir=os.path.abspath(args.work_dir),
                              quick=False, device=args.device)
        for name in names:
            budget = run_ladder(ctx, name, args.results, args.seed, args.rung, args.jobs)
            log(f"{name}: " + (f"B = {budget}" if budget else "no budget found yet (no rung that the next improves on by less than the tolerance)"))
    with atomic_output(args.output) as f:
        f.write(render(args.results, sorted(LADDERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
