"""Options of the ``bet`` kind (Bird-Eye attention, Sha et al. 2022)."""
from dataclasses import dataclass, field

from ..options import KindOptions
from ..registry import AttentionConfigError

SCORE_WEIGHTS = ("per-head", "shared")


@dataclass
class BetOptions(KindOptions):
    bet_score_weights: str = field(
        default="per-head",
        metadata={
            "help": "Bird-Eye attention (bet): weights w of the token scores R_j = sigmoid(w^T [H_j; K_j]) (eq. 7): "
            "per-head (each head its own w_h and score) or shared (one w over all heads, one score per token); "
            "choices: per-head, shared (default: per-head)"
        },
    )
    bet_no_diag_free: bool = field(
        default=False,
        metadata={
            "help": "Bird-Eye attention (bet): use the ordinary causal mask (diagonal visible) for the re-weighted "
            "attention A' instead of the diagonal-free mask (the paper's ablation; default: diagonal-free)"
        },
    )

    def validate(self):
        self.bet_score_weights, self.bet_no_diag_free = str(self.bet_score_weights), bool(self.bet_no_diag_free)
        if self.bet_score_weights not in SCORE_WEIGHTS:
            raise AttentionConfigError(
                f"--bet-score-weights must be one of {', '.join(SCORE_WEIGHTS)}, got {self.bet_score_weights!r}")
