"""Options and size checks of the Extractor kinds (``--extractor-lags``,
``--extractor-conv-impl``, ``--extractor-no-output-projection``)."""
import os
from dataclasses import dataclass, field
from typing import Optional

from ..options import AttentionContext, KindOptions
from ..registry import AttentionConfigError

CONV_IMPLS = ("auto", "direct", "fft")
# Parameters are float32 in training; SHE's l x d x d extraction weights must
# fit in this fraction of the machine's physical memory.
PARAMETER_BYTES = 4
MEMORY_FRACTION = 0.5


# ------------------------------------------------------------ sizes, checks ---
def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class ExtractorMEOptions(KindOptions):
    """The options every Extractor reads (ME's: it has no output projection to leave out)."""

    extractor_lags: Optional[int] = field(
        default=None,
        metadata={
            "help": "Extractors: number of lags l (context window; only the last l inputs contribute), "
            "1 <= l <= --max-target-positions (default: --max-target-positions; language models: --tokens-per-sample)",
            # the presets set it from the task's positions when the model is built: not a constant of a preset
            "from_task": True,
        },
    )
    extractor_conv_impl: str = field(
        default="auto",
        metadata={
            "help": "Extractors: causal convolution of a full pass: auto (smaller estimated time, weighted multiplication counts), "
            "direct (conv1d) or fft (rfft/irfft); choices: auto, direct, fft"
        },
    )

    def validate(self):
        if self.extractor_lags is not None:
            self.extractor_lags = int(self.extractor_lags)
            if self.extractor_lags < 1:
                raise AttentionConfigError(f"--extractor-lags must be >= 1, got {self.extractor_lags}")
        self.extractor_conv_impl = str(self.extractor_conv_impl)
        if self.extractor_conv_impl not in CONV_IMPLS:
            raise AttentionConfigError(
                f"--extractor-conv-impl must be one of {', '.join(CONV_IMPLS)}, got {self.extractor_conv_impl!r}")


@dataclass
class ExtractorOptions(ExtractorMEOptions):
    """The options of SHE, HE and WE."""

    extractor_no_output_projection: bool = field(
        default=False,
        metadata={"help": "Extractors SHE/HE/WE: leave out the output projection W_out (eq. 25)"},
    )

    def validate(self):
        super().validate()
        self.extractor_no_output_projection = bool(self.extractor_no_output_projection)


def resolve_lags(options: ExtractorMEOptions, context: AttentionContext) -> int:
    """``--extractor-lags``, by default the target positions; checked against them."""
    lags, positions = options.extractor_lags, context.max_target_positions
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
