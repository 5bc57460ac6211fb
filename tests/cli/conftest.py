"""Make the shared end-to-end helpers of tests/cli (translation_presets.py) importable."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
