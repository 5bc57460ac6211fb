"""Criteria. Importing this package registers them with fairseq."""
from . import label_smoothed_cross_entropy_with_pointer  # noqa: F401  (registration side effects)
