"""tools/record_test_durations.py sums a JUnit report per test file, and tests/conftest.py starts the longest
recorded files first (a real pytest run in a subprocess, collecting only)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("record_test_durations", os.path.join(ROOT, "tools", "record_test_durations.py"))
record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.cli.test_end_to_end" name="test_a" time="100.5"/>
<testcase classname="tests.cli.test_end_to_end" name="test_b[x]" time="20.0"/>
<testcase classname="tests.test_kind_costs.TestGroup" name="test_c" time="3.25"/>
<testcase classname="tests.search.test_space" name="test_d" time="0.5"/>
</testsuite></testsuites>
"""


def test_durations_are_summed_per_file_longest_first(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    durations = record.file_durations(str(tmp_path / "junit.xml"))
    assert list(durations.items()) == [("tests/cli/test_end_to_end.py", 120.5), ("tests/test_kind_costs.py", 3.2),
                                       ("tests/search/test_space.py", 0.5)]
    assert record.main([str(tmp_path / "junit.xml"), "--output", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text()) == durations


def test_a_report_that_is_not_junit_or_names_other_files_is_refused(tmp_path):
    (tmp_path / "bad.xml").write_text("not xml")
    with pytest.raises(SystemExit, match="bad.xml: not a readable JUnit XML report"):
        record.file_durations(str(tmp_path / "bad.xml"))
    (tmp_path / "other.xml").write_text(JUNIT.replace("tests.cli.test_end_to_end", "tests.cli.test_gone"))
    with pytest.raises(SystemExit, match="names files that are not in this checkout, e.g. tests/cli/test_gone.py"):
        record.main([str(tmp_path / "other.xml"), "--output", str(tmp_path / "d.json")])


def test_the_suite_collects_the_longest_recorded_files_first():
    with open(os.path.join(ROOT, "tests", "durations.json"), encoding="utf-8") as f:
        durations = json.load(f)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "tests"], cwd=ROOT,
                               capture_output=True, text=True)
    assert collected.returncode == 0, collected.stderr[-2000:]
    files = list(dict.fromkeys(line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line))
    recorded = [name for name in files if name in durations]
    assert recorded == sorted(recorded, key=lambda name: -durations[name]) and len(recorded) > 10
    # files the table does not know come after every recorded one
    assert files[:len(recorded)] == recorded
