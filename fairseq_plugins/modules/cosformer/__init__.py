"""The ``cosformer`` kind (Qin et al. 2022): ``naive.py`` (tensor-level
reference, eq. 9), ``bidirectional.py`` (eq. 10, encoder self-attention),
``chunked.py`` (the causal form in chunks, with its autograd function),
``recurrent.py`` (one decoding step), ``algorithms.py`` (causal attention's algorithms
behind one signature, and the module's choice among them), ``fused_chunk.py`` and
``fused_recurrent.py`` (Triton kernels, imported only where Triton is: an optional
dependency), ``attention.py`` (the module and its registration), ``costs.py``,
``reference_cumsum.py`` (the public reference's causal form, a baseline of the speed
benchmark)."""
from .algorithms import ALGORITHM_CHOICES, ALGORITHMS, triton_available  # noqa: F401
from .attention import DEFAULT_EPS, CosformerAttention, explicit_weights, naive_cosformer  # noqa: F401
from .bidirectional import cosformer_bidirectional  # noqa: F401
from .chunked import DEFAULT_CHUNK_SIZE, SEGMENT_BYTES, cosformer_causal  # noqa: F401
from .costs import COSFORMER_COSTS  # noqa: F401
from .naive import naive_attention  # noqa: F401
from .recurrent import causal_step  # noqa: F401
from .reference_cumsum import REFERENCE_CUMSUM, ReferenceCumsumAttention, cosformer_reference_cumsum  # noqa: F401
from .options import CosformerOptions, horizon_for  # noqa: F401
