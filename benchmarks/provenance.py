"""Where and on what a benchmark ran: the package's provenance (``fairseq_plugins/provenance.py``: git
revision, core count, processor, load average), and the rule that a measurement records committed code."""
import subprocess
from typing import List, Optional

from fairseq_plugins.provenance import (DIRTY_MARK, REPO, available_cores, cpu_model, git_revision,  # noqa: F401
                                        is_dirty, load_average)

# The revision ``require_committed`` found when the run started: the code the run loaded. None before.
_checked: Optional[str] = None
# What a run may change in the checkout without changing what it measures: the records (reports and their
# committed results, docs/records/) and the guides beside them.
REPORT_FOLDERS = ("docs/",)


def require_committed(allow_dirty: bool, what: str) -> str:
    """The revision to record for a measurement; stops when tracked files outside the records and guides
    (``REPORT_FOLDERS``) have uncommitted changes, because the recorded revision would not contain the code
    that ran (``--allow-dirty`` measures anyway, marked as such)."""
    revision = git_revision()
    if is_dirty(revision) and not [path for path in changed_paths("HEAD") if not path.startswith(REPORT_FOLDERS)]:
        # only records and guides changed (a long run's own results, written between its restarts): the code
        # that runs is the revision's
        revision = revision[: -len(DIRTY_MARK)]
    if is_dirty(revision) and not allow_dirty:
        raise SystemExit(f"error: {what}: tracked files have uncommitted changes (git status), so revision "
                         f"{revision.split()[0]} would not contain the code that ran; commit first, or pass "
                         "--allow-dirty to measure anyway (the report then marks the results as uncommitted)")
    global _checked
    _checked = revision
    return revision


def changed_paths(revision: str) -> List[str]:
    """Tracked files whose content in the working tree differs from ``revision`` (commits since it included)."""
    result = subprocess.run(["git", "diff", "--name-only", revision], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"git diff --name-only {revision}: {result.stderr.strip()}")
    return [line for line in result.stdout.splitlines() if line]


def measured_revision() -> str:
    """The revision to record when a measurement finishes: the clean one ``require_committed`` checked when the
    run started (the code it loaded), as long as nothing but reports (``REPORT_FOLDERS``) changed since; marked
    as not containing the code that ran when anything else changed (edited or committed) during the run.
    Without a clean check at the start: the checkout's revision now, as ``git_revision`` says."""
    if _checked is None or is_dirty(_checked) or _checked == "unknown":
        return git_revision()
    changed = [path for path in changed_paths(_checked) if not path.startswith(REPORT_FOLDERS)]
    return _checked + (DIRTY_MARK if changed else "")
