"""Causal cosFormer token by token in one fused Triton kernel (decoding): per batch row and head, the
state update and the output of each new token without leaving registers. Imported lazily, like
``fused_chunk.py`` (Triton is optional; ``TRITON_INTERPRET=1`` runs it on CPU tensors).

For each token t:  S_cos += (phi(k_t) cos a_t) [v_t, 1]^T  (sin likewise),
                   [num, den] = (phi(q_t) cos a_t) S_cos + (phi(q_t) sin a_t) S_sin,  o_t = num / max(den, eps).
The state is read and written B,H,2,D,E+1 in float32 (float64 for float64 inputs); the incoming state is
left as it is (beam search may share it). Inference only: no backward (``algorithms`` falls back to
the torch recurrence when gradients are needed).
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .fused_chunk import _block, accumulation_dtype, interpreted, load_state, store_state


@triton.jit
def _fused_recurrent_kernel(
    q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, state_ptr, o_ptr, final_ptr,
    sq_b, sq_h, sq_t, sq_d, sk_b, sk_h, sk_t, sk_d, sv_b, sv_h, sv_t, sv_e, so_b, so_h, so_t,
    heads, length, dim, e_dim, eps,
    HAS_PAD: tl.constexpr, HAS_STATE: tl.constexpr, ACC: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    bh = tl.program_id(0)
    b, h = bh // heads, bh % heads
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = tl.arange(0, BLOCK_E)
    d_ok, e_ok = offs_d < dim, offs_e < e_dim
    s_cos, s_sin, z_cos, z_sin = load_state(state_ptr, bh, dim, e_dim, offs_d, offs_e, HAS_STATE, ACC, BLOCK_D, BLOCK_E)
    for t in range(0, length):
        q = tl.load(q_ptr + b * sq_b + h * sq_h + t * sq_t + offs_d * sq_d, mask=d_ok, other=0.0).to(ACC)
        k = tl.load(k_ptr + b * sk_b + h * sk_h + t * sk_t + offs_d * sk_d, mask=d_ok, other=0.0).to(ACC)
        v = tl.load(v_ptr + b * sv_b + h * sv_h + t * sv_t + offs_e * sv_e, mask=e_ok, other=0.0).to(ACC)
        q = tl.maximum(q, 0.0)  # phi = ReLU (eq. 6)
        k = tl.maximum(k, 0.0)
        if HAS_PAD:
            k = k * (tl.load(pad_ptr + b * length + t) == 0).to(ACC)
        a = tl.load(angle_ptr + b * length + t).to(ACC)
        cos_a, sin_a = tl.cos(a), tl.sin(a)
        k_cos, k_sin = k * cos_a, k * sin_a
        s_cos += k_cos[:, None] * v[None, :]
        s_sin += k_sin[:, None] * v[None, :]
        z_cos += k_cos
        z_sin += k_sin
        q_cos, q_sin = q * cos_a, q * sin_a
        num = tl.sum(q_cos[:, None] * s_cos, axis=0) + tl.sum(q_sin[:, None] * s_sin, axis=0)
        den = tl.sum(q_cos * z_cos, axis=0) + tl.sum(q_sin * z_sin, axis=0)
        out = num / tl.maximum(den, eps)
        tl.store(o_ptr + b * so_b + h * so_h + t * so_t + offs_e, out.to(o_ptr.dtype.element_ty), mask=e_ok)
    store_state(final_ptr, bh, dim, e_dim, offs_d, offs_e, s_cos, s_sin, z_cos, z_sin, True)

def fused_recurrent_causal(q: Tensor, k: Tensor, v: Tensor, initial_state: Optional[Tensor], angle: Tensor, eps: float,
                           key_padding_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """See ``algorithms.fused_recurrent`` (this is its implementation)."""
    bsz, heads, length, dim = q.shape
    e_dim = v.size(-1)
    acc = accumulation_dtype(q.dtype)
    least = 1 if interpreted() else 16
    angle = angle.reshape(bsz, length).contiguous()
    pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
    state = initial_state.contiguous() if initial_state is not None else None
    o_buf = torch.empty(length, bsz, heads, e_dim, dtype=acc, device=q.device)  # time-major, as the module's output
    out = o_buf.permute(1, 2, 0, 3)
    final = torch.empty(bsz, heads, 2, dim, e_dim + 1, dtype=acc, device=q.device)
    _fused_recurrent_kernel[(bsz * heads,)](
        q, k, v, angle, pad if pad is not None else angle, state if state is not None else final, out, final,
        *q.stride(), *k.stride(), *v.stride(), *out.stride()[:3],
        heads, length, dim, e_dim, float(eps),
        HAS_PAD=pad is not None, HAS_STATE=state is not None, ACC=tl.float64 if acc == torch.float64 else tl.float32,
        BLOCK_D=_block(dim, least), BLOCK_E=_block(e_dim, least))
    return out, final
