"""Attention analysis of decoders: current vs historical attention (CA, HA,
CA/HA per layer; Sha et al. 2022, Bird-Eye Transformers, Table 1) and
per-sentence heatmaps. Command line: ``python -m fairseq_plugins.analysis``.
The names below are read from ``runner.py`` and ``stats.py`` (torch) when first
used, so that the command line answers ``--help`` without them."""
LAZY_NAMES = {
    "AnalysisError": "runner", "analyse": "runner", "load": "runner", "sentence_attention": "runner",
    "AttentionStatistics": "stats", "LayerStatistics": "stats", "attention_statistics": "stats",
}


def __getattr__(name):
    if name in LAZY_NAMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{LAZY_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
