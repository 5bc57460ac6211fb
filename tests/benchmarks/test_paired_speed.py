"""benchmarks/paired_speed.py: the interval of the median and the verdicts on known values, the change relative
to the reference on synthetic paired times, and the interleaved run of two checkouts end to end (tiny cells)."""
import math
import os
import subprocess
import sys

import pytest

from benchmarks import paired_speed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_interval_of_the_median_is_the_binomial_order_statistic_one():
    # n = 10: P(B < 2) = 11/1024 <= 2.5 % < P(B < 3) = 56/1024, so [x_(2), x_(9)] with coverage 1 - 22/1024
    low, high, coverage = paired_speed.median_interval([10, 1, 9, 2, 8, 3, 7, 4, 6, 5], 0.95)
    assert (low, high) == (2, 9) and coverage == pytest.approx(1 - 22 / 1024)
    # n = 6: only the whole range reaches 95 % (1 - 2/64); n = 5 cannot, and the command line refuses it
    assert paired_speed.median_interval(range(6), 0.95) == (0, 5, pytest.approx(1 - 2 / 64))
    assert paired_speed.rounds_needed(0.95) == 6 and paired_speed.rounds_needed(0.5) == 2
    # a lower confidence narrows it: n = 10 at 50 % -> k = 4 (1 - 2 * 176/1024 = 65.6 %; k = 5 would be 24.6 %)
    low, high, coverage = paired_speed.median_interval(range(1, 11), 0.5)
    assert (low, high) == (4, 7) and coverage == pytest.approx(1 - 2 * (1 + 10 + 45 + 120) / 1024)


def test_verdicts_compare_the_whole_interval_with_the_tolerance():
    assert paired_speed.verdict(0.06, 0.2, 0.05) == paired_speed.SLOWER
    assert paired_speed.verdict(0.01, 0.06, 0.05) == paired_speed.UNRESOLVED
    assert paired_speed.verdict(-0.3, 0.05, 0.05) == paired_speed.WITHIN


def test_the_change_is_relative_to_the_reference_of_the_same_round():
    # the machine is twice as fast in round 2 for both sides; the kind is 10 % slower after, softmax unchanged
    rounds = 6
    speed = [1.0 if i % 2 == 0 else 0.5 for i in range(rounds)]
    pairs = {("forward+backward", 4096, "softmax"): [(2.0 * s, 2.0 * s) for s in speed],
             ("forward+backward", 4096, "other"): [(1.0 * s, 1.1 * s) for s in speed],
             # decoding: both got 10 % slower, so relative to softmax nothing changed
             ("decoding per token", 128, "softmax"): [(1e-3 * s, 1.1e-3 * s) for s in speed],
             ("decoding per token", 128, "other"): [(5e-4 * s, 5.5e-4 * s) for s in speed]}
    rows = paired_speed.summarise(pairs, "softmax", 0.05, 0.95)  # before: medians over the rounds (0.75 s)
    assert [(r["section"], r["size"], r["kind"]) for r in rows] == [("forward+backward", 4096, "other"),
                                                                   ("decoding per token", 128, "other")]
    slower, same = rows
    assert slower["change"] == pytest.approx(0.1) and slower["low"] == pytest.approx(0.1)
    assert slower["verdict"] == paired_speed.SLOWER and slower["rounds"] == rounds
    assert same["change"] == pytest.approx(0.0) and same["own_change"] == pytest.approx(0.1)
    assert same["verdict"] == paired_speed.WITHIN
    text = paired_speed.render(rows, ["# title"], "softmax", 0.05)
    assert "| forward+backward | 4096 | other | 750.0 ms | 825.0 ms | +10.0% | +10.0% .. +10.0% (96.9%) | +10.0% | " \
           "**slower by more than 5%** |" in text
    assert "1 within, 0 unresolved, 1 slower, of 2 cells" in text


def test_two_checkouts_run_interleaved_end_to_end(tmp_path):
    output = tmp_path / "change.md"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "paired_speed.py"), "--before", ROOT,
               "--kinds", "softmax,extractor_me", "--lengths", "32", "--prefixes", "8", "--rounds", "2",
               "--confidence", "0.5", "--decode-steps", "2", "--decode-warmup", "1", "--threads", "1",
               "--output", str(output)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    # the verdict is a timing (this machine's noise): any of the three, never a crash
    assert result.returncode in (0, 1, 2), result.stderr
    text = output.read_text()
    package = os.path.join(os.path.realpath(ROOT), "fairseq_plugins")
    assert text.count(f"(fairseq_plugins from `{package}`)") == 2
    assert "round 2/2" in result.stderr
    rows = [line for line in text.splitlines() if line.startswith("| forward+backward") or line.startswith("| decoding")]
    assert [row.split(" | ")[:3] for row in rows] == [["| forward+backward", "32", "extractor_me"],
                                                      ["| decoding per token", "8", "extractor_me"]]
    assert "(50.0%)" in rows[0]


def test_bad_checkouts_and_too_few_rounds_are_refused(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", str(tmp_path)])
    assert f"--before {tmp_path}: no benchmarks/attention_speed.py" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", ROOT, "--rounds", "5"])
    assert "--rounds 5: an interval of the median over so few rounds covers less than --confidence 0.95; " \
           "that needs at least 6 rounds" in capsys.readouterr().err
    # a checkout whose worker would measure another checkout's package (here: the one already imported)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "attention_speed.py").write_text("EMBED_DIM = 8\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    import fairseq_plugins  # noqa: F401

    with pytest.raises(SystemExit, match=f"the worker for {tmp_path} imported fairseq_plugins from .*, not from that checkout"):
        paired_speed.load_speed_module(str(tmp_path))
    assert math.isfinite(paired_speed.rounds_needed(0.99))
