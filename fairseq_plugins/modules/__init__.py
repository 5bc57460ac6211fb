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
    check_head_dim,
    check_key_copies,
    check_kind,
    default_kind,
    register_attention,
    valid_kinds,
)
import importlib as _importlib  # noqa: E402
import pkgutil as _pkgutil  # noqa: E402

# Every subpackage of this folder is one kind package (modules/<kind>/: naive.py, the fast paths,
# attention.py, costs.py, options.py): importing it registers its kinds. In name order, as fairseq
# imports its own models, so that adding a kind touches no file outside its package.
for _package in sorted(info.name for info in _pkgutil.iter_modules(__path__) if info.ispkg):
    _importlib.import_module(f"{__name__}.{_package}")
