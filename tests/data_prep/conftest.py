"""Make ``data_prep`` (not an installed package) and the raw-sample helpers importable."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from prepared import prepare_sample  # noqa: E402,F401  (fixture)
