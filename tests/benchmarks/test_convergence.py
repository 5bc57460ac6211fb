"""benchmarks/convergence.py: the ladder's arithmetic on known numbers, and a short real ladder on generated
data whose rungs are each their own run, decaying to its budget, trained side by side or in one process alike."""
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
    # twice the budget worse by more than the tolerance (a model that overfits): converged, as any larger rung
    # would be worse still; for a score (higher is better) and a loss (lower)
    assert convergence.converged(bleu, 30.0, 29.0) and convergence.converged(loss, 1.5, 1.6)
    assert convergence.budget_of(loss, _records([3.2, 2.64, 2.33, 2.18, 2.09, 2.15])) == 16000


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
    # (the work folder relative to where it runs, not to the checkout the recipes run from)
    command = [sys.executable, SCRIPT, "--suite", "shakespeare8", "--data-root", str(tmp_path / "data"),
               "--work-dir", os.path.relpath(work, tmp_path), "--results", str(results), "--output",
               str(tmp_path / "convergence.md"), "--allow-dirty", *extra]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)


def test_a_ladder_climbs_resumes_and_each_rung_is_its_own_run_to_that_budget(tmp_path):
    _tiny_shakespeare(tmp_path / "data")
    work, results = tmp_path / "work", tmp_path / "results"
    first = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert first.returncode == 0, first.stderr[-3000:]
    records = [json.loads((results / "shakespeare8" / f"softmax_seed1_u{b}.json").read_text()) for b in (2, 4)]
    for budget, record in zip((2, 4), records):
        assert record["updates"] == budget and record["test_bits_per_character"] > 0
        command = record["train_command"]
        assert f"MAX_UPDATE={budget}" in command and "--decoder-layers 8" in command
        assert "LR_SCHEDULER=cosine" in command and "LR=5e-3" in command
        # committed: the machine's folders as placeholders
        assert f"SAVE_DIR=<work-dir>/checkpoints/shakespeare8/softmax_seed1_u{budget} " in command
        assert str(tmp_path) not in json.dumps(record) and record["fingerprint"] and record["data"]
        assert record["git"] and record["threads"] and record["train_seconds_total"] > 0
        # the rung's run is over: only its kept checkpoint stays
        assert sorted(p.name for p in (work / "checkpoints" / "shakespeare8" / f"softmax_seed1_u{budget}").glob("*.pt")) \
            == [f"checkpoint_u{budget}.pt"]
    assert records[1]["valid_loss"] < records[0]["valid_loss"]
    report = (tmp_path / "convergence.md").read_text()
    assert "| 1 | 2 |" in report and "not converged by 4 updates" in report

    # a second run trains nothing again
    again = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "training" not in again.stderr

    # --rung 4 --rung 8 --jobs 2 (side by side, as on a lent GPU) trains only those rungs; rung 4 is the same model
    alone = _run(tmp_path, tmp_path / "work_alone", tmp_path / "results_alone", "--first", "2", "--max-budget", "8",
                 "--rung", "4", "--rung", "8", "--jobs", "2")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "results_alone" / "shakespeare8").iterdir()) == [
        "softmax_seed1_u4.json", "softmax_seed1_u8.json"]
    direct = json.loads((tmp_path / "results_alone" / "shakespeare8" / "softmax_seed1_u4.json").read_text())
    assert direct["valid_loss"] == records[1]["valid_loss"]
    assert direct["test_bits_per_character"] == records[1]["test_bits_per_character"]

    # a rung's checkpoint already past its budget (another rung's, copied there) is refused, not trained on
    (results / "shakespeare8" / "softmax_seed1_u2.json").unlink()
    rung2 = work / "checkpoints" / "shakespeare8" / "softmax_seed1_u2"
    (rung2 / "checkpoint_u2.pt").unlink()
    (rung2 / "checkpoint_last.pt").write_bytes((work / "checkpoints" / "shakespeare8" / "softmax_seed1_u4" / "checkpoint_u4.pt").read_bytes())
    refused = _run(tmp_path, work, results, "--first", "2", "--max-budget", "4")
    assert refused.returncode != 0 and "past the rung 2" in refused.stderr


@pytest.mark.parametrize("argv, message", [
    (["--first", "0", "--report-only"], "--first must be a positive number of updates, got 0"),
    (["--suite", "multi30k", "--rung", "3000", "--report-only"],
     "--rung 3000 is not a rung of the multi30k ladder: expected one of 1000, 2000"),
    (["--suite", "multi30k", "--jobs", "3", "--report-only"], "--jobs 3 trains the rungs named by --rung side by side"),
    (["--suite", "multi30k", "--first", "4000", "--max-budget", "1000"],
     "--first 4000 is above --max-budget 1000: the multi30k ladder would have no rung"),
    # --report-only renders every ladder as recorded: an option of climbing one would be ignored
    (["--suite", "multi30k", "--rung", "2000", "--report-only"],
     "--suite: an option of climbing a ladder, which --report-only does not"),
    # the retired ladders are reported, never climbed
    (["--suite", "multi30k_inverse_sqrt", "--report-only"], "invalid choice: 'multi30k_inverse_sqrt'"),
], ids=["first-zero", "not-a-rung", "jobs-without-rungs", "no-rung", "climbing-report-only", "retired"])
def test_bad_budgets_are_one_line_errors(argv, message, tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, *argv, "--output", str(tmp_path / "c.md")], capture_output=True, text=True)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "c.md").exists()


def test_the_report_shows_the_current_ladders_first_and_the_retired_ones_from_their_records(tmp_path):
    results = tmp_path / "results"
    for ladder, updates, value in (("multi30k_inverse_sqrt", 1000, 30.0), ("multi30k_inverse_sqrt", 2000, 31.5),
                                   ("multi30k", 1000, 33.0), ("multi30k", 2000, 34.5)):
        record = {"ladder": ladder, "row": "softmax", "seed": 1, "updates": updates, "test_sacrebleu": value,
                  "valid_loss": 4.0, "train_seconds_total": 3600.0, "git": "abc1234", "cores": 2, "threads": 1,
                  "finished": "2026-11-28T08:00:00", "train_command": "MAX_UPDATE=1000 recipes/multi30k/train.sh x",
                  "evaluate_command": "recipes/multi30k/generate.sh x"}
        if updates == 2000:  # climbed with other settings (a suite changed since): shown for a retired ladder only
            record["fingerprint"] = "0" * 16
        (results / ladder).mkdir(parents=True, exist_ok=True)
        (results / ladder / f"softmax_seed1_u{updates}.json").write_text(json.dumps(record))
    report = convergence.render(str(results), sorted(convergence.LADDERS))
    assert "34.500" not in report and "1 rung record(s) climbed with other settings are not shown" in report
    current, retired = report.index("33.000"), report.index("31.500")
    assert current < retired and "(retired)" in report[retired - 2000:retired]
    assert "| 1 | 1000 | 4.000 | 30.000 | +1.500 |" in report  # the retired rung's change to its next


def _records(values, first=1000):
    return [{"updates": first * 2 ** i, "test_sacrebleu": v, "valid_loss": v} for i, v in enumerate(values)]


def test_the_budget_is_the_first_rung_within_the_tolerance_and_a_plateau_needs_confirming():
    bleu, loss = convergence.LADDERS["multi30k"], convergence.LADDERS["shakespeare8"]
    assert convergence.budget_of(bleu, _records([20.0, 30.0, 30.3, 30.4])) == 2000
    assert convergence.budget_of(bleu, _records([20.0, 30.0, 31.0])) is None
    # the LM ladder as the issue defines it: 1 % of itself at 2B (no confirming: its first rung is past the
    # early plateau), and a B of 32,000 can be decided (the 64,000 rung is on the ladder)
    assert not loss.confirm and convergence.budget_of(loss, _records([3.2, 2.64, 2.33, 2.18, 2.09, 2.08])) == 16000
    assert convergence.budget_of(loss, _records([3.2, 2.64, 2.33, 2.18, 2.09, 2.05, 2.04])) == 32000
    # the retired ladder confirmed at 4B: a character LM's plateau (3.55 -> 3.52 bits) followed by the drop
    # once it uses its context
    retired = convergence.LADDERS["shakespeare8_inverse_sqrt"]
    plateau = _records([3.55, 3.52, 2.40, 2.00, 1.99, 1.985], first=retired.first)
    assert not convergence.LADDERS["multi30k"].confirm and retired.confirm
    assert convergence.budget_of(retired, plateau[:2]) is None  # not before 4B confirms it
    assert convergence.budget_of(retired, plateau) == 8 * retired.first


def test_a_rung_also_scores_the_average_of_its_last_checkpoints(tmp_path, monkeypatch):
    """With average_last (Multi30k's ladder: 10), a rung saves every budget / (4 N) updates and scores the
    average of the last N beside its last checkpoint; only the two checkpoints stay."""
    import torch

    assert convergence.LADDERS["multi30k"].average_last == 10
    assert convergence.save_interval(convergence.LADDERS["multi30k"], 8000) == 200
    _tiny_shakespeare(tmp_path / "data")
    ladder = convergence.dataclasses.replace(convergence.LADDERS["shakespeare8"], average_last=2)
    monkeypatch.setitem(convergence.LADDERS, "shakespeare8", ladder)
    work, results = tmp_path / "work", tmp_path / "results"
    assert convergence.main(["--suite", "shakespeare8", "--first", "8", "--max-budget", "8", "--data-root",
                             str(tmp_path / "data"), "--work-dir", str(work), "--results", str(results),
                             "--output", str(tmp_path / "convergence.md"), "--allow-dirty"]) == 0
    record = json.loads((results / "shakespeare8" / "softmax_seed1_u8.json").read_text())
    assert "SAVE_INTERVAL_UPDATES=1 KEEP_INTERVAL_UPDATES=2" in record["train_command"]
    assert record["avg2_test_bits_per_character"] > 0 and "checkpoint_u8_avg2.pt" in record["avg2_evaluate_command"]
    rung = work / "checkpoints" / "shakespeare8" / "softmax_seed1_u8"
    assert sorted(p.name for p in rung.glob("*.pt")) == ["checkpoint_u8.pt", "checkpoint_u8_avg2.pt"]
    last, averaged = (torch.load(rung / name, map_location="cpu", weights_only=False)["model"]
                      for name in ("checkpoint_u8.pt", "checkpoint_u8_avg2.pt"))
    assert last.keys() == averaged.keys() and any(not torch.equal(last[k], averaged[k]) for k in last)
    assert "avg2_test_bits_per_character" in (tmp_path / "convergence.md").read_text()


def test_rows_at_the_budget_average_their_checkpoints_only_where_the_ladder_saw_it_help_on_validation(tmp_path, monkeypatch):
    from benchmarks import quality

    results = tmp_path / "results"
    (results / "multi30k").mkdir(parents=True)
    averaged_valid = {1000: 30.0, 2000: 33.0, 4000: 36.5}  # the last checkpoint's valid BLEU: 31, 34, 36
    for updates, test, valid in ((1000, 30.0, 31.0), (2000, 33.0, 34.0), (4000, 33.3, 36.0)):
        record = {"row": "softmax", "seed": 1, "updates": updates, "test_sacrebleu": test,
                  "valid_tokenized_bleu": valid, "avg10_valid_tokenized_bleu": averaged_valid[updates]}
        (results / "multi30k" / f"softmax_seed1_u{updates}.json").write_text(json.dumps(record))
    assert convergence.measured_budget(str(results), "multi30k") == 2000
    assert convergence.averaging_env(str(results), "multi30k", 1000) == {}  # 30.0 < 31.0: the last one
    assert convergence.averaging_env(str(results), "multi30k", 2000) == {}  # 33.0 < 34.0
    assert convergence.averaging_env(str(results), "multi30k", 4000) == {
        "SAVE_INTERVAL_UPDATES": "100", "KEEP_INTERVAL_UPDATES": "10", "AVERAGE_LAST": "10"}
    assert convergence.averaging_env(str(results), "multi30k", 8000) == {}  # no rung there
    assert convergence.averaging_env(str(results), "shakespeare8", 1000) == {}  # a ladder without averaging
    # the rows of the suite at B train and score as that rung did
    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(results))
    (results / "multi30k" / "softmax_seed1_u2000.json").write_text(json.dumps(
        {"row": "softmax", "seed": 1, "updates": 2000, "test_sacrebleu": 33.0, "valid_tokenized_bleu": 34.0,
         "avg10_valid_tokenized_bleu": 34.2}))
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    env = quality.suite_env(ctx, quality.SUITES["multi30k_converged"])
    assert env["MAX_UPDATE"] == "2000" and env["AVERAGE_LAST"] == "10" and env["SAVE_INTERVAL_UPDATES"] == "50"
    assert env["LR_SCHEDULER"] == "cosine"
    # and the report says so
    sentence = quality.budget_sentence(ctx, quality.SUITES["multi30k_converged"], {"settings": {"env": env}, "cores": 2})
    assert sentence.startswith("Budget: 2000 updates of up to 4096 tokens (the convergence budget measured by")
    assert "Scored with the average of the last 10 checkpoints (saved every 50 updates)" in sentence
    plain = quality.budget_sentence(ctx, quality.SUITES["shakespeare8"], {"settings": {"env": {"MAX_UPDATE": "8", "MAX_TOKENS": "4096"}}, "cores": 2})
    assert plain == ("Budget: 8 updates of up to 4096 tokens (the convergence budget measured by `benchmarks/convergence.py "
                     "--suite shakespeare8`), on 2 CPU cores.")


def test_the_budget_waits_for_every_rung_below_it_and_the_change_is_to_the_next_rung(tmp_path):
    """Rungs climbed side by side finish in any order: a budget is never measured while a lower rung could
    still be it, and the report compares each rung with the one at twice its budget."""
    bleu = convergence.LADDERS["multi30k"]
    gap = [r for r in _records([20.0, 30.0, 34.0, 34.2, 34.3]) if r["updates"] != 2000]  # 2000 still climbing
    assert convergence.budget_of(bleu, gap) is None
    assert convergence.budget_of(bleu, _records([20.0, 30.0, 34.0, 34.2, 34.3])) == 4000
    results = tmp_path / "results"
    (results / "multi30k").mkdir(parents=True)
    for record in gap:
        record = {**record, "row": "softmax", "seed": 1, "git": "abc1234", "cores": 2, "threads": 1,
                  "finished": "2026-11-28T08:00:00", "train_command": "x", "evaluate_command": "y"}
        (results / "multi30k" / f"softmax_seed1_u{record['updates']}.json").write_text(json.dumps(record))
    assert convergence.measured_budget(str(results), "multi30k") is None
    report = convergence.render(str(results), ["multi30k"])
    assert "| 1 | 1000 |" in report and "| 20.000 | (no next rung yet) |" in report  # not +14.0 to 4000
    assert "| 4000 |" in report and "| 34.000 | +0.200 (converged) |" in report
    assert "seed 1: not decided before rungs 2000 are climbed" in report


def test_a_rung_of_other_settings_is_an_error_never_reused_and_never_a_budget(tmp_path, monkeypatch):
    ladder = convergence.LADDERS["shakespeare8"]
    ctx = convergence.quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    results = tmp_path / "results"
    (results / "shakespeare8").mkdir(parents=True)
    old = convergence.rung_settings(ladder, 1, 1000)
    old = {**old, "env": {**old["env"], "LR": "2e-3"}}
    path = results / "shakespeare8" / "softmax_seed1_u1000.json"
    path.write_text(json.dumps({"row": "softmax", "seed": 1, "updates": 1000, "valid_loss": 1.5, "settings": old,
                                "fingerprint": convergence.quality.fingerprint(old)}))
    assert not convergence.is_current(ladder, json.loads(path.read_text()))
    assert convergence.seed_records(str(results), "shakespeare8", 1) == []
    train_rung = convergence.train_rung
    monkeypatch.setattr(convergence, "train_rung", lambda *args: pytest.fail("climbed a recorded rung again"))
    with pytest.raises(SystemExit, match=r"softmax_seed1_u1000.json: this rung was climbed with other settings "
                                         r"\(env.LR: 2e-3 -> 5e-3\): the shakespeare8 ladder changed since") as error:
        convergence.climb_rung(ctx, "shakespeare8", str(results), 1, 1000)
    assert "\n" not in str(error.value)
    assert "1 rung record(s) climbed with other settings are not shown" in convergence.render(str(results), ["shakespeare8"])
    # a record of before fingerprints is taken as it is; a record that is not JSON is a one-line error
    path.write_text(json.dumps({"row": "softmax", "seed": 1, "updates": 1000, "valid_loss": 1.5}))
    assert convergence.climb_rung(ctx, "shakespeare8", str(results), 1, 1000)["valid_loss"] == 1.5
    path.write_text('{"row": "softmax",')
    with pytest.raises(SystemExit, match="softmax_seed1_u1000.json: not valid JSON"):
        convergence.measured_budget(str(results), "shakespeare8")
    # a rung's run folder started with other settings is not resumed
    save_dir = tmp_path / "work" / "checkpoints" / "shakespeare8" / "softmax_seed1_u2000"
    save_dir.mkdir(parents=True)
    (save_dir / "rung.json").write_text(json.dumps({**convergence.rung_settings(ladder, 1, 2000), "arch": "other"}))
    monkeypatch.setattr(convergence.quality.Context, "run", lambda *args, **kwargs: pytest.fail("trained"))
    with pytest.raises(SystemExit, match=r"rung.json: this rung's run started with other settings \(arch: other -> "
                                         r"softmax_1head_lm\): remove .*softmax_seed1_u2000 to train the rung again"):
        train_rung(ctx, ladder, str(save_dir), 2000, 1)
    # nor one a CPU started, on a GPU (a rung's training time must not mix devices); the CPU's rung.json is
    # its settings alone (the folders of before the device counted resume as they were)
    (save_dir / "rung.json").write_text(json.dumps(convergence.rung_settings(ladder, 1, 2000)))
    cuda = convergence.quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False, device="cuda")
    with pytest.raises(SystemExit, match=r"rung.json: this rung's run started with other settings \(device: None -> cuda\)"):
        train_rung(cuda, ladder, str(save_dir), 2000, 1)
    # a GPU's rung trained to the end (its kept checkpoint) is scored on the CPU without training
    (save_dir / "rung.json").write_text(json.dumps({**convergence.rung_settings(ladder, 1, 2000), "device": "cuda"}))
    (save_dir / "checkpoint_u2000.pt").write_bytes(b"kept")
    (save_dir / "train.log").write_text("2026-11-28 12:00:00 | INFO | valid | epoch 009 | valid on 'valid' subset | "
                                        "loss 2.5 | nll_loss 2.5 | ppl 5.66 | num_updates 2000\n")
    monkeypatch.setattr(convergence.quality, "total_train_seconds", lambda kept, text: 60.0)
    trained = train_rung(ctx, ladder, str(save_dir), 2000, 1)
    assert float(trained["valid_loss"]) == 2.5 and trained["train_seconds_total"] == 60.0


def test_a_process_that_reaches_a_rung_under_way_waits_for_it_and_reads_its_result(tmp_path, monkeypatch):
    """`--rung 8000` beside a climb of the whole ladder: the climb that reaches 8000 while the other process
    trains it waits (the rung's lock), then takes its record instead of training in the same folder."""
    import threading

    ctx = convergence.quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    results = tmp_path / "results"
    path = convergence.result_path(str(results), "shakespeare8", "softmax", 1, 1000)
    save_dir = convergence.save_dir_of(ctx, "shakespeare8", 1, 1000)
    waiting, climbed = threading.Event(), []
    monkeypatch.setattr(convergence, "log", lambda message: waiting.set() if "waiting for it" in message else None)
    monkeypatch.setattr(convergence, "train_rung", lambda *args: pytest.fail("trained a rung under way"))
    with convergence.exclusive_lock(os.path.join(save_dir, "rung.lock")):  # (the other process, training it)
        second = threading.Thread(target=lambda: climbed.append(
            convergence.climb_rung(ctx, "shakespeare8", str(results), 1, 1000)))
        second.start()
        assert waiting.wait(60), "the second climb did not wait"
        os.makedirs(os.path.dirname(path))
        with open(path, "w", encoding="utf-8") as f:  # (the other process finishes the rung)
            json.dump({"row": "softmax", "seed": 1, "updates": 1000, "valid_loss": 1.25}, f)
    second.join(60)
    assert not second.is_alive() and climbed == [{"row": "softmax", "seed": 1, "updates": 1000, "valid_loss": 1.25}]

    # a climb waiting for it gives up when its run stops (a thread of run_parallel, which no signal reaches)
    os.remove(path)
    gave_up = []

    def climb():
        with pytest.raises(SystemExit, match="waiting for another process's climb: the run is stopping"):
            convergence.climb_rung(ctx, "shakespeare8", str(results), 1, 1000)
        gave_up.append(True)

    with convergence.exclusive_lock(os.path.join(save_dir, "rung.lock")):
        waiting.clear()
        third = threading.Thread(target=climb, daemon=True)
        third.start()
        assert waiting.wait(60), "the third climb did not wait"
        ctx.stop()
        third.join(30)
        assert not third.is_alive() and gave_up == [True], "the climb went on waiting after the run stopped"

