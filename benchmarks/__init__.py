"""The benchmark scripts, run from the checkout as ``python benchmarks/X.py``
(the commands the Makefile and docs/ show) or ``python -m benchmarks.X``; they
share code as modules of this package (``benchmarks.provenance``,
``benchmarks.quality``), not as top-level modules of a folder on sys.path."""
