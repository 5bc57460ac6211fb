#!/usr/bin/env python
"""Did a change make any kind slower? Compares reports of ``benchmarks/attention_speed.py`` taken before and
after it, on the same machine, back to back.

For every kind and every T of the forward+backward table (and every prefix of the decoding table) it takes
the kind's time relative to the reference kind's in the same report (the load and the machine's speed cancel
out, as the issue's "ratio to softmax" asks), the median over the reports given for each side, and prints
the change of that ratio from BEFORE to AFTER: positive = the kind got slower relative to the reference.
A change beyond ``--tolerance`` (default 5 %) is marked, and the exit status is 3 when any is. The reference
is, by default, the kind the reports' own ratios are to (the first ratio column of the forward+backward table,
``softmax / ...``, the registry's ratio reference when they were made).

With two or more reports on a side, the same code's ratio also differs between its reports: the *spread* of a
cell (the larger over both sides of max / min - 1) is what this machine's noise alone moves it. A change beyond
the tolerance but within the spread cannot be told from that noise: it is marked as unresolved (exit status 4
when nothing is slower), and more reports per side, or a quieter machine, are needed to decide it. Errors exit
with 1 (a report that cannot be read) or 2 (a bad option).

    git worktree add /tmp/before REV
    (cd /tmp/before && python benchmarks/attention_speed.py --lengths 4096,8192 ... --output /tmp/before1.md)
    python benchmarks/attention_speed.py --lengths 4096,8192 ... --output /tmp/after1.md
    python benchmarks/compare_speed_reports.py --before /tmp/before1.md --after /tmp/after1.md
"""
import argparse
import re
import statistics
import sys
from typing import Dict, List, Optional, Tuple

TIME_SECTION = "## Forward + backward time (median)"
DECODE_SECTION = "## Incremental decoding: cost per new token (median)"
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def seconds(cell: str) -> Optional[float]:
    """ "795.3 ms" -> 0.7953; anything that is not a time (skipped, -) -> None."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(s|ms|us|ns)\s*", cell)
    return float(match.group(1)) * UNITS[match.group(2)] if match else None


def table_rows(text: str, heading: str, source: str) -> List[List[str]]:
    """The cells of the markdown table under ``heading``: the header row, then the data rows."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise SystemExit(f"error: {source}: no section {heading!r} (not a report of benchmarks/attention_speed.py?)")
    rows: List[str] = []
    in_table = False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append(line)
            in_table = True
        elif in_table:
            break
    if len(rows) < 3:
        raise SystemExit(f"error: {source}: the section {heading!r} has no table rows")
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[:1] + rows[2:]]


def table(text: str, heading: str, source: str) -> Dict[Tuple[int, str], float]:
    """(T or prefix, kind) -> seconds, from the markdown table under ``heading`` (columns whose header has no
    "/" are kinds; ratio columns are left out)."""
    header, *rows = table_rows(text, heading, source)
    values = {}
    for cells in rows:
        for name, cell in zip(header[1:], cells[1:]):
            if "/" not in name and seconds(cell) is not None:
                values[(int(cells[0]), name)] = seconds(cell)
    return values


def report_reference(reports: List[str]) -> str:
    """The kind the reports' ratios are to: the numerator of the first ratio column ("A / B") of their
    forward+backward table whose A is a kind column; every report must name the same one."""
    found = {}
    for path in reports:
        with open(path, encoding="utf-8") as f:
            header = table_rows(f.read(), TIME_SECTION, path)[0]
        kinds = {name for name in header[1:] if "/" not in name}
        found[path] = next((name.split("/")[0].strip() for name in header[1:]
                            if "/" in name and name.split("/")[0].strip() in kinds), None)
    if None in found.values():
        missing = ", ".join(path for path, reference in found.items() if reference is None)
        raise SystemExit(f"error: --reference: {missing}: no ratio column in the forward+backward table to take the "
                         "reference kind from; name it")
    if len(set(found.values())) > 1:
        raise SystemExit("error: --reference: the reports' ratios are to different kinds ("
                         + ", ".join(f"{path}: {reference}" for path, reference in found.items()) + "); name one")
    return next(iter(found.values()))


def relative_times(reports: List[str], heading: str, reference: str) -> Dict[Tuple[int, str], List[float]]:
    """(T, kind) -> the kind's time / the reference's time at that T, one per report of ``reports``."""
    collected: Dict[Tuple[int, str], List[float]] = {}
    for path in reports:
        with open(path, encoding="utf-8") as f:
            values = table(f.read(), heading, path)
        for (length, kind), value in values.items():
            base = values.get((length, reference))
            if kind != reference and base:
                collected.setdefault((length, kind), []).append(value / base)
    return collected


def spread(ratios: List[float]) -> Optional[float]:
    """max / min - 1 of one side's ratios of a cell (None with one report)."""
    return max(ratios) / min(ratios) - 1 if len(ratios) > 1 else None


SLOWER, UNRESOLVED, WITHIN = "slower", "unresolved", "within"
EXIT_STATUS = {WITHIN: 0, SLOWER: 3, UNRESOLVED: 4}  # 1 and 2: errors (a report that cannot be read, an option)


def compare(before: List[str], after: List[str], reference: str, tolerance: float, lengths: Optional[List[int]]):
    """The rows of the comparison: (section, T, kind, median ratio before, after, change, spread, verdict);
    spread: the cell's larger same-code spread of the two sides (None with one report on each), verdict:
    SLOWER (change beyond the tolerance and beyond the spread), UNRESOLVED (beyond the tolerance, within the
    spread) or WITHIN."""
    rows = []
    for label, heading in (("forward+backward", TIME_SECTION), ("decoding per token", DECODE_SECTION)):
        old, new = relative_times(before, heading, reference), relative_times(after, heading, reference)
        for key in sorted(set(old) & set(new)):
            if label == "forward+backward" and lengths and key[0] not in lengths:
                continue
            old_ratio, new_ratio = statistics.median(old[key]), statistics.median(new[key])
            change = new_ratio / old_ratio - 1
            spreads = [s for s in (spread(old[key]), spread(new[key])) if s is not None]
            noise = max(spreads) if spreads else None
            verdict = WITHIN if change <= tolerance else (UNRESOLVED if noise is not None and change <= noise else SLOWER)
            rows.append((label, key[0], key[1], old_ratio, new_ratio, change, noise, verdict))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", action="append", required=True, help="report of the revision before (repeatable)")
    parser.add_argument("--after", action="append", required=True, help="report of the revision after (repeatable)")
    parser.add_argument("--reference", help="the kind the times are relative to (default: the one the reports' "
                                            "ratio columns are to)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="allowed slow-down of a ratio (default: %(default)s)")
    parser.add_argument("--lengths", help="forward+backward lengths to compare (comma-separated; default: all common ones)")
    args = parser.parse_args(argv)
    lengths = [int(t) for t in args.lengths.split(",")] if args.lengths else None
    reference = args.reference or report_reference(args.before + args.after)
    rows = compare(args.before, args.after, reference, args.tolerance, lengths)
    if not rows:
        raise SystemExit("error: the reports have no (T, kind) cell in common")
    print(f"| measured | T / prefix | kind | time / {reference} before | after | change | same-code spread |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for label, length, kind, old, new, change, noise, verdict in rows:
        mark = {SLOWER: f" **slower by more than {args.tolerance:.0%}**",
                UNRESOLVED: f" unresolved: beyond {args.tolerance:.0%}, within the spread", WITHIN: ""}[verdict]
        print(f"| {label} | {length} | {kind} | {old:.3f} | {new:.3f} | {change:+.1%}{mark} | "
              f"{'-' if noise is None else f'{noise:.1%}'} |")
    verdicts = {row[-1] for row in rows}
    noisy = [row for row in rows if row[6] is not None and row[6] > args.tolerance]
    if noisy:
        print(f"\n{len(noisy)} of {len(rows)} cells moved by more than {args.tolerance:.0%} between reports of the same code "
              f"(largest {max(row[6] for row in noisy):.1%}): at this tolerance they need more reports per side or a "
              "quieter machine.")
    return EXIT_STATUS[SLOWER if SLOWER in verdicts else UNRESOLVED if UNRESOLVED in verdicts else WITHIN]


if __name__ == "__main__":
    sys.exit(main())
