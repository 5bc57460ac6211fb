"""Make ``data_prep`` and the raw-sample helpers of tests/data_prep importable."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for path in (ROOT, os.path.join(ROOT, "tests", "data_prep")):
    if path not in sys.path:
        sys.path.insert(0, path)

from prepared import prepare_sample  # noqa: E402,F401  (fixture)
