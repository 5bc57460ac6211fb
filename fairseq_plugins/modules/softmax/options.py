"""Options of the ``softmax`` kind: the Bird-Eye Transformer paper's diagonal ablations
(Sha et al. 2022, section 4), in causal self-attention only."""
import math
from dataclasses import dataclass, field

from ..options import KindOptions
from ..registry import DECODER_SELF, AttentionConfigError


def check_diag_options(diag_free: bool, diag_scale: float):
    if not math.isfinite(diag_scale):
        raise AttentionConfigError(f"--softmax-diag-scale must be a finite number, got {diag_scale}")
    if diag_free and diag_scale != 1.0:
        raise AttentionConfigError(
            f"--softmax-diag-free and --softmax-diag-scale {diag_scale} exclude each other: the diagonal-free mask "
            "hides the diagonal that the scale would change; set one of them"
        )


@dataclass
class SoftmaxOptions(KindOptions):
    softmax_diag_free: bool = field(
        default=False,
        metadata={
            "help": "softmax decoder self-attention only: diagonal-free mask, token i attends to tokens j < i "
            "(a token with no earlier real token attends to itself); excludes --softmax-diag-scale (default: off)",
            "placements": (DECODER_SELF,),
        },
    )
    softmax_diag_scale: float = field(
        default=1.0,
        metadata={
            "help": "softmax decoder self-attention only: multiply the diagonal scores q_i.k_i/sqrt(d_h) by this finite "
            "factor before the softmax (BET paper: 0.2 reduced, 2.0 magnified diagonal; default: 1.0, unchanged)",
            "placements": (DECODER_SELF,),
        },
    )

    def validate(self):
        self.softmax_diag_free, self.softmax_diag_scale = bool(self.softmax_diag_free), float(self.softmax_diag_scale)
        check_diag_options(self.softmax_diag_free, self.softmax_diag_scale)
