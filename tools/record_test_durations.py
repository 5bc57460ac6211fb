#!/usr/bin/env python
"""Write ``tests/durations.json``: the seconds each test file took in a run, from pytest's JUnit XML report.

``tests/conftest.py`` starts the longest files first, so that `make test`'s workers (pytest-xdist,
``--dist loadfile --no-loadscope-reorder``: a file stays on one worker, files go out in collection order)
do not end with one worker training alone while the other idles (longest-processing-time-first
scheduling). Refresh it after adding or changing long tests:

    make test TEST_ARGS=--junitxml=/tmp/junit.xml && python tools/record_test_durations.py /tmp/junit.xml

The times order the files only; nothing checks them, and a file missing from the table runs after the
recorded ones.
"""
import argparse
import collections
import os
import sys
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fairseq_plugins.files import write_json  # noqa: E402

OUTPUT = os.path.join(ROOT, "tests", "durations.json")


def file_durations(junit_path: str) -> dict:
    """test file (relative to the checkout, as pytest names it) -> seconds, summed over its test cases
    (JUnit's ``time`` of a case includes its setup and teardown)."""
    try:
        tree = ElementTree.parse(junit_path)
    except (OSError, ElementTree.ParseError) as error:
        raise SystemExit(f"error: {junit_path}: not a readable JUnit XML report ({error})")
    totals = collections.defaultdict(float)
    for case in tree.iter("testcase"):
        # classname: tests.cli.test_end_to_end (a module) or tests.cli.test_x.TestClass
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if not parts:
            continue
        totals["/".join(parts) + ".py"] += float(case.get("time", 0) or 0)
    if not totals:
        raise SystemExit(f"error: {junit_path}: no test cases with a test file's name")
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda item: -item[1])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", help="pytest's --junitxml report of a whole-suite run")
    parser.add_argument("--output", default=OUTPUT, help="the table to write (default: tests/durations.json)")
    args = parser.parse_args(argv)
    durations = file_durations(args.junit)
    missing = [name for name in durations if not os.path.isfile(os.path.join(ROOT, name))]
    if missing:
        raise SystemExit(f"error: {args.junit}: names files that are not in this checkout, e.g. {missing[0]} "
                         "(run the report from the checkout's root)")
    write_json(args.output, durations)
    print(f"{args.output}: {len(durations)} files, {sum(durations.values()) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
