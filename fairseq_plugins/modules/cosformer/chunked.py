"""Causal cosFormer in chunks (training, and the prompt of a decoding pass):
inside chunks of C tokens the exact quadratic form of eq. 9, across chunks the
recurrent state of eq. 10; ``_ChunkedCausalCosformer`` is the autograd function
with its hand-written backward."""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..precision import float32_backward, float32_forward
from .recurrent import causal_step

# Chunk length of the causal form, chosen by benchmarks/attention_speed.py on a
# 2-core CPU (see docs/records/benchmarks.md); any value gives the same result.
DEFAULT_CHUNK_SIZE = 64


def _causal_decay(chunk: int, horizon: int, dtype, device) -> Tensor:
    """The C x C intra-chunk re-weighting cos(pi/2 (i - j)/M) for i >= j, zero above the diagonal."""
    idx = torch.arange(chunk, device=device)
    rel = (idx.unsqueeze(1) - idx.unsqueeze(0)).to(dtype)
    return torch.cos(rel * (math.pi / 2 / horizon)).masked_fill_(rel < 0, 0.0)


# The causal form runs over segments of whole chunks whose (B*H, tokens, D) slices hold about this many
# bytes: temporaries stay small whatever T is, and the backward recomputes a segment's internals from
# the state saved at its start instead of keeping them all.
SEGMENT_BYTES = 2 << 20


def _to_chunks(x: Tensor, n_chunks: int, chunk: int, relu: bool = False, pad: Optional[Tensor] = None) -> Tensor:
    """B,H,L,F (any strides, L <= n*C) -> contiguous n,B,H,C,F (chunk index outermost), zero-padded at
    the end; with relu, ReLU(x) (in the same pass), and with pad (B,L bool), zero at the pads."""
    bsz, heads, length, feat = x.shape
    full = length // chunk
    out = x.new_empty(n_chunks, bsz, heads, chunk, feat)
    if full < n_chunks:
        out[full:].zero_()
    parts = []
    if full > 0:
        parts.append((out[:full], x[:, :, : full * chunk].reshape(bsz, heads, full, chunk, feat).permute(2, 0, 1, 3, 4)))
    if length > full * chunk:
        parts.append((out[full, :, :, : length - full * chunk], x[:, :, full * chunk :]))
    for dst, src in parts:
        if relu:
            torch.clamp_min(src, 0.0, out=dst)
        else:
            dst.copy_(src)
    if pad is not None:
        keep = torch.zeros(bsz, n_chunks * chunk, dtype=torch.bool, device=x.device)
        keep[:, :length] = ~pad.bool()
        out.mul_(keep.view(bsz, n_chunks, chunk).transpose(0, 1)[:, :, None, :, None])
    return out


def _chunk_view(buf: Tensor, start: int, stop: int, chunk: int) -> Tensor:
    """Rows start:stop of a time-major (T',B,H,F) buffer as an n,B,H,C,F view."""
    _, bsz, heads, feat = buf.shape
    return buf[start:stop].view((stop - start) // chunk, chunk, bsz, heads, feat).permute(0, 2, 3, 1, 4)


def _running_sum(states: Tensor, reverse: bool = False) -> Tensor:
    """Prefix sums (suffix sums with reverse) over dim 1 of (2, n+1, ...) states, as one product with a
    triangular matrix of ones: as fast as a loop of in-place adds for segment-sized n and one parallel
    region instead of n; ``cumsum`` over that dimension is several times slower."""
    n1 = states.size(1)
    if n1 == 1:
        return states
    tri = torch.ones(n1, n1, dtype=states.dtype, device=states.device).tril_()
    flat = states.reshape(states.size(0), n1, -1)
    return torch.matmul(tri.t() if reverse else tri, flat).view(states.shape)


class _Segment:
    """Chunked inputs and per-chunk states of tokens [start, stop) (whole chunks; past T: zero padding).

    Tensors are chunked as n,B,H,C,F (chunk index outermost): each per-chunk product is one batched
    matrix product over all chunks and heads. The states of a segment form (2, n+1, B*H, D, E) tensors
    (cos part, sin part) whose slot i, after a running sum, is the state before chunk i
    (slot 0: the incoming state, slot n: the outgoing one); the denominator sums are kept apart so that
    every large product is D x D x C.
    """

    def __init__(self, q, k, v, u, cosc, sinc, start, stop, chunk, raw=False, k_pad=None):
        """q, k, v: B,H,T,*; cosc, sinc: the angles' cos and sin chunked as n_all,B,1,C,1."""
        bsz, heads, _, dim = q.shape
        self.n = n = (stop - start) // chunk
        self.shape = (n, bsz, heads, chunk)
        self.bh, self.chunk, self.dim, self.e_dim = bsz * heads, chunk, dim, v.size(-1)
        self.g = n * bsz * heads
        sl = slice(start, stop)
        self.qc = _to_chunks(q[:, :, sl], n, chunk, relu=raw)
        self.kc = _to_chunks(k[:, :, sl], n, chunk, relu=raw, pad=k_pad[:, sl] if k_pad is not None else None)
        self.vc = _to_chunks(v[:, :, sl], n, chunk)
        self.cosc = cosc[start // chunk : stop // chunk]
        self.sinc = sinc[start // chunk : stop // chunk]
        self.uc = None if u is None else _to_chunks(u.expand(bsz, heads, -1, 1)[:, :, sl], n, chunk).view(self.g, chunk, 1)

    def mats(self):
        g, c = self.g, self.chunk
        return self.qc.view(g, c, self.dim), self.kc.view(g, c, self.dim), self.vc.view(g, c, self.e_dim)

    def attention(self, decay):
        q3, k3, _ = self.mats()
        return torch.bmm(q3, k3.transpose(1, 2)).mul_(decay)  # g,C,C

    def states(self, state):
        """[k cos, k sin] (2,g,C,D) and the running states s_v (2,n+1,BH,D,E), s_z (2,n+1,BH,D,1)."""
        n, bh, g, c, dim, e_dim = self.n, self.bh, self.g, self.chunk, self.dim, self.e_dim
        _, _, v3 = self.mats()
        kf = self.kc.new_empty(2, *self.shape, dim)
        torch.mul(self.kc, self.cosc, out=kf[0])
        torch.mul(self.kc, self.sinc, out=kf[1])
        kf = kf.view(2, g, c, dim)
        s_v = v3.new_empty(2, n + 1, bh, dim, e_dim)
        s_z = v3.new_empty(2, n + 1, bh, dim, 1)
        for part in range(2):
            torch.bmm(kf[part].transpose(1, 2), v3, out=s_v[part, 1:].view(g, dim, e_dim))
            if self.uc is None:
                torch.sum(kf[part].view(n, bh, c, dim), dim=2, out=s_z[part, 1:].view(n, bh, dim))
            else:
                torch.bmm(kf[part].transpose(1, 2), self.uc, out=s_z[part, 1:].view(g, dim, 1))
        if state is None:
            s_v[:, 0].zero_()
            s_z[:, 0].zero_()
        else:
            s_v[:, 0].copy_(state[0])
            s_z[:, 0].copy_(state[1])
        return kf, _running_sum(s_v), _running_sum(s_z)

    def forward(self, decay, state, eps, y_out, den_out):
        """Write y = num / max(den, eps) into y_out (n,B,H,C,E view) and max(den, eps) into den_out (g,C,1);
        return (den < eps mask, outgoing state)."""
        n, bh, c, dim, e_dim = self.n, self.bh, self.chunk, self.dim, self.e_dim
        _, _, v3 = self.mats()
        attn = self.attention(decay)
        num = torch.bmm(attn, v3)  # g,C,E
        if self.uc is None:
            torch.sum(attn, dim=-1, keepdim=True, out=den_out)
        else:
            torch.bmm(attn, self.uc, out=den_out)
        del attn
        kf, s_v, s_z = self.states(state)
        del kf
        lo = 0 if state is not None else 1  # chunk 0 reads nothing without an incoming state
        if lo < n:
            m = (n - lo) * bh
            num_r = num.view(n, bh, c, e_dim)[lo:].view(m, c, e_dim)
            den_r = den_out.view(n, bh, c, 1)[lo:].view(m, c, 1)
            for part, ang in enumerate((self.cosc, self.sinc)):
                qf = (self.qc[lo:] * ang[lo:]).view(m, c, dim)
                num_r.baddbmm_(qf, s_v[part, lo:n].view(m, dim, e_dim))
                den_r.baddbmm_(qf, s_z[part, lo:n].view(m, dim, 1))
                del qf
        clamped = den_out < eps
        den_out.clamp_min_(eps)
        torch.div(num.view(*self.shape, e_dim), den_out.view(*self.shape, 1), out=y_out)
        return clamped, (s_v[:, n].clone(), s_z[:, n].clone())

    def backward(self, decay, state, gy, y, den, clamped, g_state, gq_out, gk_out, gv_out, gu_out, relu_mask=False):
        """Gradients of the segment: write those of q, k, v (and u) into the given n,B,H,C,F views and
        return that of the incoming state. gy, y: n,B,H,C,E views; den, clamped: g,C,1; g_state: gradient
        of the outgoing state (or None); relu_mask: q and k were ReLU-ed here (zero their gradients where
        the chunked q, k are zero)."""
        n, bh, g, c, dim, e_dim = self.n, self.bh, self.g, self.chunk, self.dim, self.e_dim
        q3, k3, v3 = self.mats()

        # Through y = num / max(den, eps).
        gnum = v3.new_empty(*self.shape, e_dim)
        torch.div(gy, den.view(*self.shape, 1), out=gnum)
        gden = (gnum * y).sum(dim=-1, keepdim=True).neg_().view(g, c, 1).masked_fill_(clamped, 0.0)
        gn3 = gnum.view(g, c, e_dim)

        # Intra-chunk: d attn = (gnum v^T + gden u^T) * decay.
        attn = self.attention(decay)
        gv = torch.bmm(attn.transpose(1, 2), gn3)
        gu = torch.bmm(attn.transpose(1, 2), gden) if gu_out is not None else None
        del attn
        bias = gden if self.uc is None else gden * self.uc.view(g, 1, c)
        gattn = torch.baddbmm(bias, gn3, v3.transpose(1, 2)).mul_(decay)
        del bias
        gq = torch.bmm(gattn, k3)
        gk = torch.bmm(gattn.transpose(1, 2), q3)
        del gattn

        # Inter-chunk, queries: d q += cos (gnum S_cos^T + gden z_cos^T) + sin (...) with the states before
        # each chunk; those states get [q cos; q sin]^T [gnum, gden] (slot i: before chunk i), written
        # over the states once they have been read.
        kf, s_v, s_z = self.states(state)
        g_sv, g_sz = s_v, torch.empty_like(s_z)
        lo = 0 if state is not None else 1
        if lo < n:
            m = (n - lo) * bh
            gq_r = gq.view(n, bh, c, dim)[lo:].view(m, c, dim)
            q_r = q3.view(n, bh, c, dim)[lo:].view(m, c, dim)
            # Denominator part, cos and sin at once: [gden cos, gden sin] (C x 2) [z_cos, z_sin]^T (2 x D).
            gd2 = (gden.view(*self.shape, 1)[lo:] * torch.cat([self.cosc[lo:], self.sinc[lo:]], dim=-1)).view(m, c, 2)
            gq_r.baddbmm_(gd2, s_z[:, lo:n].permute(1, 2, 0, 3, 4).reshape(m, 2, dim))
            g_sz[:, lo:n].copy_(torch.bmm(q_r.transpose(1, 2), gd2).view(n - lo, bh, dim, 2).permute(3, 0, 1, 2).unsqueeze(-1))
            del gd2
            for part, ang in enumerate((self.cosc, self.sinc)):
                gnf = (gnum[lo:] * ang[lo:]).view(m, c, e_dim)
                gq_r.baddbmm_(gnf, s_v[part, lo:n].view(m, dim, e_dim).transpose(1, 2))
                torch.bmm(q_r.transpose(1, 2), gnf, out=g_sv[part, lo:n].view(m, dim, e_dim))
                del gnf
        del s_z, gnum
        if relu_mask:  # through phi = ReLU: zero where the chunked q is zero
            torch.ops.aten.threshold_backward.grad_input(gq.view(*self.shape, dim), self.qc, 0, grad_input=gq_out)
        else:
            gq_out.copy_(gq.view(*self.shape, dim))
        del gq
        # Running sums backwards: slot i+1 becomes the gradient of chunk i's own sums, slot 0 that of the
        # incoming state.
        if lo > 0:
            g_sv[:, 0].zero_()
            g_sz[:, 0].zero_()
        if g_state is not None:
            g_sv[:, n].copy_(g_state[0])
            g_sz[:, n].copy_(g_state[1])
        else:
            g_sv[:, n].zero_()
            g_sz[:, n].zero_()
        g_sv, g_sz = _running_sum(g_sv, reverse=True), _running_sum(g_sz, reverse=True)
        g_in = (g_sv[:, 0].clone(), g_sz[:, 0].clone()) if state is not None else None

        # Keys and values: d k += cos (v dS_cos^T + u dz_cos^T) + sin (...); d v += k cos dS_cos + k sin dS_sin.
        cs = torch.cat([self.cosc, self.sinc], dim=-1)
        u2 = (self.uc.view(*self.shape, 1) * cs if self.uc is not None else cs.expand(*self.shape, 2)).reshape(g, c, 2)
        gk.baddbmm_(u2, g_sz[:, 1:].permute(1, 2, 0, 4, 3).reshape(g, 2, dim))
        del cs, u2
        for part, ang in enumerate((self.cosc, self.sinc)):
            gsv3 = g_sv[part, 1:].view(g, dim, e_dim)
            vf = (self.vc * ang).view(g, c, e_dim)
            gk.baddbmm_(vf, gsv3.transpose(1, 2))
            del vf
            gv.baddbmm_(kf[part], gsv3)
            if gu is not None:
                gu.baddbmm_(kf[part], g_sz[part, 1:].view(g, dim, 1))
        if relu_mask:  # through ReLU and the zeroed pads: zero where the chunked k is zero
            torch.ops.aten.threshold_backward.grad_input(gk.view(*self.shape, dim), self.kc, 0, grad_input=gk_out)
        else:
            gk_out.copy_(gk.view(*self.shape, dim))
        gv_out.copy_(gv.view(*self.shape, e_dim))
        if gu is not None:
            gu_out.copy_(gu.view(*self.shape, 1))
        return g_in


def _split_state(state: Optional[Tensor], bh: int, dim: int, e_dim: int):
    """B,H,2,D,E+1 -> (values (2,BH,D,E), denominator sums (2,BH,D,1)), or None."""
    if state is None:
        return None
    state = state.reshape(bh, 2, dim, e_dim + 1).transpose(0, 1)
    return state[..., :e_dim], state[..., e_dim:]


def _join_state(parts, bsz: int, heads: int) -> Tensor:
    """Inverse of ``_split_state``."""
    sv, sz = parts
    return torch.cat([sv, sz], dim=-1).transpose(0, 1).reshape(bsz, heads, 2, sv.size(-2), sv.size(-1) + 1)


class _ChunkedCausalCosformer(torch.autograd.Function):
    """Causal cosFormer over chunks of C tokens, with a hand-written backward.

    Inputs: q, k, v: B,H,T,D (any strides; q, k after phi, padded keys zero, unless ``raw``); u:
    B,H,T,1 (or B,1,T,1) weights of the denominator, None for all ones; cos, sin: B,1,T,1 of the
    angles; decay: C x C; state: B,H,2,D,E+1 or None, the sums sum_j [k_j cos_j; k_j sin_j] [v_j, u_j]^T
    over earlier tokens. Returns the output B,H,T,E (a view of a time-major T,B,H,E buffer, the layout
    of fairseq's activations) and the new state.

    raw: q and k are the raw projections; phi = ReLU (and the zeroing of the pads in k_pad, B x T) is
    applied here, fused with the chunking copies. own: nothing but this function uses q, k, v (the
    module's case), so the backward overwrites them with their gradients.

    Inside a chunk the re-weighting is the shared C x C matrix ``decay``; across chunks each query
    reads the state of all earlier chunks through [q cos; q sin]. Work is done in segments of whole
    chunks (see ``_Segment``); the backward walks the segments in reverse, recomputing each one's
    internals from the state saved at its start, so that only q, k, v, u, the output, the clamped
    denominator and one state per segment are kept: memory O(T D) per head plus one segment's
    temporaries, no T x D x D tensor. The backward is not itself differentiable.

    Under autocast both passes run in float32 with autocast off (floating-point inputs cast to float32):
    the running states sum over all earlier tokens, which overflows float16 and keeps too few digits in
    bfloat16 (and autocast would hand the in-place products here operands of mixed dtypes).
    """

    @staticmethod
    @float32_forward
    def forward(ctx, q, k, v, u, cos, sin, decay, state, eps, chunk, k_pad=None, raw=False, own=False):
        bsz, heads, length, dim = q.shape
        e_dim = v.size(-1)
        bh = bsz * heads
        n = (length + chunk - 1) // chunk
        per_chunk = bh * chunk * max(dim, e_dim) * q.element_size()
        seg = max(1, SEGMENT_BYTES // per_chunk) * chunk
        bounds = [(s, min(s + seg, n * chunk)) for s in range(0, n * chunk, seg)]
        y_buf = v.new_empty(n * chunk, bsz, heads, e_dim)
        den = v.new_empty(n * bh * chunk, 1)
        clamped = torch.empty(n * bh * chunk, 1, dtype=torch.bool, device=v.device)
        st = _split_state(state, bh, dim, e_dim)
        cosc, sinc = _to_chunks(cos, n, chunk), _to_chunks(sin, n, chunk)
        starts = []
        for s0, s1 in bounds:
            starts.append(st)
            part = _Segment(q, k, v, u, cosc, sinc, s0, s1, chunk, raw, k_pad)
            r0, r1 = s0 * bh, s1 * bh
            cl, st = part.forward(decay, st, eps, _chunk_view(y_buf, s0, s1, chunk), den[r0:r1].view(part.g, chunk, 1))
            clamped[r0:r1] = cl.view(-1, 1)
            del part
        ctx.save_for_backward(q, k, v, u, cos, sin, decay, den, clamped, y_buf, k_pad)
        ctx.starts, ctx.bounds, ctx.has_state, ctx.chunk, ctx.length = starts, bounds, state is not None, chunk, length
        ctx.raw, ctx.own = raw, own
        ctx.set_materialize_grads(False)
        return y_buf.permute(1, 2, 0, 3)[:, :, :length], _join_state(st, bsz, heads)

    @staticmethod
    @float32_backward
    @once_differentiable
    def backward(ctx, gy, g_final):
        if ctx.own:
            if getattr(ctx, "consumed", False):
                raise RuntimeError(
                    "cosformer's causal attention overwrites its saved inputs with their gradients: its graph "
                    "cannot be backpropagated twice (retain_graph=True)"
                )
            ctx.consumed = True
        q, k, v, u, cos, sin, decay, den, clamped, y_buf, k_pad = ctx.saved_tensors
        bsz, heads, length, dim = q.shape
        e_dim, bh, chunk = v.size(-1), bsz * heads, ctx.chunk
        padded = ctx.bounds[-1][1]
        if gy is None:
            gy = v.new_zeros(bsz, heads, length, e_dim)
        if padded != length:
            gy = torch.cat([gy, gy.new_zeros(bsz, heads, padded - length, e_dim)], dim=2)
        need_u = u is not None and ctx.needs_input_grad[3]
        # Segments are walked in reverse and each reads only its own rows of q, k and v: when they are
        # ours, their gradients overwrite them row block by row block.
        grads = []
        for x in (q, k, v):
            tm = x.permute(2, 0, 1, 3)
            grads.append(tm if ctx.own and padded == length and tm.is_contiguous() else x.new_empty(padded, bsz, heads, x.size(-1)))
        gu = v.new_empty(padded, bsz, heads, 1) if need_u else None
        g_st = _split_state(g_final, bh, dim, e_dim) if g_final is not None else None
        n = padded // chunk
        cosc, sinc = _to_chunks(cos, n, chunk), _to_chunks(sin, n, chunk)
        for (s0, s1), st in zip(reversed(ctx.bounds), reversed(ctx.starts)):
            part = _Segment(q, k, v, u, cosc, sinc, s0, s1, chunk, ctx.raw, k_pad)
            r0, r1 = s0 * bh, s1 * bh
            g_st = part.backward(
                decay,
                st,
                gy[:, :, s0:s1].reshape(bsz, heads, part.n, chunk, e_dim).permute(2, 0, 1, 3, 4),
                _chunk_view(y_buf, s0, s1, chunk),
                den[r0:r1].view(part.g, chunk, 1),
                clamped[r0:r1].view(part.g, chunk, 1),
                g_st,
                *[_chunk_view(gr, s0, s1, chunk) for gr in grads],
                _chunk_view(gu, s0, s1, chunk) if need_u else None,
                relu_mask=ctx.raw,
            )
            del part
        gq, gk, gv = [gr.permute(1, 2, 0, 3)[:, :, :length] for gr in grads]
        if need_u:
            gu = gu.permute(1, 2, 0, 3)[:, :, :length]
        gstate = _join_state(g_st, bsz, heads) if ctx.has_state and g_st is not None else None
        return gq, gk, gv, gu, None, None, None, gstate, None, None, None, None, None


def _causal_chunked(q, k, v, u, angle, horizon, eps, state, chunk_size, k_pad=None, raw=False, own=False):
    """Causal cosFormer of q, k, v (B,H,T,*) with denominator weights u (B,H|1,T,1; None: ones) and a
    state B,H,2,D,E+1 (last column: the denominator sums). Returns (B,H,T,E output, new state).
    raw, own, k_pad: see ``_ChunkedCausalCosformer``."""
    cos_a, sin_a = torch.cos(angle), torch.sin(angle)
    if q.size(2) == 1:
        if raw:
            q, k = F.relu(q), F.relu(k)
            if k_pad is not None:
                k = k.masked_fill(k_pad.bool()[:, None, :, None], 0.0)
        return causal_step(q, k, v, u, cos_a, sin_a, eps, state)
    chunk = max(1, min(chunk_size, q.size(2)))
    decay = _causal_decay(chunk, horizon, q.dtype, q.device)
    return _ChunkedCausalCosformer.apply(q, k, v, u, cos_a, sin_a, decay, state, eps, chunk, k_pad, raw, own)


def cosformer_causal(
    q: Tensor,
    k: Tensor,
    v1: Tensor,
    angle: Tensor,
    horizon: int,
    eps: float,
    state: Optional[Tensor] = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Tuple[Tensor, Tensor]:
    """Causal cosFormer in chunks.

    q, k: B,H,T,D (after phi, padded keys zero); v1: B,H,T,E (values plus a
    ones column that gives the denominator); angle: B,1,T,1 = pi/2 * pos / M;
    state: B,H,2,D,E running sums [sum_j k_j^cos v1_j^T, sum_j k_j^sin v1_j^T]
    over earlier tokens (None: empty). Returns (B,H,T,E-1 output, new state).

    Inside a chunk, cos(pi/2 (i - j)/M) depends only on i - j, which for real
    tokens of one sequence equals the chunk-local index difference, so one
    C x C matrix serves every chunk and no doubled feature dimension is needed.
    Across chunks, queries read the sums over all earlier chunks through
    [q cos; q sin]. Memory is O(T (D + C)) per head: no T x D x D tensor is
    formed. See ``_ChunkedCausalCosformer``.
    """
    return _causal_chunked(q, k, v1[..., :-1], v1[..., -1:], angle, horizon, eps, state, chunk_size)
