"""What several attention kinds share: masks, the float32-at-least
compute dtype, the choice of fused-attention backends, argument checks of
self-attention-only kinds, padding bookkeeping and the projections of the
module-level naive references.
(``BaseAttention`` in ``registry.py`` holds the shared module helpers: head
splitting, projection initialisation, step padding, input checks.)"""
import contextlib
from typing import ContextManager, List, Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel


# The device types where without_cudnn_attention acts: cuDNN's attention exists on CUDA only.
CUDNN_DEVICE_TYPES = ("cuda",)


def backends_without_cudnn() -> Optional[List[SDPBackend]]:
    """The ``scaled_dot_product_attention`` backends enabled now (``torch.backends.cuda``'s
    switches, an enclosing ``sdpa_kernel`` included) except cuDNN; None when nothing is to change
    (cuDNN is off already, or it is the only backend enabled: then someone chose it)."""
    cuda = torch.backends.cuda
    if not cuda.cudnn_sdp_enabled():
        return None
    kept = [backend for backend, enabled in ((SDPBackend.FLASH_ATTENTION, cuda.flash_sdp_enabled()),
                                             (SDPBackend.EFFICIENT_ATTENTION, cuda.mem_efficient_sdp_enabled()),
                                             (SDPBackend.MATH, cuda.math_sdp_enabled())) if enabled]
    return kept or None


# what without_cudnn_attention returns where nothing is to change (reusable, unlike a generator's context)
_UNCHANGED = contextlib.nullcontext()


def without_cudnn_attention(device: torch.device) -> ContextManager[None]:
    """A context that keeps PyTorch's cuDNN backend out of ``scaled_dot_product_attention`` on CUDA
    (the backends otherwise enabled stay so; nothing changes elsewhere, at the cost of one check per
    call). Why: on an H100 with torch 2.11, where PyTorch prefers cuDNN for fp16/bf16, its backward
    gave input gradients 20-50x less accurate than the flash, memory-efficient and math backends
    (fp16: relative error 1.5-1.8e-2 against 3.8-8.1e-4, head width 16), and in one run 1.9
    (docs/records/gpu.md; known: pytorch/pytorch#150700, #196678). The backward runs the forward's backend,
    so wrapping the forward pass suffices."""
    if device.type not in CUDNN_DEVICE_TYPES:
        return _UNCHANGED
    kept = backends_without_cudnn()
    return _UNCHANGED if kept is None else sdpa_kernel(kept)


def at_least_float32(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision dtypes (float16, bfloat16), else the dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def as_dtype(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` in ``dtype``, with no torch call where it is in it already: on decoding's per-token path every
    call counts (``x.to(dtype)`` of a tensor already in ``dtype`` returns it too, through the dispatcher)."""
    return x if x.dtype == dtype else x.to(dtype)


# ------------------------------------------------------------------ masks ---
def causal_additive_mask(tgt_len: int, src_len: int, like: Tensor) -> Tensor:
    """fairseq's future mask: -inf above the diagonal, aligned to the last query."""
    offset = src_len - tgt_len
    return torch.triu(utils.fill_with_neg_inf(like.new_zeros(tgt_len, src_len)), 1 + offset)


def causal_visibility(tgt_len: int, src_len: int, key_padding_mask: Optional[Tensor], diag_free: bool, device) -> Tensor:
    """Which keys each query may see in causal self-attention: B x T x S bool
    (1 x T x S without padding). The queries are the last T of S tokens (offset
    S - T when decoding), so query i's own key is key i + S - T.

    Ordinary causal mask: real keys j <= i. Diagonal-free mask (BET, eq. 9):
    real keys j < i; a query that sees no key that way (the first token, or under
    left padding the first real token) sees its own key, if that key is real."""
    own = torch.arange(tgt_len, device=device).unsqueeze(1) + (src_len - tgt_len)
    keys = torch.arange(src_len, device=device).unsqueeze(0)
    visible = (keys < own if diag_free else keys <= own).unsqueeze(0)
    real = None if key_padding_mask is None else ~key_padding_mask.bool().unsqueeze(1)  # B x 1 x S
    if real is not None:
        visible = visible & real
    if diag_free:
        self_key = (keys == own).unsqueeze(0)
        if real is not None:
            self_key = self_key & real
        visible = visible | (self_key & ~visible.any(dim=-1, keepdim=True))
    return visible


def masked_softmax(scores: Tensor, visible: Tensor) -> Tensor:
    """softmax over the visible entries of the last dim (float32 at least); a row
    without any visible entry gets all-zero weights instead of NaN, in the
    forward and the backward pass."""
    dtype = at_least_float32(scores.dtype)
    any_visible = visible.any(dim=-1, keepdim=True)
    scores = scores.to(dtype).masked_fill(~visible, float("-inf")).masked_fill(~any_visible, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~any_visible, 0.0)


def causal_softmax(scores: Tensor, key_padding_mask: Optional[Tensor], diag_free: bool,
                   hidden: Optional[Tensor] = None) -> Tensor:
    """softmax of B x H x T x S causal self-attention scores over the keys each query sees
    (``causal_visibility``: the queries are the last T of S tokens; ``hidden``: further keys the caller
    hides, a bool broadcastable to the scores), float32 at least, as ``masked_softmax``. One query without
    padding or hidden keys (a decoding step) sees every key, or under the diagonal-free mask every earlier
    one (itself only when it is the first): plain softmaxes then, no mask built (most of a step's time
    otherwise); the weight on its own key is exactly 0."""
    tgt_len, src_len = scores.shape[-2:]
    if tgt_len == 1 and key_padding_mask is None and hidden is None:
        scores = scores.to(at_least_float32(scores.dtype))
        if not diag_free or src_len == 1:
            return torch.softmax(scores, dim=-1)
        return F.pad(torch.softmax(scores[..., :-1], dim=-1), (0, 1))
    visible = causal_visibility(tgt_len, src_len, key_padding_mask, diag_free, scores.device).unsqueeze(1)
    return masked_softmax(scores, visible if hidden is None else visible & ~hidden)


def padding_so_far(prev: Optional[Tensor], current: Optional[Tensor], bsz: int, prev_len: int, tgt_len: int) -> Optional[Tensor]:
    """The padding of all keys (B x S) of a decoding step: the cached padding of the
    ``prev_len`` earlier tokens and that of the ``tgt_len`` new ones; None when
    nothing was ever padded."""
    if prev is None and current is None:
        return None
    device = (prev if prev is not None else current).device
    if prev is None:
        prev = torch.zeros(bsz, prev_len, dtype=torch.bool, device=device)
    if current is None:
        current = torch.zeros(bsz, tgt_len, dtype=torch.bool, device=device)
    return torch.cat([prev.bool(), current.bool()], dim=1)


# ----------------------------------------------------------------- checks ---
def check_self_attention_key(kind: str, query: Tensor, key: Optional[Tensor]):
    """Kinds that are self-attention only: the key (when given) must be the query."""
    if key is not None and key.shape != query.shape:
        raise ValueError(
            f"{kind} is self-attention only: key must be the query, got shapes {tuple(key.shape)} and {tuple(query.shape)}"
        )


# ------------------------------------------------------------ projections ---
def module_projections(module, query: Tensor, key: Tensor, value: Tensor):
    """q, k, v (T x B x C, S x B x C, S x B x C) through a module's q_proj, k_proj
    and v_proj weights, for the module-level naive references."""
    q = F.linear(query, module.q_proj.weight, module.q_proj.bias)
    k = F.linear(key, module.k_proj.weight, module.k_proj.bias)
    v = F.linear(value, module.v_proj.weight, module.v_proj.bias)
    return q, k, v


def module_output(module, heads: Tensor) -> Tensor:
    """The module's output projection of the concatenated heads (T x B x C)."""
    return F.linear(heads, module.out_proj.weight, module.out_proj.bias)
