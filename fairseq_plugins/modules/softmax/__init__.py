"""The ``softmax`` kind: ``naive.py`` (tensor-level reference, eq. 1 of Vaswani
et al. 2017), ``options.py``, ``attention.py`` (the module, fairseq's MultiheadAttention, and
its registration), ``costs.py``."""
from .attention import SoftmaxAttention, naive_softmax_attention  # noqa: F401
from .costs import SOFTMAX_COSTS, softmax_attention, softmax_parameters, softmax_step, softmax_training  # noqa: F401
from .naive import naive_attention  # noqa: F401
from .options import SoftmaxOptions, check_diag_options  # noqa: F401
