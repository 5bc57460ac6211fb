"""The ``bet`` kind, Bird-Eye attention (Sha et al. 2022): ``naive.py``
(tensor-level reference, eqs. 6-10), ``options.py``, ``attention.py`` (the module, its fused
paths and its registration), ``costs.py``."""
from .attention import BetAttention, naive_bet_attention, naive_bet_token_scores  # noqa: F401
from .costs import BET_COSTS  # noqa: F401
from .naive import naive_attention, naive_token_scores  # noqa: F401
from .options import SCORE_WEIGHTS, BetOptions  # noqa: F401
