"""Options and size checks of the Extractor kinds (``--extractor-lags``,
``--extractor-conv-impl``)."""
import os
from typing import Optional

from ..registry import AttentionConfigError

CONV_IMPLS = ("auto", "direct", "fft")
# Parameters are float32 in training; SHE's l x d x d extraction weights must
# fit in this fraction of the machine's physical memory.
PARAMETER_BYTES = 4
MEMORY_FRACTION = 0.5


# ------------------------------------------------------------ sizes, checks ---
def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resolve_lags(cfg) -> int:
    """``--extractor-lags``, by default ``max_target_positions``; checked against it."""
    lags = getattr(cfg, "extractor_lags", None) if cfg is not None else None
    positions = getattr(cfg, "max_target_positions", None) if cfg is not None else None
    if lags is None:
        if positions is None:
            raise AttentionConfigError(
                "extractors need a number of lags: set --extractor-lags (default: --max-target-positions, "
                "for language models --tokens-per-sample)"
            )
        lags = positions
    lags = int(lags)
    if lags < 1:
        raise AttentionConfigError(f"--extractor-lags must be >= 1, got {lags}")
    if positions is not None and lags > int(positions):
        raise AttentionConfigError(
            f"--extractor-lags {lags} is larger than the {positions} target positions the model is built for: "
            f"lower --extractor-lags or raise --max-target-positions (language models: --tokens-per-sample)"
        )
    return lags


def resolve_conv_impl(cfg) -> str:
    impl = getattr(cfg, "extractor_conv_impl", None) if cfg is not None else None
    impl = "auto" if impl is None else str(impl)
    if impl not in CONV_IMPLS:
        raise AttentionConfigError(f"--extractor-conv-impl must be one of {', '.join(CONV_IMPLS)}, got {impl!r}")
    return impl


def check_she_size(lags: int, embed_dim: int, memory_bytes: Optional[int] = None):
    """SHE has l d x d matrices: refuse sizes that cannot fit in memory."""
    needed = lags * embed_dim * embed_dim * PARAMETER_BYTES
    memory_bytes = physical_memory_bytes() if memory_bytes is None else memory_bytes
    if needed > MEMORY_FRACTION * memory_bytes:
        raise AttentionConfigError(
            f"extractor_she with --extractor-lags {lags} and embedding dimension {embed_dim} needs "
            f"{lags} x {embed_dim} x {embed_dim} extraction weights ({needed / 2**30:.1f} GiB in float32), more than "
            f"half of this machine's {memory_bytes / 2**30:.1f} GiB memory: lower --extractor-lags "
            f"(or the embedding dimension), or use extractor_he / extractor_we"
        )
