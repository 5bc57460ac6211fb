"""Attention kinds. Importing this package registers every kind."""
from .registry import (  # noqa: F401
    ATTENTION_REGISTRY,
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    PLACEMENTS,
    AttentionConfigError,
    BaseAttention,
    ConformanceVariant,
    build_attention,
    check_key_copies,
    check_kind,
    register_attention,
    valid_kinds,
)
# One package per kind (modules/<kind>/: naive.py, the fast paths, attention.py, costs.py).
from . import softmax, cosformer  # noqa: F401,E402  (registration side effects)
from . import extractors  # noqa: F401,E402  (registration side effects)
from . import bet  # noqa: F401,E402  (registration side effects)
