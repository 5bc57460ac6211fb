"""benchmarks/convergence.py: the ladder's arithmetic on known numbers, and a short real ladder on generated
data whose rungs are exactly the models that runs straight to those budgets give."""
import json
import os
import random
import subprocess
import sys

import pytest

from benchmarks import convergence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmarks", "convergence.py")


def test_rungs_double_up_to_the_largest_budget():
    ladder = convergence.LADDERS["multi30k"]
    assert convergence.rungs(ladder) == [1000, 2000, 4000, 8000, 16000, 32000, 64000]
    assert convergence.rungs(convergence.dataclasses.replace(ladder, first=3, max_budget=20)) == [3, 6, 12]


def test_converged_absolute_relative_and_below_the_floor():
    bleu = convergence.LADDERS["multi30k"]  # 0.5 BLEU, only once the model has learnt (5 BLEU)
    assert convergence.converged(bleu, 30.0, 30.4) and convergence.converged(bleu, 30.4, 30.0)
    assert not convergence.converged(bleu, 30.0, 30.6)
    assert not convergence.converged(bleu, 0.01, 0.01)  # learnt nothing: not a budget
    loss = convergence.LADDERS["shakespeare8"]  # 1 % of the loss at twice the budget
    assert convergence.converged(loss, 1.505, 1.5) and not convergence.converged(loss, 1.52, 1.5)


def test_valid_at_reads_the_validation_at_the_budget_and_refuses_a_log_without_it():
    log = ("x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.879 | nll_loss 7.1 | ppl 235.36 | num_updates 8\n"
           "x | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.5 | ppl 90.5 | num_updates 16 | best_loss 6.5\n")
    assert convergence.valid_at(log, 8) == {"valid_loss": 7.879, "valid_nll_loss": 7.1, "valid_ppl": 235.36}
    assert convergence.valid_at(log, 16)["valid_loss"] == 6.5
    with pytest.raises(SystemExit, match="no validation at update 12"):
        convergence.valid_at(log, 12)


def _tiny_shakespeare(root):
    rng = random.Random(0)
    words = "the king queen said and went to a castle little wolf gold".split()
    folder = root / "tiny_shakespeare"
    folder.mkdir(parents=True)
    (folder / "input.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(1500))[:60_000])


def _run(tmp_path, work, results, *extra):
    command = [sys.executable, SCRIPT, "--suite", "shakespeare8", "--data-root", str(tmp_path / "data"),
               "--work-dir", str(work), "--results", str(results), "--output", str(tmp_path / "convergence.md"),
               "--allow-dirty", *extra]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)


def test_a_ladder_climbs_resumes_and_each_rung_is_the_run_to_that_budget(tmp_path):
    _tiny_shakespeare(tmp_path / "data")
    work, results = tmp_path / "work", tmp_path / "results"
    first = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert first.returncode == 0, first.stderr[-3000:]
    records = [json.loads((results / "shakespeare8" / f"softmax_seed1_u{b}.json").read_text()) for b in (2, 4)]
    for budget, record in zip((2, 4), records):
        assert record["updates"] == budget and record["test_bits_per_character"] > 0
        assert f"MAX_UPDATE={budget}" in record["train_command"] and "--decoder-layers 8" in record["train_command"]
        assert record["git"] and record["threads"]
    assert records[1]["valid_loss"] < records[0]["valid_loss"]
    report = (tmp_path / "convergence.md").read_text()
    assert "| 1 | 2 |" in report and "not converged by 4 updates" in report

    # a second run trains nothing again
    again = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "training" not in again.stderr

    # the rung at 4 (2 updates, stopped, resumed to 4) is the model of a run straight to 4 updates
    straight = _run(tmp_path, tmp_path / "work_straight", tmp_path / "results_straight", "--first", "4", "--max-budget", "4")
    assert straight.returncode == 0, straight.stderr[-3000:]
    direct = json.loads((tmp_path / "results_straight" / "shakespeare8" / "softmax_seed1_u4.json").read_text())
    assert direct["valid_loss"] == records[1]["valid_loss"]
    assert direct["test_bits_per_character"] == records[1]["test_bits_per_character"]

    # a checkpoint already past a rung that has no result is refused (fairseq would train on from it)
    (results / "shakespeare8" / "softmax_seed1_u2.json").unlink()
    (work / "checkpoints" / "shakespeare8" / "softmax_seed1" / "checkpoint_u2.pt").unlink(missing_ok=True)
    refused = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert refused.returncode != 0 and "past the rung 2" in refused.stderr


def test_bad_budgets_are_one_line_errors(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "--first", "0", "--report-only", "--output", str(tmp_path / "c.md")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--first must be a positive number of updates, got 0" in result.stderr


def _records(values, first=1000):
    return [{"updates": first * 2 ** i, "test_sacrebleu": v, "valid_loss": v} for i, v in enumerate(values)]


def test_the_budget_is_the_first_rung_within_the_tolerance_and_a_plateau_needs_confirming():
    bleu, loss = convergence.LADDERS["multi30k"], convergence.LADDERS["shakespeare8"]
    assert convergence.budget_of(bleu, _records([20.0, 30.0, 30.3, 30.4])) == 2000
    assert convergence.budget_of(bleu, _records([20.0, 30.0, 31.0])) is None
    # a character LM's plateau (3.55 -> 3.52 bits) followed by the drop once it uses its context
    plateau = _records([3.55, 3.52, 2.40, 2.00, 1.99, 1.985])
    assert not convergence.LADDERS["multi30k"].confirm and loss.confirm
    assert convergence.budget_of(loss, plateau[:2]) is None  # not before 4B confirms it
    assert convergence.budget_of(loss, plateau) == 8000
