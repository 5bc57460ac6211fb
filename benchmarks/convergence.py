#!/usr/bin/env python
"""The convergence budget of a suite: the number of updates B at which the baseline's metric is within the
tolerance of its value at 2B (issues "Architecture search that delivers" and "Every kind at convergence").

One run per (suite, row, seed) trained up a ladder of budgets b0, 2 b0, 4 b0, ... with fairseq's
inverse-square-root schedule, whose learning rate does not depend on ``--max-update``: the model after b
updates of a run to 2b *is* the model of a run to b (same seed, same data order, dropout seeded per update),
so one run serves every rung. At each rung the run stops (``MAX_UPDATE=b``), its ``checkpoint_last.pt`` is
kept as ``checkpoint_u{b}.pt`` and scored the recipe's way, and the rung's small result is written to
``--results`` (command, revision, machine, date). The ladder stops at the first b whose metric is within the
tolerance of 2b's (the budget B = b), or at ``--max-budget``.

* ``multi30k``: bench-quality's Multi30k model (3 + 3 layers, d = 128) and settings, with the recipe's
  dropout 0.3 for a long run; sacreBLEU on test 2016 and on the validation set, beam 5; tolerance 0.5 BLEU
  on test 2016 (as the search issue defines it; the validation BLEU is recorded beside it).
* ``shakespeare8``: a character-level LM on tiny Shakespeare (bench-quality's data), 8 layers, d = 64,
  FFN 256, 4 heads, 512-token context, 4,096 tokens per update; tolerance 1 % of the validation loss; test bits per character recorded.

Every rung resumes: a rung with a result is skipped, an interrupted training resumes from its
``checkpoint_last.pt``. Run it from a separate clone at a committed revision, niced, with
``OMP_NUM_THREADS=1`` (the result then does not depend on the machine's load).

    OMP_NUM_THREADS=1 nice python benchmarks/convergence.py --suite multi30k
    python benchmarks/convergence.py --suite multi30k --report-only
"""
import argparse
import dataclasses
import datetime
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
from benchmarks.common import pipe_fields  # noqa: E402
from benchmarks.provenance import REPO, require_committed  # noqa: E402
from fairseq_plugins.files import atomic_output, write_json  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Ladder:
    suite: quality.Suite        # data, recipe and the settings every rung shares
    row: quality.Row            # the baseline trained up the ladder
    first: int                  # b0
    max_budget: int
    tolerance: float            # |m(b) - m(2b)| below it: converged at b
    relative: bool              # tolerance relative to m(2b) (a share) or absolute
    metric: str                 # the decision's metric key in a rung's result
    floor: Optional[float]      # a rung counts only once the metric reaches it (a model that has learnt nothing
                                # "converges" at BLEU 0)
    subsets: Sequence[str]      # what is scored at every rung
    # B also needs 2B within the tolerance of 4B: a loss plateau before a model starts to use its context
    # (character LMs sit near 3.5 bits for hundreds of updates) would otherwise pass for convergence
    confirm: bool = False


# The baselines of bench-quality's suites at the convergence budget (their settings, defined there), climbed
# with a --max-update of each rung; the LM's sizes on the command line (the same model as its architecture file)
MULTI30K = quality.SUITES["multi30k"]
SHAKESPEARE = quality.SUITES["shakespeare"]
DEFAULT_RESULTS = os.path.join(REPO, "docs", "records", "data", "convergence")
LADDERS = {
    "multi30k": Ladder(
        suite=dataclasses.replace(MULTI30K, env={**quality.CONVERGED_MULTI30K_ENV, "SUBSETS": "valid test"}),
        row=quality.Row("softmax", "mixed_transformer_iwslt_de_en"),
        first=1000, max_budget=64000, tolerance=0.5, relative=False, metric="test_sacrebleu",
        floor=quality.BLEU_FLOOR, subsets=("valid", "test")),
    "shakespeare8": Ladder(
        suite=dataclasses.replace(
            SHAKESPEARE, model_args=quality.LM8_SIZES, env=quality.LM8_ENV),
        row=quality.Row("softmax", "softmax_1head_lm"),
        first=250, max_budget=32000, tolerance=0.01, relative=True, metric="valid_loss", floor=None, subsets=("test",),
        confirm=True),
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


def checkpoint_updates(path: str) -> int:
    """The number of updates a fairseq checkpoint was saved at (0 when there is none)."""
    if not os.path.isfile(path):
        return 0
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    return int(state["optimizer_history"][-1]["num_updates"])


def converged(ladder: Ladder, value: float, doubled: float) -> bool:
    if ladder.floor is not None and min(value, doubled) < ladder.floor:
        return False
    difference = abs(value - doubled)
    return difference < (ladder.tolerance * abs(doubled) if ladder.relative else ladder.tolerance)


def budget_of(ladder: Ladder, records: Sequence[dict]) -> Optional[int]:
    """The budget B of one seed's rungs (in ladder order): the first b within the tolerance of 2b (and 2b of
    4b with ``confirm``); None while no rung qualifies."""
    by_updates = {r["updates"]: r[ladder.metric] for r in records}
    for b in sorted(by_updates):
        steps = [b, 2 * b] + ([4 * b] if ladder.confirm else [])
        if all(u in by_updates for u in steps) and all(
                converged(ladder, by_updates[u], by_updates[2 * u]) for u in steps[:-1]):
            return b
    return None


def train_rung(ctx: quality.Context, ladder: Ladder, save_dir: str, budget: int, seed: int) -> dict:
    """Train up to ``budget`` updates (resuming from checkpoint_last.pt) and keep that checkpoint."""
    kept = os.path.join(save_dir, f"checkpoint_u{budget}.pt")
    suite, row = ladder.suite, ladder.row
    env = quality.recipe_env(ctx, suite, {**suite.env, "MAX_UPDATE": str(budget), "SAVE_DIR": save_dir,
                                          "SEED": str(seed)})
    command = [f"recipes/{suite.recipe}/train.sh", row.arch, *suite.model_args, *row.args, *suite.train_args]
    last = os.path.join(save_dir, "checkpoint_last.pt")
    started = time.time()
    if not os.path.isfile(kept):
        # fairseq-train resumed at its --max-update trains one more update: never start it there
        done = checkpoint_updates(last)
        if done > budget:
            raise SystemExit(f"error: {last} is at {done} updates, past the rung {budget} it has no result for: "
                             f"remove {save_dir} to train the ladder again")
        if done < budget:
            log(f"{ladder.row.name} seed {seed}: training to {budget} updates (from {done})")
            ctx.run(suite.name, env, command, log_path=None)
        with open(last, "rb") as f_in, atomic_output(kept, "wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
    with open(os.path.join(save_dir, "train.log"), encoding="utf-8") as f:
        text = f.read()
    return {"train_command": quality.shell_line(env, command), "env": env, "stage_seconds": round(time.time() - started, 1),
            "train_seconds_total": total_train_seconds(text), **valid_at(text, budget)}


def total_train_seconds(text: str) -> float:
    """The training time of the whole run so far: the sum over its resumed fairseq-train runs."""
    import re
    return round(sum(float(s) for s in re.findall(r"done training in ([0-9.]+) seconds", text)), 1)


def valid_at(text: str, budget: int) -> dict:
    """The validation that fairseq-train ran at ``budget`` updates (it validates when it stops there)."""
    for line in reversed(text.splitlines()):
        if "| valid on 'valid' subset |" in line:
            fields = pipe_fields(line)
            if int(fields.get("num_updates", -1)) == budget:
                return {"valid_loss": fields["loss"], "valid_nll_loss": fields.get("nll_loss"), "valid_ppl": fields.get("ppl")}
    raise SystemExit(f"error: the training log has no validation at update {budget}")


def score_rung(ctx: quality.Context, ladder: Ladder, save_dir: str, budget: int, env: Dict[str, str]) -> dict:
    suite, row = ladder.suite, ladder.row
    out = os.path.join(save_dir, f"score_u{budget}")
    score_env = {**env, "CHECKPOINT": os.path.join(save_dir, f"checkpoint_u{budget}.pt"), "OUT_DIR": out,
                 "SUBSETS": " ".join(ladder.subsets)}
    score_env.pop("MAX_UPDATE", None)
    evaluate_env, evaluate = quality.evaluation_command(suite, row, score_env)
    ctx.run(suite.name, evaluate_env, evaluate)
    scores = {"evaluate_command": quality.shell_line(evaluate_env, evaluate)}
    for subset in ladder.subsets:
        with open(os.path.join(out, f"score-{subset}.json"), encoding="utf-8") as f:
            score = json.load(f)
        for key, value in score.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scores[f"{subset}_{key}"] = value
    return scores


def run_ladder(ctx: quality.Context, name: str, results: str, seed: int) -> Optional[int]:
    """Climb the ladder; returns the converged budget B, or None when --max-budget was reached first."""
    ladder = LADDERS[name]
    quality.prepare(ctx, ladder.suite)
    save_dir = os.path.join(ctx.work_dir, "checkpoints", name, f"{ladder.row.name}_seed{seed}")
    os.makedirs(save_dir, exist_ok=True)
    previous: Optional[dict] = None
    records: List[dict] = []
    for budget in rungs(ladder):
        path = result_path(results, name, ladder.row.name, seed, budget)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        else:
            trained = train_rung(ctx, ladder, save_dir, budget, seed)
            env = trained.pop("env")
            scores = score_rung(ctx, ladder, save_dir, budget, env)
            record = {"ladder": name, "row": ladder.row.name, "seed": seed, "updates": budget, **trained, **scores,
                      "finished": datetime.datetime.now().isoformat(timespec="seconds"), **quality.provenance(ctx.device)}
            write_json(path, record, sort_keys=True)
            log(f"{ladder.row.name} seed {seed} at {budget}: {ladder.metric} = {record[ladder.metric]}")
        records.append(record)
        found = budget_of(ladder, records)
        if found is not None:
            log(f"converged: B = {found} updates ({ladder.metric} " + ", ".join(
                f"{r[ladder.metric]} at {r['updates']}" for r in records if r["updates"] >= found) + ")")
            return found
        # keep only the checkpoints a later rung or the report may still need (the rung just scored)
        if previous is not None:
            stale = os.path.join(save_dir, f"checkpoint_u{previous['updates']}.pt")
            if os.path.isfile(stale):
                os.remove(stale)
        previous = record
    return None


def measured_budget(results: str, name: str, seed: int = 1) -> Optional[int]:
    """The first rung of the ladder whose metric is within the tolerance of the next one's (None: not yet)."""
    ladder = LADDERS[name]
    return budget_of(ladder, [r for r in load_records(results, name) if r["seed"] == seed and r["row"] == ladder.row.name])


def load_records(results: str, name: str) -> List[dict]:
    folder = os.path.join(results, name)
    records = []
    for file in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if file.endswith(".json"):
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                records.append(json.load(f))
    return sorted(records, key=lambda r: (r["row"], r["seed"], r["updates"]))


def render(results: str, names: Sequence[str]) -> str:
    lines = ["# Convergence budgets", "",
             "Written by `benchmarks/convergence.py` from its records in `docs/records/data/convergence/`: the baseline "
             "of each suite trained up a ladder of budgets (one run, inverse-square-root schedule, so each rung is the "
             "model a run to that budget gives); the budget B is the first rung whose metric is within the tolerance "
             "of the next rung's.", ""]
    for name in names:
        ladder = LADDERS[name]
        records = load_records(results, name)
        unit = f"{ladder.tolerance:.0%} (relative)" if ladder.relative else f"{ladder.tolerance:g}"
        lines += [f"## {ladder.suite.title}: {ladder.row.name} ({ladder.row.arch} {' '.join(ladder.suite.model_args)})", "",
                  f"Decision: `{ladder.metric}` within {unit} of the next rung's"
                  + (", and the next rung's within it of the one after (a plateau is not convergence)" if ladder.confirm else "")
                  + (f", once it has reached {ladder.floor:g}" if ladder.floor is not None else "") + ".", ""]
        if not records:
            lines += ["No rung has finished yet.", ""]
            continue
        keys = [k for k in ("valid_loss", "valid_tokenized_bleu", "test_sacrebleu", "test_bits_per_character", "test_perplexity")
                if any(k in r for r in records)]
        lines.append("| seed | updates | " + " | ".join(keys) + " | change to next rung | training time | revision | machine | date |")
        lines.append("|" + " --- |" * (len(keys) + 7))
        by_seed: Dict[int, List[dict]] = {}
        for record in records:
            by_seed.setdefault(record["seed"], []).append(record)
        verdicts = []
        for seed, rows in by_seed.items():
            found = budget_of(ladder, rows)
            for i, record in enumerate(rows):
                following = rows[i + 1] if i + 1 < len(rows) else None
                if following is None:
                    change = "(no next rung yet)"
                else:
                    delta = following[ladder.metric] - record[ladder.metric]
                    ok = converged(ladder, record[ladder.metric], following[ladder.metric])
                    change = f"{delta:+.3f}" + (" (within)" if ok else "")
                cells = [f"{record[k]:.3f}" if isinstance(record.get(k), float) else str(record.get(k, "")) for k in keys]
                lines.append(f"| {seed} | {record['updates']} | " + " | ".join(cells) +
                             f" | {change} | {record.get('train_seconds_total', 0) / 3600:.2f} h | {record['git']} | "
                             f"{record['cores']} cores, {record['threads']} | {record['finished'][:10]} |")
            verdicts.append(f"seed {seed}: " + (f"converged at B = {found} updates" if found else
                                                 f"not converged by {rows[-1]['updates']} updates"))
        lines += ["", "Budget: " + "; ".join(verdicts) + ".", "",
                  "Losses are fairseq's, in bits per token. Training time is fairseq's own wall clock of the run so far, "
                  "on a machine shared with other work (each record holds its load average): a cost, not a speed "
                  "measurement. The first rung's commands (each rung differs in `MAX_UPDATE` and `CHECKPOINT`):", "",
                  "```bash", quality.portable_command(quality.Context(data_root=os.path.join(os.path.dirname(REPO), "shared", "data"),
                                                                      work_dir="", quick=False), records[0]["train_command"]),
                  records[0]["evaluate_command"], "```", ""]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(LADDERS), action="append",
                        help="ladder(s) to climb (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--data-root", default=os.path.join(os.path.dirname(REPO), "shared", "data"), help="the shared data")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work_dirs", "convergence"), help="(default: %(default)s)")
    parser.add_argument("--results", default=DEFAULT_RESULTS,
                        help="one JSON per rung, committed (default: %(default)s)")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "records", "convergence.md"), help="the report (default: %(default)s)")
    parser.add_argument("--first", type=int, help="the first rung (default: the ladder's)")
    parser.add_argument("--max-budget", type=int, help="the last rung at most (default: the ladder's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the recipes train and score (cuda: one GPU, float32; default: %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only re-render the report")
    parser.add_argument("--allow-dirty", action="store_true", help="train with uncommitted changes (recorded)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, quality.stop_on_sigterm)
    names = args.suite or sorted(LADDERS)
    for option in ("first", "max_budget"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option.replace('_', '-')} must be a positive number of updates, got {value}")
    overrides = {k: v for k, v in (("first", args.first), ("max_budget", args.max_budget)) if v is not None}
    for name in names:
        LADDERS[name] = dataclasses.replace(LADDERS[name], **overrides)
    if not args.report_only:
        require_committed(args.allow_dirty, "convergence runs")
        ctx = quality.Context(data_root=args.data_root, work_dir=args.work_dir, quick=False, device=args.device)
        for name in names:
            budget = run_ladder(ctx, name, args.results, args.seed)
            log(f"{name}: " + (f"B = {budget}" if budget else "no rung converged up to --max-budget"))
    with atomic_output(args.output) as f:
        f.write(render(args.results, sorted(LADDERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
