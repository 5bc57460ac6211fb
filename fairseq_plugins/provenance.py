"""Where and on what a measurement ran (git revision, cores, processor, load): one implementation for the
package's measuring tools (``search collect``) and every script in benchmarks/ (``benchmarks/provenance.py``)."""
import os
import subprocess

# the checkout the package runs from (an installed copy outside git records its revision as "unknown")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRTY_MARK = " (with uncommitted changes)"


def git_revision(checkout: str = REPO) -> str:
    """HEAD's short hash of ``checkout`` (default: the one the package runs from), marked when tracked files
    have uncommitted changes; "unknown" outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=checkout, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=checkout,
                               capture_output=True, text=True).stdout.strip()
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
