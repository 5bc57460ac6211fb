"""Where and on what a benchmark ran: one implementation for every script in
benchmarks/ (git revision, core count, load average)."""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRTY_MARK = " (with uncommitted changes)"


def git_revision() -> str:
    """HEAD's short hash, marked when tracked files have uncommitted changes; "unknown" outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return (rev or "unknown") + (DIRTY_MARK if dirty else "")


def available_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or "?" where the system has none."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def is_dirty(revision: str) -> bool:
    """Whether a revision string of ``git_revision`` says the tracked files had uncommitted changes."""
    return revision.endswith(DIRTY_MARK)


def require_committed(allow_dirty: bool, what: str) -> str:
    """The revision to record for a measurement; stops when tracked files have uncommitted changes, because the
    recorded revision would not contain the code that ran (``--allow-dirty`` measures anyway, marked as such)."""
    revision = git_revision()
    if is_dirty(revision) and not allow_dirty:
        raise SystemExit(f"error: {what}: tracked files have uncommitted changes (git status), so revision "
                         f"{revision.split()[0]} would not contain the code that ran; commit first, or pass "
                         "--allow-dirty to measure anyway (the report then marks the results as uncommitted)")
    return revision


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown processor"
