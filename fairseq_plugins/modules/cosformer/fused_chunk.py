"""Causal cosFormer in fused Triton kernels (the chunk algorithm of ``chunked.py``, one kernel per pass).

Imported only where Triton is (``algorithms.py`` imports it lazily): ``triton`` is an optional dependency.
The kernels are compiled for CUDA, or run on CPU tensors by Triton's interpreter when ``TRITON_INTERPRET=1``
is set before this module is imported (the tests).

Per program (one batch row and head; the forward also splits the value columns), the chunks of C tokens
are walked in order with the state in registers:

    A     = (phi(q) phi(k)^T) * cos(a_i - a_j) * [i >= j]          (eq. 9 inside the chunk)
    num   = A v + (phi(q) cos a) S_cos + (phi(q) sin a) S_sin      (eq. 10 across chunks)
    den   = A 1 + (phi(q) cos a) z_cos + (phi(q) sin a) z_sin
    o     = num / max(den, eps)
    S_cos += (phi(k) cos a)^T v,  z_cos += (phi(k) cos a)^T 1   (sin likewise)

with a = pi/2 p / M the angle of each token's position. phi = ReLU and the zeroing of padded keys happen
on load. State and normaliser are accumulated in float32 (float64 for float64 inputs), whatever the
input dtype. The backward has two kernels: queries in forward order (the states as in the forward),
keys and values in reverse order (the gradient of the state, summed over later chunks).
"""
import logging
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..precision import float32_backward, float32_forward
from .algorithms import FUSED_CHUNK_SIZE

logger = logging.getLogger(__name__)



def interpreted() -> bool:
    """Whether this module's kernels run under Triton's interpreter (CPU tensors)."""
    return not hasattr(_fused_forward_kernel, "run") or type(_fused_forward_kernel).__name__ == "InterpretedFunction"


def _block(n: int, least: int) -> int:
    return max(least, triton.next_power_of_2(n))


@triton.jit
def _load_rows(ptr, s_t, s_f, rows, cols, row_ok, col_ok, ACC: tl.constexpr):
    return tl.load(ptr + rows[:, None] * s_t + cols[None, :] * s_f, mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)


@triton.jit
def load_state(ptr, bh, dim, e_dim, offs_d, offs_e, PRESENT: tl.constexpr, ACC: tl.constexpr, BLOCK_D: tl.constexpr,
               BLOCK_E: tl.constexpr):
    """(S_cos, S_sin, z_cos, z_sin) of row bh of a B,H,2,D,E+1 state (contiguous; the last column the
    normaliser's sums), in ACC; zeros when not PRESENT."""
    if PRESENT:
        row = e_dim + 1
        base = ptr + bh * 2 * dim * row
        d_ok = offs_d < dim
        mask = d_ok[:, None] & (offs_e < e_dim)[None, :]
        at = offs_d[:, None] * row + offs_e[None, :]
        s_cos = tl.load(base + at, mask=mask, other=0.0).to(ACC)
        s_sin = tl.load(base + dim * row + at, mask=mask, other=0.0).to(ACC)
        z_cos = tl.load(base + offs_d * row + e_dim, mask=d_ok, other=0.0).to(ACC)
        z_sin = tl.load(base + dim * row + offs_d * row + e_dim, mask=d_ok, other=0.0).to(ACC)
    else:
        s_cos = tl.zeros((BLOCK_D, BLOCK_E), dtype=ACC)
        s_sin = tl.zeros((BLOCK_D, BLOCK_E), dtype=ACC)
        z_cos = tl.zeros((BLOCK_D,), dtype=ACC)
        z_sin = tl.zeros((BLOCK_D,), dtype=ACC)
    return s_cos, s_sin, z_cos, z_sin


@triton.jit
def store_state(ptr, bh, dim, e_dim, offs_d, offs_e, s_cos, s_sin, z_cos, z_sin, WITH_Z):
    """The inverse of ``load_state`` (the normaliser's column only WITH_Z: once per row)."""
    row = e_dim + 1
    base = ptr + bh * 2 * dim * row
    d_ok = offs_d < dim
    mask = d_ok[:, None] & (offs_e < e_dim)[None, :]
    at = offs_d[:, None] * row + offs_e[None, :]
    tl.store(base + at, s_cos, mask=mask)
    tl.store(base + dim * row + at, s_sin, mask=mask)
    if WITH_Z:
        tl.store(base + offs_d * row + e_dim, z_cos, mask=d_ok)
        tl.store(base + dim * row + offs_d * row + e_dim, z_sin, mask=d_ok)


@triton.jit
def _head_pointers(q_ptr, k_ptr, v_ptr, o_ptr, angle_ptr, pad_ptr, sq_b, sq_h, sk_b, sk_h, sv_b, sv_h, so_b, so_h,
                   bh, heads, length):
    """The pointers of batch row and head bh = b * heads + h (angle and padding: B,T)."""
    b, h = bh // heads, bh % heads
    return (q_ptr + b * sq_b + h * sq_h, k_ptr + b * sk_b + h * sk_h, v_ptr + b * sv_b + h * sv_h,
            o_ptr + b * so_b + h * so_h, angle_ptr + b * length, pad_ptr + b * length)


@triton.jit
def _add_chunk(s_cos, s_sin, z_cos, z_sin, k, v, cos_a, sin_a, PRECISION: tl.constexpr):
    """The state after a chunk: S_cos += (phi(k) cos a)^T v, z_cos += (phi(k) cos a)^T 1 (sin likewise)."""
    k_cos, k_sin = k * cos_a[:, None], k * sin_a[:, None]
    s_cos += tl.dot(tl.trans(k_cos), v, input_precision=PRECISION)
    s_sin += tl.dot(tl.trans(k_sin), v, input_precision=PRECISION)
    return s_cos, s_sin, z_cos + tl.sum(k_cos, axis=0), z_sin + tl.sum(k_sin, axis=0)


@triton.jit
def _chunk_inputs(q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, sq_t, sq_d, sk_t, sk_d, sv_t, sv_e, start, length, offs_c, offs_d,
                  offs_e, dim, e_dim, HAS_PAD: tl.constexpr, ACC: tl.constexpr):
    """One chunk's rows (and which exist), phi(q), phi(k) (padded keys zero), v, the raw q > 0 and k > 0
    masks, the angle a and its cos and sin."""
    rows = start + offs_c
    row_ok = rows < length
    d_ok = offs_d < dim
    q_raw = _load_rows(q_ptr, sq_t, sq_d, rows, offs_d, row_ok, d_ok, ACC)
    k_raw = _load_rows(k_ptr, sk_t, sk_d, rows, offs_d, row_ok, d_ok, ACC)
    v = _load_rows(v_ptr, sv_t, sv_e, rows, offs_e, row_ok, offs_e < e_dim, ACC)
    q_live = q_raw > 0
    k_live = k_raw > 0
    if HAS_PAD:
        keep = tl.load(pad_ptr + rows, mask=row_ok, other=1) == 0
        k_live = k_live & keep[:, None]
    q = tl.where(q_live, q_raw, 0.0)
    k = tl.where(k_live, k_raw, 0.0)
    a = tl.load(angle_ptr + rows, mask=row_ok, other=0.0).to(ACC)
    return rows, row_ok, q, k, v, q_live, k_live, a, tl.cos(a), tl.sin(a)


@triton.jit
def _reweighted_scores(q, k, a, rows, PRECISION: tl.constexpr):
    """(phi(q) phi(k)^T) * cos(a_i - a_j), zero above the diagonal (C x C)."""
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    causal = rows[:, None] >= rows[None, :]
    return tl.where(causal, scores * tl.cos(a[:, None] - a[None, :]), 0.0)


@triton.jit
def _fused_forward_kernel(
    q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, state_ptr, o_ptr, den_ptr, final_ptr,
    sq_b, sq_h, sq_t, sq_d, sk_b, sk_h, sk_t, sk_d, sv_b, sv_h, sv_t, sv_e, so_b, so_h, so_t,
    heads, length, dim, e_dim, eps,
    HAS_PAD: tl.constexpr, HAS_STATE: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    e_block, bh = tl.program_id(0), tl.program_id(1)
    q_ptr, k_ptr, v_ptr, o_ptr, angle_ptr, pad_ptr = _head_pointers(
        q_ptr, k_ptr, v_ptr, o_ptr, angle_ptr, pad_ptr, sq_b, sq_h, sk_b, sk_h, sv_b, sv_h, so_b, so_h, bh, heads, length)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = e_block * BLOCK_E + tl.arange(0, BLOCK_E)
    d_ok, e_ok = offs_d < dim, offs_e < e_dim
    den_ptr += bh * length
    s_cos, s_sin, z_cos, z_sin = load_state(state_ptr, bh, dim, e_dim, offs_d, offs_e, HAS_STATE, ACC, BLOCK_D, BLOCK_E)
    for start in range(0, length, BLOCK_C):
        rows, row_ok, q, k, v, q_live, k_live, a, cos_a, sin_a = _chunk_inputs(
            q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, sq_t, sq_d, sk_t, sk_d, sv_t, sv_e, start, length, offs_c, offs_d,
            offs_e, dim, e_dim, HAS_PAD, ACC)
        q_cos, q_sin = q * cos_a[:, None], q * sin_a[:, None]
        attn = _reweighted_scores(q, k, a, rows, PRECISION)
        num = tl.dot(attn, v, input_precision=PRECISION)
        num += tl.dot(q_cos, s_cos, input_precision=PRECISION) + tl.dot(q_sin, s_sin, input_precision=PRECISION)
        den = tl.sum(attn, axis=1) + tl.sum(q_cos * z_cos[None, :], axis=1) + tl.sum(q_sin * z_sin[None, :], axis=1)
        out = num / tl.maximum(den, eps)[:, None]
        tl.store(o_ptr + rows[:, None] * so_t + offs_e[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & e_ok[None, :])
        if e_block == 0:
            tl.store(den_ptr + rows, den.to(den_ptr.dtype.element_ty), mask=row_ok)
        s_cos, s_sin, z_cos, z_sin = _add_chunk(s_cos, s_sin, z_cos, z_sin, k, v, cos_a, sin_a, PRECISION)
    store_state(final_ptr, bh, dim, e_dim, offs_d, offs_e, s_cos, s_sin, z_cos, z_sin, e_block == 0)


@triton.jit
def _output_gradients(do_ptr, den_ptr, g_den_ptr, so_t, rows, offs_e, row_ok, e_ok, eps, first, ACC: tl.constexpr):
    """Through o = num / max(den, eps): d num = do / max(den, eps) for this program's value columns; d den
    (``denominator_gradient``: a sum over every column) only in the first column block, so that the
    blocks' partial d q and d k add up to it once."""
    do = _load_rows(do_ptr, so_t, 1, rows, offs_e, row_ok, e_ok, ACC)
    den = tl.load(den_ptr + rows, mask=row_ok, other=1.0).to(ACC)
    g_den = tl.where(first, tl.load(g_den_ptr + rows, mask=row_ok, other=0.0).to(ACC), 0.0)
    return do / tl.maximum(den, eps)[:, None], g_den


@triton.jit
def _fused_backward_q_kernel(
    q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, state_ptr, den_ptr, g_den_ptr, do_ptr, dq_ptr,
    sq_b, sq_h, sq_t, sq_d, sk_b, sk_h, sk_t, sk_d, sv_b, sv_h, sv_t, sv_e, so_b, so_h, so_t,
    heads, length, dim, e_dim, eps,
    HAS_PAD: tl.constexpr, HAS_STATE: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    """d q, chunks in forward order: d q = (d A * decay) phi(k) + cos a (d num S_cos^T + d den z_cos^T) + sin a (...),
    d A = d num v^T + d den 1^T, through ReLU. d o is time-major (T, B, H, E) like the output. Each program
    takes one block of value columns and writes its partial d q (block e_block of a n_blocks,B,H,T,D buffer:
    the caller sums them)."""
    e_block, bh = tl.program_id(0), tl.program_id(1)
    first = e_block == 0
    q_ptr, k_ptr, v_ptr, do_ptr, angle_ptr, pad_ptr = _head_pointers(
        q_ptr, k_ptr, v_ptr, do_ptr, angle_ptr, pad_ptr, sq_b, sq_h, sk_b, sk_h, sv_b, sv_h, so_b, so_h, bh, heads, length)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = e_block * BLOCK_E + tl.arange(0, BLOCK_E)
    d_ok, e_ok = offs_d < dim, offs_e < e_dim
    dq_ptr += (e_block * tl.num_programs(1) + bh) * length * dim
    den_ptr += bh * length
    g_den_ptr += bh * length
    s_cos, s_sin, z_cos, z_sin = load_state(state_ptr, bh, dim, e_dim, offs_d, offs_e, HAS_STATE, ACC, BLOCK_D, BLOCK_E)
    for start in range(0, length, BLOCK_C):
        rows, row_ok, q, k, v, q_live, k_live, a, cos_a, sin_a = _chunk_inputs(
            q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, sq_t, sq_d, sk_t, sk_d, sv_t, sv_e, start, length, offs_c, offs_d,
            offs_e, dim, e_dim, HAS_PAD, ACC)
        g_num, g_den = _output_gradients(do_ptr, den_ptr, g_den_ptr, so_t, rows, offs_e, row_ok, e_ok, eps, first, ACC)
        g_attn = tl.dot(g_num, tl.trans(v), input_precision=PRECISION) + g_den[:, None]
        g_attn = tl.where(rows[:, None] >= rows[None, :], g_attn * tl.cos(a[:, None] - a[None, :]), 0.0)
        dq = tl.dot(g_attn, k, input_precision=PRECISION)
        dq += cos_a[:, None] * (tl.dot(g_num, tl.trans(s_cos), input_precision=PRECISION) + g_den[:, None] * z_cos[None, :])
        dq += sin_a[:, None] * (tl.dot(g_num, tl.trans(s_sin), input_precision=PRECISION) + g_den[:, None] * z_sin[None, :])
        dq = tl.where(q_live, dq, 0.0)
        tl.store(dq_ptr + rows[:, None] * dim + offs_d[None, :], dq.to(dq_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])
        s_cos, s_sin, z_cos, z_sin = _add_chunk(s_cos, s_sin, z_cos, z_sin, k, v, cos_a, sin_a, PRECISION)


@triton.jit
def _fused_backward_kv_kernel(
    q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, g_final_ptr, den_ptr, g_den_ptr, do_ptr, dk_ptr, dv_ptr, g_state_ptr,
    sq_b, sq_h, sq_t, sq_d, sk_b, sk_h, sk_t, sk_d, sv_b, sv_h, sv_t, sv_e, so_b, so_h, so_t,
    heads, length, dim, e_dim, eps,
    HAS_PAD: tl.constexpr, HAS_G_FINAL: tl.constexpr, WANT_G_STATE: tl.constexpr, ACC: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    """d k and d v, chunks in reverse order with dS = the gradient of the state after the chunk (the sum
    of [phi(q) cos a]^T d num over later chunks, plus that of the final state):
    d k = (d A * decay)^T phi(q) + cos a (v dS_cos^T + 1 dz_cos^T) + sin a (...), through ReLU and the pads;
    d v = A^T d num + (phi(k) cos a) dS_cos + (phi(k) sin a) dS_sin. Last, dS is the initial state's gradient.
    One block of value columns per program: its d v columns and dS columns exactly, a partial d k (summed
    by the caller); the normaliser's terms (d den, dz) in the first block only."""
    e_block, bh = tl.program_id(0), tl.program_id(1)
    first = e_block == 0
    q_ptr, k_ptr, v_ptr, do_ptr, angle_ptr, pad_ptr = _head_pointers(
        q_ptr, k_ptr, v_ptr, do_ptr, angle_ptr, pad_ptr, sq_b, sq_h, sk_b, sk_h, sv_b, sv_h, so_b, so_h, bh, heads, length)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_e = e_block * BLOCK_E + tl.arange(0, BLOCK_E)
    d_ok, e_ok = offs_d < dim, offs_e < e_dim
    dk_ptr += (e_block * tl.num_programs(1) + bh) * length * dim
    dv_ptr += bh * length * e_dim
    den_ptr += bh * length
    g_den_ptr += bh * length
    ds_cos, ds_sin, dz_cos, dz_sin = load_state(g_final_ptr, bh, dim, e_dim, offs_d, offs_e, HAS_G_FINAL, ACC, BLOCK_D, BLOCK_E)
    dz_cos, dz_sin = tl.where(first, dz_cos, 0.0), tl.where(first, dz_sin, 0.0)
    n_chunks = tl.cdiv(length, BLOCK_C)
    for back in range(0, n_chunks):
        rows, row_ok, q, k, v, q_live, k_live, a, cos_a, sin_a = _chunk_inputs(
            q_ptr, k_ptr, v_ptr, angle_ptr, pad_ptr, sq_t, sq_d, sk_t, sk_d, sv_t, sv_e, (n_chunks - 1 - back) * BLOCK_C,
            length, offs_c, offs_d, offs_e, dim, e_dim, HAS_PAD, ACC)
        g_num, g_den = _output_gradients(do_ptr, den_ptr, g_den_ptr, so_t, rows, offs_e, row_ok, e_ok, eps, first, ACC)
        decay = tl.where(rows[:, None] >= rows[None, :], tl.cos(a[:, None] - a[None, :]), 0.0)
        attn = tl.dot(q, tl.trans(k), input_precision=PRECISION) * decay
        g_attn = (tl.dot(g_num, tl.trans(v), input_precision=PRECISION) + g_den[:, None]) * decay
        dk = tl.dot(tl.trans(g_attn), q, input_precision=PRECISION)
        dk += cos_a[:, None] * (tl.dot(v, tl.trans(ds_cos), input_precision=PRECISION) + dz_cos[None, :])
        dk += sin_a[:, None] * (tl.dot(v, tl.trans(ds_sin), input_precision=PRECISION) + dz_sin[None, :])
        dk = tl.where(k_live, dk, 0.0)
        k_cos, k_sin = k * cos_a[:, None], k * sin_a[:, None]
        dv = tl.dot(tl.trans(attn), g_num, input_precision=PRECISION)
        dv += tl.dot(k_cos, ds_cos, input_precision=PRECISION) + tl.dot(k_sin, ds_sin, input_precision=PRECISION)
        tl.store(dk_ptr + rows[:, None] * dim + offs_d[None, :], dk.to(dk_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])
        tl.store(dv_ptr + rows[:, None] * e_dim + offs_e[None, :], dv.to(dv_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & e_ok[None, :])
        q_cos, q_sin = q * cos_a[:, None], q * sin_a[:, None]
        ds_cos += tl.dot(tl.trans(q_cos), g_num, input_precision=PRECISION)
        ds_sin += tl.dot(tl.trans(q_sin), g_num, input_precision=PRECISION)
        dz_cos += tl.sum(q_cos * g_den[:, None], axis=0)
        dz_sin += tl.sum(q_sin * g_den[:, None], axis=0)
    if WANT_G_STATE:
        store_state(g_state_ptr, bh, dim, e_dim, offs_d, offs_e, ds_cos, ds_sin, dz_cos, dz_sin, first)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 inputs, float32 for every other (bf16, fp16, float32)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _settings(q: Tensor, dim: int, e_dim: int, chunk_size: int):
    acc = accumulation_dtype(q.dtype)
    least = 1 if interpreted() else 16  # tl.dot's smallest tile on a GPU
    chunk = max(least, 1 << (max(1, int(chunk_size)).bit_length() - 1))  # a power of two, at most chunk_size
    # float32 products on tensor cores (TF32) only where torch's own float32 matmuls may use them
    precision = "tf32" if acc == torch.float32 and q.is_cuda and torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return dict(ACC=tl.float64 if acc == torch.float64 else tl.float32, PRECISION=precision, BLOCK_C=chunk,
                BLOCK_D=_block(dim, least), BLOCK_E=_block(e_dim, least)), acc


def _strides(x: Tensor):
    return x.stride(0), x.stride(1), x.stride(2), x.stride(3)


# Value columns per program, at most (the programs of a head split the columns: more programs, and state
# tiles of BLOCK_D x BLOCK_E that fit a GPU's shared memory); ``_fitting`` halves it further where a
# compiled kernel still asks for more shared memory than the device has (head dimension 128 and more).
MAX_BLOCK_E = 64
_FITTING_BLOCK_E = {}  # (kernel, device, other settings) -> the largest BLOCK_E that compiled there


def _fitting(kernel, device: torch.device, meta: dict, launch):
    """``launch(meta)`` with the largest BLOCK_E (at most MAX_BLOCK_E) whose compiled ``kernel`` fits the
    device: Triton refuses a kernel that needs more shared memory than the device has when it loads it
    (before it runs: nothing is written), so halve BLOCK_E and launch again. The choice is remembered."""
    key = (getattr(kernel, "__name__", repr(kernel)), str(device), tuple(sorted((k, str(v)) for k, v in meta.items() if k != "BLOCK_E")))
    least = 1 if interpreted() else 16  # tl.dot's smallest tile on a GPU
    block = min(meta["BLOCK_E"], MAX_BLOCK_E, _FITTING_BLOCK_E.get(key, meta["BLOCK_E"]))
    while True:
        try:
            result = launch({**meta, "BLOCK_E": block})
        except OutOfResources as err:
            if block <= least:
                raise RuntimeError(f"cosFormer's fused kernels do not fit {device}'s shared memory at head dimension "
                                   f"{meta['BLOCK_D']} even with {block} value columns per program ({err}): "
                                   f"use --cosformer-algorithm chunked") from err
            block = max(least, block // 2)
            _FITTING_BLOCK_E[key] = block
            logger.info("cosformer fused kernel %s does not fit %s's shared memory at head dimension %d (%s): "
                        "%d value columns per program from now on", key[0], device, meta["BLOCK_D"], err, block)
            continue
        return result


def denominator_gradient(g_out: Tensor, out: Tensor, den: Tensor, eps: float) -> Tensor:
    """d den = -sum_e (d o / max(den, eps)) o (zero where the denominator was clamped): B*H, T. A sum over
    every value column, so the backward kernels, which split the columns, take it precomputed."""
    bsz, heads, length, _ = out.shape
    summed = (g_out * out).sum(-1).reshape(bsz * heads, length)
    return torch.where(den < eps, torch.zeros_like(summed), -summed / den.clamp_min(eps))


class _FusedCausalCosformer(torch.autograd.Function):
    """The fused kernels as an autograd function. Inputs as ``algorithms.fused_causal``; the angle B,T and
    the key padding B,T (int8, or None). Outputs: o (B,H,T,E, a view of a time-major T,B,H,E buffer in the
    accumulation dtype) and the final state B,H,2,D,E+1. Under autocast both passes run in float32 with
    autocast off (as ``_ChunkedCausalCosformer``)."""

    @staticmethod
    @float32_forward
    def forward(ctx, q, k, v, angle, pad, state, eps, chunk_size):
        bsz, heads, length, dim = q.shape
        e_dim = v.size(-1)
        meta, acc = _settings(q, dim, e_dim, chunk_size)
        o_buf = torch.empty(length, bsz, heads, e_dim, dtype=acc, device=q.device)
        out = o_buf.permute(1, 2, 0, 3)
        den = torch.empty(bsz * heads, length, dtype=acc, device=q.device)
        final = torch.empty(bsz, heads, 2, dim, e_dim + 1, dtype=acc, device=q.device)
        state_in = state.contiguous() if state is not None else None

        def launch(meta):  # the programs of a head split the value columns (the denominator is recomputed per block)
            _fused_forward_kernel[(triton.cdiv(e_dim, meta["BLOCK_E"]), bsz * heads)](
                q, k, v, angle, pad if pad is not None else angle, state_in if state_in is not None else final, out, den,
                final, *_strides(q), *_strides(k), *_strides(v), *_strides(out)[:3],
                heads, length, dim, e_dim, eps,
                HAS_PAD=pad is not None, HAS_STATE=state_in is not None, **meta)

        _fitting(_fused_forward_kernel, q.device, meta, launch)
        ctx.save_for_backward(q, k, v, angle, pad, state_in, out, den)
        ctx.eps, ctx.chunk_size = eps, chunk_size
        ctx.set_materialize_grads(False)
        return out, final

    @staticmethod
    @float32_backward
    @once_differentiable
    def backward(ctx, g_out, g_final):
        q, k, v, angle, pad, state, out, den = ctx.saved_tensors
        bsz, heads, length, dim = q.shape
        e_dim = v.size(-1)
        meta, acc = _settings(q, dim, e_dim, ctx.chunk_size)
        if g_out is None:
            g_out = torch.zeros_like(out)
        # time-major with unit column stride, like the output (the kernels read it with the output's strides)
        g_out = g_out.to(acc).permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
        g_den = denominator_gradient(g_out, out, den, ctx.eps)
        dv = torch.empty(bsz, heads, length, e_dim, dtype=v.dtype, device=v.device)
        want_g_state = state is not None and ctx.needs_input_grad[5]
        g_state = torch.empty_like(state) if want_g_state else None
        g_final = g_final.contiguous() if g_final is not None else None
        pad_arg = pad if pad is not None else angle
        common = (*_strides(q), *_strides(k), *_strides(v), *_strides(g_out)[:3], heads, length, dim, e_dim, ctx.eps)

        def partial_sums(n_blocks, like):  # d q, d k: one partial sum per column block, added here
            if n_blocks == 1:
                return torch.empty(1, bsz, heads, length, dim, dtype=like.dtype, device=like.device)
            return torch.empty(n_blocks, bsz, heads, length, dim, dtype=acc, device=like.device)

        def launch_q(meta):
            n_blocks = triton.cdiv(e_dim, meta["BLOCK_E"])
            dq = partial_sums(n_blocks, q)
            _fused_backward_q_kernel[(n_blocks, bsz * heads)](
                q, k, v, angle, pad_arg, state if state is not None else den, den, g_den, g_out, dq, *common,
                HAS_PAD=pad is not None, HAS_STATE=state is not None, **meta)
            return dq.sum(0).to(q.dtype) if n_blocks > 1 else dq[0]

        def launch_kv(meta):
            n_blocks = triton.cdiv(e_dim, meta["BLOCK_E"])
            dk = partial_sums(n_blocks, k)
            _fused_backward_kv_kernel[(n_blocks, bsz * heads)](
                q, k, v, angle, pad_arg, g_final if g_final is not None else den, den, g_den, g_out, dk, dv,
                g_state if g_state is not None else den, *common,
                HAS_PAD=pad is not None, HAS_G_FINAL=g_final is not None, WANT_G_STATE=want_g_state, **meta)
            return dk.sum(0).to(k.dtype) if n_blocks > 1 else dk[0]

        dq = _fitting(_fused_backward_q_kernel, q.device, meta, launch_q)
        dk = _fitting(_fused_backward_kv_kernel, q.device, meta, launch_kv)
        return dq, dk, dv, None, None, g_state, None, None


def fused_chunk_causal(q: Tensor, k: Tensor, v: Tensor, initial_state: Optional[Tensor], angle: Tensor, eps: float,
                       key_padding_mask: Optional[Tensor], chunk_size: int = FUSED_CHUNK_SIZE) -> Tuple[Tensor, Tensor]:
    """See ``algorithms.fused_causal`` (this is its implementation)."""
    bsz, _, length, _ = q.shape
    angle = angle.reshape(bsz, length).contiguous()
    pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
    return _FusedCausalCosformer.apply(q, k, v, angle, pad, initial_state, float(eps), chunk_size)

