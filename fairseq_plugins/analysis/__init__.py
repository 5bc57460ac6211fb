"""Attention analysis of decoders: current vs historical attention (CA, HA,
CA/HA per layer; Sha et al. 2022, Bird-Eye Transformers, Table 1) and
per-sentence heatmaps. Command line: ``python -m fairseq_plugins.analysis``."""
from .runner import AnalysisError, analyse, load, sentence_attention  # noqa: F401
from .stats import AttentionStatistics, LayerStatistics, attention_statistics  # noqa: F401
