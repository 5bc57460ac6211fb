"""Causal cosFormer's algorithms behind one signature (as flash-linear-attention keeps its ops):

    algorithm(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None, **tuning)
        -> (o, final_state)

q, k: B,H,T,D, the raw projections W_q x, W_k x (phi = ReLU and the zeroing of padded keys are applied
inside, fused where the algorithm can); v: B,H,T,E; angle: B,1,T,1 = pi/2 p / M, p each token's position
(``attention.sequence_positions``); horizon: M; key_padding_mask: B,T, True at pads (padding only at the
start or the end of a sequence: ``chunked`` relies on it); initial_state / final_state: B,H,2,D,E+1, the
sums sum_j [phi(k_j) cos a_j ; phi(k_j) sin a_j] [v_j, 1]^T over the earlier tokens (eq. 10; None: none).
o: B,H,T,E. States, normaliser and o are float32 for bf16/fp16 inputs (float64 for float64 ones).
Every algorithm computes the same function:

* ``naive``: eq. 9 as a T x T matrix, plus the carried state through eq. 10 (the reference);
* ``chunked``: the chunk algorithm in torch (``chunked.py``), any device;
* ``fused``: the chunk algorithm in Triton kernels (``fused_chunk.py``), CUDA or Triton's interpreter;
* ``recurrent``: token by token in torch (``recurrent.py``: decoding);
* ``fused_recurrent``: token by token in one Triton kernel (``fused_recurrent.py``: decoding, no backward).

The module picks one (``select``): ``--cosformer-algorithm auto`` takes the torch chunked form for a full
pass (training, scoring) on every device, and the fused step kernel for decoding on CUDA when Triton
imports (``recurrent`` otherwise); ``chunked`` forces the torch forms, ``fused`` the kernels (full pass
and decoding). The choice is logged once per process.
"""
import importlib.util
import logging
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..precision import without_autocast
from ..registry import AttentionConfigError
from ..shared import at_least_float32
from .chunked import DEFAULT_CHUNK_SIZE, _causal_decay, _ChunkedCausalCosformer
from .recurrent import causal_step

logger = logging.getLogger(__name__)

# Chunk length of the fused kernels: a power of two, at least 16 on a GPU (tl.dot's smallest tile). At
# head dim 64 and C = 32 the kernels compiled for sm_90 (ahead of time, no GPU) take 87 KB (forward), 87 KB
# and 128 KB (backward) of shared memory, within an A100's 164 KB; C = 64 needs 231 KB in the backward
# (an H100's 227 KB at most). Not tuned on a GPU.
FUSED_CHUNK_SIZE = 32

AUTO, CHUNKED, FUSED = "auto", "chunked", "fused"
ALGORITHM_CHOICES = (AUTO, CHUNKED, FUSED)


def triton_available() -> bool:
    """Whether Triton is installed and imports (an optional dependency: CUDA wheels of torch bring it)."""
    try:
        if importlib.util.find_spec("triton") is None:
            return False
        import triton  # noqa: F401
    except Exception:  # a broken (or blocked) install is no Triton: the torch forms run instead
        return False
    return True


def _at_least_float32(*tensors: Tensor):
    """The torch algorithms compute in float32 (float64 for float64 inputs), as the fused kernels accumulate:
    bf16/fp16 inputs are cast (their gradients come back in their own dtype)."""
    dtype = at_least_float32(tensors[0].dtype)
    return [t.to(dtype) if t is not None else None for t in tensors]


def _phi(q: Tensor, k: Tensor, key_padding_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """phi = ReLU (eq. 6), padded keys zero."""
    q, k = F.relu(q), F.relu(k)
    if key_padding_mask is not None:
        k = k.masked_fill(key_padding_mask.bool()[:, None, :, None], 0.0)
    return q, k


def naive_causal(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None):
    """The reference: O_i = [sum_{j<=i} phi(q_i) phi(k_j)^T cos(a_i - a_j) v_j + q'_i S_v]
    / max(sum_{j<=i} phi(q_i) phi(k_j)^T cos(a_i - a_j) + q'_i s_z, eps) (eq. 9; the carried state S
    through eq. 10, q'_i = [phi(q_i) cos a_i, phi(q_i) sin a_i]), as a T x T matrix. ``horizon`` is
    implied by ``angle``."""
    q, k, v, angle, initial_state = _at_least_float32(q, k, v, angle, initial_state)
    q, k = _phi(q, k, key_padding_mask)
    length = q.size(2)
    a = angle[:, :, :, 0]  # B,1,T
    weights = (q @ k.transpose(-1, -2)) * torch.cos(a.unsqueeze(-1) - a.unsqueeze(-2))  # eq. 8
    weights = weights * torch.ones(length, length, dtype=q.dtype, device=q.device).tril()
    v1 = F.pad(v, (0, 1), value=1.0)
    out = weights @ v1
    k2 = torch.cat([k * torch.cos(angle), k * torch.sin(angle)], dim=-1)  # B,H,T,2D
    final = k2.transpose(-1, -2) @ v1
    if initial_state is not None:
        state = initial_state.flatten(2, 3)  # B,H,2D,E+1
        out = out + torch.cat([q * torch.cos(angle), q * torch.sin(angle)], dim=-1) @ state
        final = final + state
    o = out[..., :-1] / out[..., -1:].clamp_min(eps)
    return o, final.unflatten(2, (2, q.size(-1)))


def chunked_causal(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE, own: bool = False):
    """The chunk algorithm in torch (``_ChunkedCausalCosformer``). own: nothing else uses q, k, v (the
    module's case): the backward overwrites them with their gradients."""
    q, k, v, angle, initial_state = _at_least_float32(q, k, v, angle, initial_state)
    chunk = max(1, min(chunk_size, q.size(2)))
    decay = _causal_decay(chunk, horizon, q.dtype, q.device)
    return _ChunkedCausalCosformer.apply(q, k, v, None, torch.cos(angle), torch.sin(angle), decay, initial_state, eps,
                                         chunk, key_padding_mask, True, own)


def recurrent_causal(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None):
    """Token by token (decoding: T is 1): ``causal_step`` per token, the state carried. Differentiable."""
    q, k, v, angle, initial_state = _at_least_float32(q, k, v, angle, initial_state)
    q, k = _phi(q, k, key_padding_mask)
    cos_a, sin_a = torch.cos(angle), torch.sin(angle)
    if q.size(2) == 1:  # (decoding: no slices)
        return causal_step(q, k, v, None, cos_a, sin_a, eps, initial_state)
    state, outs = initial_state, []
    for t in range(q.size(2)):
        sl = slice(t, t + 1)
        out, state = causal_step(q[:, :, sl], k[:, :, sl], v[:, :, sl], None, cos_a[:, :, sl], sin_a[:, :, sl], eps, state)
        outs.append(out)
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0], state


def fused_causal(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None, chunk_size: Optional[int] = None):
    """The chunk algorithm in fused Triton kernels (``fused_chunk.py``): forward and backward."""
    from .fused_chunk import fused_chunk_causal

    return fused_chunk_causal(q, k, v, initial_state, angle, eps, key_padding_mask,
                              FUSED_CHUNK_SIZE if chunk_size is None else chunk_size)


@without_autocast
def fused_recurrent(q, k, v, initial_state=None, *, angle, horizon, eps, key_padding_mask=None):
    """Token by token in one Triton kernel (``fused_recurrent.py``); no backward."""
    from .fused_recurrent import fused_recurrent_causal

    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v) + ((initial_state,) if initial_state is not None else ())):
        raise RuntimeError("cosformer's fused_recurrent has no backward: use recurrent (or fused for training)")
    return fused_recurrent_causal(q, k, v, initial_state, angle, eps, key_padding_mask)


ALGORITHMS: Dict[str, Callable] = {
    "naive": naive_causal,
    CHUNKED: chunked_causal,
    FUSED: fused_causal,
    "recurrent": recurrent_causal,
    "fused_recurrent": fused_recurrent,
}


def fused_runs_on(device: torch.device) -> bool:
    """Whether the Triton kernels can run on tensors of ``device``: CUDA, or anything under the interpreter."""
    if not triton_available():
        return False
    from .fused_chunk import interpreted

    return device.type == "cuda" or interpreted()


_logged = set()


def select(requested: str, device: torch.device, decoding: bool, needs_grad: bool) -> str:
    """The algorithm the module runs: ``requested`` (an ``ALGORITHM_CHOICES``) on ``device``, for a full
    pass or a decoding step (one token), with or without gradients. Logged once per process and choice."""
    if requested == FUSED:
        if not fused_runs_on(device):
            raise AttentionConfigError(
                f"--cosformer-algorithm fused needs Triton and a CUDA device (or TRITON_INTERPRET=1 set before "
                f"Triton is imported), got tensors on {device.type}{'' if triton_available() else ' without Triton'}")
        fused = True
    else:
        fused = requested == AUTO and device.type == "cuda" and triton_available()
    if decoding:
        name = "fused_recurrent" if fused and not needs_grad else "recurrent"
    else:
        # auto: the torch chunked form for a full pass, also on CUDA. On an H200 (docs/records/gpu.md,
        # 2026-11-28) the fused kernels' forward+backward of one layer took 18.2 ms at T = 1024, 3.5x the
        # naive cumsum reference, and their compilation held up the first updates of a training.
        name = FUSED if requested == FUSED else CHUNKED
    key = (requested, device.type, name)
    if key not in _logged:
        _logged.add(key)
        logger.info("cosformer causal attention (--cosformer-algorithm %s) on %s: %s %s", requested, device.type, name,
                    "(decoding step)" if decoding else "(full pass)")
    return name

