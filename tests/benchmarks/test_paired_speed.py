"""benchmarks/paired_speed.py: the interval of the median and the verdicts on known values, the change relative
to the reference on synthetic paired times, and the interleaved run of two checkouts end to end (tiny cells)."""
import json
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
    # the machine's speed differs between rounds and between the before and after slot of a round (both kinds
    # alike): only pairing each kind with the reference of its own round gives exactly +10 %
    before_speed = [1.0, 0.5, 1.0, 0.5, 1.0, 0.5]
    after_speed = [1.2, 0.45, 0.9, 0.6, 1.0, 0.5]  # after / before per round: 1.2, 0.9, 0.9, 1.2, 1.0, 1.0
    slots = list(zip(before_speed, after_speed))
    pairs = {("forward+backward", 4096, "softmax"): [(2.0 * b, 2.0 * a) for b, a in slots],
             ("forward+backward", 4096, "other"): [(1.0 * b, 1.1 * a) for b, a in slots],
             # decoding: both got 10 % slower, so relative to softmax nothing changed, but softmax itself did
             ("decoding per token", 128, "softmax"): [(1e-3, 1.1e-3)] * 6,
             ("decoding per token", 128, "other"): [(5e-4, 5.5e-4)] * 6}
    rows = {(r["section"], r["kind"]): r for r in paired_speed.summarise(pairs, "softmax", 0.05, 0.95)}
    assert sorted(rows) == [("decoding per token", "other"), ("decoding per token", "softmax"),
                            ("forward+backward", "other"), ("forward+backward", "softmax")]
    slower = rows["forward+backward", "other"]
    assert slower["change"] == pytest.approx(0.1) and slower["low"] == pytest.approx(0.1)
    assert slower["verdict"] == paired_speed.SLOWER and slower["rounds"] == 6
    # the reference's own change: -10 % .. +20 % over the rounds, median 0: unresolved at 5 %
    reference = rows["forward+backward", "softmax"]
    assert reference["change"] == pytest.approx(0.0) and (reference["low"], reference["high"]) == pytest.approx((-0.1, 0.2))
    assert reference["verdict"] == paired_speed.UNRESOLVED
    same = rows["decoding per token", "other"]
    assert same["change"] == pytest.approx(0.0) and same["own_change"] == pytest.approx(0.1)
    assert same["verdict"] == paired_speed.WITHIN
    assert rows["decoding per token", "softmax"]["verdict"] == paired_speed.SLOWER
    text = paired_speed.render([slower], ["# title"], "softmax", 0.05)
    # before/after: medians over the rounds (1.0 * 0.5 .. 1.0; 1.1 * 0.45 .. 1.2)
    assert "| forward+backward | 4096 | other | 750.0 ms | 825.0 ms | +10.0% | +10.0% .. +10.0% (96.9%) | +10.0% | " \
           "**slower by more than 5%** |" in text
    assert "0 within, 0 unresolved, 1 slower, of 1 cells" in text


def fake_checkout(folder, seconds, reference="softmax"):
    """A checkout whose attention_speed.py times every forward+backward at ``seconds[kind]`` (no torch work),
    measures the kinds of ``seconds`` by default, and has ``reference`` as its ratio reference."""
    (folder / "fairseq_plugins").mkdir(parents=True)
    (folder / "fairseq_plugins" / "__init__.py").write_text("")
    (folder / "benchmarks").mkdir()
    (folder / "benchmarks" / "attention_speed.py").write_text(f"""
print("a library that prints to stdout")
EMBED_DIM = 4
SECONDS = {seconds!r}
DECODE_KINDS = tuple(SECONDS)


def ratio_reference(kinds):
    return {reference!r}


class Cell:
    def __init__(self, kind, length):
        self.kind = kind

    def step(self):
        pass

    def timed_step(self):  # every other run twice as slow: --repeats 2 keeps the fast one
        self.runs = getattr(self, "runs", 0) + 1
        return SECONDS[self.kind] * (1 + self.runs % 2)
""")
    return str(folder)


def test_the_sides_measure_their_own_checkouts_in_their_places(tmp_path):
    """Deterministic: two fake checkouts with fixed times; "other" is 20 % slower in the after checkout."""
    fake_checkout(tmp_path / "before", {"softmax": 1.0, "gone": 2.0, "other": 0.5})
    fake_checkout(tmp_path / "after", {"softmax": 1.0, "other": 0.6, "new": 3.0})
    output = tmp_path / "change.md"
    # paths as typed relative to the working directory (tmp_path), as the docstring shows; the kinds and the
    # reference are the checkouts' own (no --kinds, no --reference)
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "paired_speed.py"), "--before", "before", "--after", "after",
               "--lengths", "32", "--prefixes", "", "--rounds", "6", "--restart-every", "2",
               "--repeats", "2", "--threads", "1", "--output", "change.md", "--json", "times.json"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == paired_speed.EXIT_STATUS[paired_speed.SLOWER], result.stderr
    text = output.read_text()
    # each side's package, named relative to the after-checkout (no folder of the measuring machine)
    assert "- before: `../before` at git " in text and "(fairseq_plugins from `../before/fairseq_plugins`)" in text
    assert "- after: `.` at git " in text and "(fairseq_plugins from `fairseq_plugins`)" in text
    assert str(tmp_path) not in text
    assert "--lengths 32 --prefixes '' --rounds 6" in text  # the command as a shell reads it: the empty value kept
    assert "- kinds: every kind both checkouts measure (softmax, other), relative to softmax; measured by one " \
           "checkout only, not compared: gone (before only); new (after only)" in text
    assert json.loads((tmp_path / "times.json").read_text())["checkouts"] == {"before": "../before", "after": "."}
    assert "| forward+backward | 32 | other | 500.0 ms | 600.0 ms | +20.0% | +20.0% .. +20.0% (96.9%) | +20.0% | " \
           "**slower by more than 5%** |" in text
    assert "| forward+backward | 32 | softmax | 1.00 s | 1.00 s | +0.0% |" in text
    assert "the workers started afresh every 2 rounds; each side's fastest of 2 turns per cell and round" in text
    cells = json.loads((tmp_path / "times.json").read_text())["cells"]
    assert [(c["kind"], c["before_after_seconds"]) for c in cells] == [("softmax", [[1.0, 1.0]] * 6), ("other", [[0.5, 0.6]] * 6)]
    # three starts of each worker (the first also told the kinds), whose prints went to stderr, not the replies
    assert result.stderr.count("a library that prints to stdout") == 6 and "round 6/6" in result.stderr


def test_two_checkouts_run_interleaved_end_to_end(tmp_path):
    output = tmp_path / "change.md"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "paired_speed.py"), "--before", ROOT,
               "--kinds", "softmax,extractor_me", "--lengths", "32", "--prefixes", "8", "--rounds", "2",
               "--restart-every", "0", "--confidence", "0.5", "--decode-steps", "2", "--decode-warmup", "1", "--threads", "1",
               "--output", str(output)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    # the verdict is a timing (this machine's noise): any of the three; errors would exit with 1 or 2
    assert result.returncode in paired_speed.EXIT_STATUS.values(), result.stderr
    text = output.read_text()
    assert text.count("(fairseq_plugins from `fairseq_plugins`)") == 2  # --before is --after: this checkout
    assert "round 2/2" in result.stderr
    rows = [line for line in text.splitlines() if line.startswith("| forward+backward") or line.startswith("| decoding")]
    assert [row.split(" | ")[:3] for row in rows] == [["| forward+backward", "32", "softmax"],
                                                      ["| forward+backward", "32", "extractor_me"],
                                                      ["| decoding per token", "8", "softmax"],
                                                      ["| decoding per token", "8", "extractor_me"]]
    assert all("(50.0%)" in row for row in rows)


def test_bad_checkouts_and_too_few_rounds_are_refused(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", str(tmp_path)])
    assert f"--before {tmp_path}: no benchmarks/attention_speed.py" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", ROOT, "--rounds", "7"])
    assert "--rounds 7: expected an even number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", ROOT, "--lengths", "4096,big"])
    assert "--lengths '4096,big': expected positive integers, comma-separated" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", ROOT, "--lengths", "", "--prefixes", ""])
    assert "nothing to measure" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(["--before", ROOT, "--rounds", "4"])
    assert "--rounds 4: an interval of the median over so few rounds covers less than --confidence 0.95; " \
           "that needs at least 6 rounds" in capsys.readouterr().err
    # a checkout whose worker would measure another checkout's package (here: the one already imported)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "attention_speed.py").write_text("EMBED_DIM = 8\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    import fairseq_plugins  # noqa: F401

    with pytest.raises(SystemExit, match=f"the worker for {tmp_path} imported fairseq_plugins from .*, not from that checkout"):
        paired_speed.load_speed_module(str(tmp_path))
    assert paired_speed.rounds_needed(0.99) == 8  # 1 - 2/128 < 99 % <= 1 - 2/256


def test_kinds_and_reference_the_checkouts_cannot_give_are_refused(tmp_path, capfd):
    # capfd, not capsys: the workers write to the real stderr (a file descriptor)
    before = fake_checkout(tmp_path / "before", {"softmax": 1.0, "other": 0.5})
    after = fake_checkout(tmp_path / "after", {"softmax": 1.0, "other": 0.6, "new": 3.0}, reference=None)
    common = ["--before", before, "--after", after, "--lengths", "32", "--prefixes", "", "--rounds", "6", "--threads", "1"]
    with pytest.raises(SystemExit):
        paired_speed.main(common + ["--kinds", "softmax,new"])
    assert "--kinds: the before checkout does not measure new (its attention_speed.py's DECODE_KINDS: softmax, other)" \
        in capfd.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(common)
    assert "--reference: the after checkout's attention_speed.py names no ratio reference" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(common + ["--reference", "new"])
    assert "--reference new must be one of --kinds (softmax, other)" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        paired_speed.main(common + ["--kinds", " , "])
    assert "--kinds is empty" in capfd.readouterr().err
