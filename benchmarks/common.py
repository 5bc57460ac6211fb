"""Helpers the benchmark scripts share (peak-RSS marks of a process, glibc's malloc held fixed, time cells,
fairseq's log fields), so that no script imports another's private names."""
import json
import os
import re
import resource
from typing import Dict, List

# glibc keeps freed blocks below its (dynamically raised) mmap threshold resident, so the peak RSS of a
# default process also measures that caching, which varies by tens of MB from run to run. The second
# memory measurement holds the threshold at glibc's initial 128 KiB, so that RSS follows the live
# allocations.
FIXED_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def reset_peak_rss():
    """Reset the kernel's peak-RSS mark (and so ru_maxrss) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def proc_kib_field(path, key):
    """A ``key: N kB`` line of a /proc file (``/proc/self/status``, ``/proc/meminfo``) in bytes; None where the
    file or the line is missing (not Linux)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes():
    """The kernel's peak-RSS mark of this process. VmHWM where /proc has it: ru_maxrss is the same mark
    but also carries over the RSS of the process that spawned this one (fork + exec keeps it), which
    hides the peaks of small cells; elsewhere ru_maxrss."""
    peak = proc_kib_field("/proc/self/status", "VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fmt_time(seconds):
    """At least 3 significant digits: compare_speed_reports.py reads these cells back, and a 2-digit cell
    ("1.8 ms") alone moves a ratio by up to 3 %."""
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-2:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-4:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e6:.1f} us"



def pipe_fields(line: str) -> Dict[str, float]:
    """fairseq's end-of-epoch lines: '... | loss 3.21 | nll_loss 2.1 | ... | num_updates 121 ...'."""
    values = {}
    for part in line.split(" | "):
        match = re.match(r"\s*(\w+) ([-+0-9.e]+)\s*$", part)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


def read_jsonl(path: str) -> list:
    """A JSON-lines file of ours, one record per line ([] where there is none); a line that is not JSON is a
    one-line error naming the file and line, as ``read_json``."""
    if not os.path.isfile(path):
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise SystemExit(f"error: {path}:{number}: not valid JSON ({error.msg}): repair it (git checkout "
                                     "it, or resolve its merge conflict), or remove it") from None
    return records


def read_json(path: str, default=None):
    """A JSON file of ours (a result, a record; ``default`` where there is none). One that is not JSON (a merge
    conflict in committed records, a hand edit) is a one-line error, never taken as missing (and overwritten)."""
    if not os.path.isfile(path):
        return default
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as error:
            raise SystemExit(f"error: {path}: not valid JSON ({error}): repair it (git checkout it, or resolve its "
                             "merge conflict), or remove it") from None


def whole_numbers(parser, option: str, text: str, least: int = 1, empty_ok: bool = False) -> List[int]:
    """``--option 256,1024``: comma-separated whole numbers of at least ``least`` (``empty_ok``: '' is none),
    or a one-line usage error naming the option, before any work."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = [int(item) for item in items]
    except ValueError:
        values = None
    if values is None or any(v < least for v in values) or not (values or empty_ok):
        parser.error(f"{option}: expected comma-separated whole numbers of at least {least}"
                     f"{' (or an empty string: none)' if empty_ok else ''}, got {text!r}")
    return values
