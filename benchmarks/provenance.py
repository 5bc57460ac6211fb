"""Where and on what a benchmark ran: the package's provenance (``fairseq_plugins/provenance.py``: git
revision, core count, processor, load average), and the rule that a measurement records committed code."""
from fairseq_plugins.provenance import (DIRTY_MARK, REPO, available_cores, cpu_model, git_revision,  # noqa: F401
                                        is_dirty, load_average)


def require_committed(allow_dirty: bool, what: str) -> str:
    """The revision to record for a measurement; stops when tracked files have uncommitted changes, because the
    recorded revision would not contain the code that ran (``--allow-dirty`` measures anyway, marked as such)."""
    revision = git_revision()
    if is_dirty(revision) and not allow_dirty:
        raise SystemExit(f"error: {what}: tracked files have uncommitted changes (git status), so revision "
                         f"{revision.split()[0]} would not contain the code that ran; commit first, or pass "
                         "--allow-dirty to measure anyway (the report then marks the results as uncommitted)")
    return revision
