"""The ``bet`` kind, Bird-Eye attention (Sha et al. 2022): ``naive.py``
(tensor-level reference, eqs. 6-10), ``attention.py`` (the module, its fused
paths and its registration), ``costs.py``."""
from .attention import SCORE_WEIGHTS, BetAttention, naive_bet_attention, naive_bet_token_scores  # noqa: F401
from .costs import BET_COSTS  # noqa: F401
from .naive import naive_attention, naive_token_scores  # noqa: F401
