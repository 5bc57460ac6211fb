"""Command-line tools of fairseq_plugins (console scripts declared in setup.py)."""
