"""benchmarks/compare_speed_reports.py: the change of each kind's time relative to the reference kind between
reports taken before and after a change, on known tables."""
import pytest

from benchmarks import compare_speed_reports as compare


def report(softmax_ms, other_ms, decode_us=(600, 300)):
    return f"""# Attention speed

## Forward + backward time (median)

| T | softmax | other | softmax / other |
| ---: | ---: | ---: | ---: |
| 4096 | {softmax_ms} ms | {other_ms} ms | 1.0x |
| 8192 | 2.0 s | skipped | - |

Ratios are speed-ups.

## Incremental decoding: cost per new token (median)

| prefix P | softmax | other | other / softmax |
| ---: | ---: | ---: | ---: |
| 128 | {decode_us[0]} us | {decode_us[1]} us | 0.5 |
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_ratios_to_the_reference_are_compared_and_a_slow_down_beyond_the_tolerance_fails(tmp_path, capsys):
    # twice as slow a machine after: the ratios are unchanged
    before = write(tmp_path, "before.md", report(100, 50))
    after = write(tmp_path, "after.md", report(200, 100, (1200, 600)))
    rows = compare.compare([before], [after], "softmax", 0.05, None)
    assert [(r[0], r[1], r[2]) for r in rows] == [("forward+backward", 4096, "other"), ("decoding per token", 128, "other")]
    assert all(r[5] == pytest.approx(0.0) and r[6] is None and r[7] == compare.WITHIN for r in rows)
    assert compare.main(["--before", before, "--after", after]) == 0
    # 10 % slower relative to softmax: marked, exit status 3 (1 and 2 are errors)
    slower = write(tmp_path, "slower.md", report(100, 55))
    assert compare.main(["--before", before, "--after", slower]) == compare.EXIT_STATUS[compare.SLOWER] == 3
    assert "+10.0% **slower by more than 5%**" in capsys.readouterr().out
    # the median over repeated reports of a side
    rows = compare.compare([before], [slower, after, write(tmp_path, "again.md", report(100, 51))], "softmax", 0.05, [4096])
    assert rows[0][4] == pytest.approx(0.51) and rows[0][5] == pytest.approx(0.02)


def test_a_change_within_the_same_code_spread_is_unresolved_and_beyond_it_slower(tmp_path, capsys):
    # the same code measured twice per side: 0.50 and 0.60 before (spread 20 %), 0.55 and 0.60 after
    before = [write(tmp_path, "b1.md", report(100, 50)), write(tmp_path, "b2.md", report(100, 60))]
    after = [write(tmp_path, "a1.md", report(100, 60)), write(tmp_path, "a2.md", report(100, 66))]
    (row,) = compare.compare(before, after, "softmax", 0.05, [4096])[:1]
    assert row[3] == pytest.approx(0.55) and row[4] == pytest.approx(0.63) and row[6] == pytest.approx(0.2)
    assert row[5] == pytest.approx(0.63 / 0.55 - 1) and row[7] == compare.UNRESOLVED  # +14.5 %: beyond 5 %, within 20 %
    args = sum((["--before", b] for b in before), []) + sum((["--after", a] for a in after), []) + ["--lengths", "4096"]
    assert compare.main(args) == compare.EXIT_STATUS[compare.UNRESOLVED] == 4
    out = capsys.readouterr().out
    assert "unresolved: beyond 5%, within the spread | 20.0% |" in out
    assert "moved by more than 5% between reports of the same code (largest 20.0%)" in out
    # beyond the spread: slower
    after = [write(tmp_path, "a3.md", report(100, 70)), write(tmp_path, "a4.md", report(100, 72))]
    assert compare.compare(before, after, "softmax", 0.05, [4096])[0][7] == compare.SLOWER
    assert compare.main(sum((["--before", b] for b in before), []) + sum((["--after", a] for a in after), [])) == 3


def test_a_file_that_is_not_a_report_is_named(tmp_path):
    path = write(tmp_path, "notes.md", "# something else\n")
    with pytest.raises(SystemExit, match="notes.md: no section '## Forward \\+ backward time \\(median\\)'"):
        compare.compare([path], [path], "softmax", 0.05, None)


def test_the_reference_is_the_one_the_reports_ratios_are_to(tmp_path, capsys):
    before = write(tmp_path, "before.md", report(100, 50))
    assert compare.report_reference([before]) == "softmax"
    # the reports' ratios are to "other": its column is the reference (softmax's time relative to it)
    other_first = report(100, 50).replace("| softmax / other |", "| other / softmax |")
    after = write(tmp_path, "after.md", other_first)
    assert compare.report_reference([after]) == "other"
    assert compare.main(["--before", write(tmp_path, "b2.md", other_first), "--after", after]) == 0
    assert "| forward+backward | 4096 | softmax | 2.000 | 2.000 | +0.0% |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--reference: the reports' ratios are to different kinds .*before.md: softmax.*"
                                         "after.md: other.*; name one"):
        compare.main(["--before", before, "--after", after])
    no_ratio = write(tmp_path, "plain.md", report(100, 50).replace(" softmax / other |", ""))
    with pytest.raises(SystemExit, match="--reference: .*plain.md: no ratio column"):
        compare.main(["--before", no_ratio, "--after", no_ratio])
    assert compare.main(["--before", no_ratio, "--after", no_ratio, "--reference", "softmax"]) == 0
