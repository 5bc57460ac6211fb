"""Model classes and presets (fairseq architectures)."""
from . import mixed_transformer, mixed_transformer_lm, extractor_presets, bet_presets  # noqa: F401  (registration side effects)
