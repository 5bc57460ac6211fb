"""Make ``benchmarks`` (a package of the checkout, not an installed one) importable, and give every test a
fresh start-of-run revision (``benchmarks.provenance._checked``, which ``require_committed`` sets for the
rest of a process: a test that calls it must not decide what a later test's run records)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def no_revision_checked_before(monkeypatch):
    from benchmarks import provenance

    monkeypatch.setattr(provenance, "_checked", None)
