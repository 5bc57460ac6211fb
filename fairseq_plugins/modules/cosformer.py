"""``cosformer``: linear attention with cosine re-weighting (Qin et al. 2022,
"cosFormer: Rethinking Softmax in Attention", ICLR).

With phi = ReLU (eq. 6) and the re-weighting cos(pi/2 * (i - j) / M) (eq. 8),

    O_i = sum_j phi(q_i) phi(k_j)^T cos(pi/2 (i-j)/M) v_j
          / sum_j phi(q_i) phi(k_j)^T cos(pi/2 (i-j)/M)                     (eq. 9)

and by cos(a - b) = cos a cos b + sin a sin b (eq. 10) the sums factor into
"cos" and "sin" feature maps, so that sum_j k_j^cos v_j^T etc. are shared by all
queries: O(N d^2) instead of O(N^2 d).

Where this implementation departs from the authors' public ``cosformer.py``
(the causes of the "repeater" decoders in the mixed-attention paper):

* key padding is removed from both sums (padded keys are zeroed);
* positions i, j count real tokens of each sequence from its first real token,
  so left-padding does not shift the re-weighting;
* M depends on the placement, never on the padded tensor length:
  encoder self-attention uses each sequence's own length (the paper's M = N);
  causal self-attention and encoder-decoder attention use a fixed horizon
  (``--cosformer-max-positions``), so teacher-forced training and step-by-step
  decoding compute the same function; a sequence longer than the horizon is an
  error (past it, cos(...) turns negative and the normaliser can vanish);
* causal training is chunked: inside chunks of C tokens the exact quadratic
  form, across chunks a recurrent d x d state. Memory is O(T d) per head, not
  the reference's O(T d^2) cumulative sum;
* decoding keeps only the running sums (constant size per head) and a position
  counter, so the cost per generated token does not grow with the prefix;
* the denominator is clamped at ``eps``.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .precision import autocast_off, float32_backward, float32_forward, without_autocast
from .costs import AttentionCosts, projection_macs, projection_parameters
from .registry import (
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    PLACEMENTS,
    BaseAttention,
    register_attention,
)

DEFAULT_EPS = 1e-6
# Chunk length of the causal form, chosen by benchmarks/attention_speed.py on a
# 2-core CPU (see docs/benchmarks.md); any value gives the same result.
DEFAULT_CHUNK_SIZE = 64


def horizon_for(placement: str, cfg) -> Optional[int]:
    """The fixed M of causal and encoder-decoder attention (None: per sequence)."""
    if placement == ENCODER_SELF:
        return None
    explicit = getattr(cfg, "cosformer_max_positions", None) if cfg is not None else None
    if explicit is not None:
        if int(explicit) < 1:
            raise ValueError(f"--cosformer-max-positions must be >= 1, got {explicit}")
        return int(explicit)
    tgt = getattr(cfg, "max_target_positions", None) if cfg is not None else None
    src = getattr(cfg, "max_source_positions", None) if cfg is not None else None
    if placement == DECODER_SELF:
        candidates = [tgt]
    else:
        candidates = [tgt, src]
    candidates = [int(c) for c in candidates if c is not None]
    if not candidates:
        raise ValueError(
            "cosformer needs a horizon M for causal and encoder-decoder attention: "
            "set --cosformer-max-positions (or --max-target-positions)"
        )
    return max(candidates)


def sequence_positions(key_padding_mask: Optional[Tensor], bsz: int, length: int, device, offset: Optional[Tensor] = None) -> Tensor:
    """Position of every token counted from its sequence's first real token (B x T, long).

    Pads get the position of the next real token (or the last one); they are
    masked out of every sum, so their value never matters.
    """
    if key_padding_mask is None:
        pos = torch.arange(length, device=device).unsqueeze(0).expand(bsz, length)
    else:
        real = ~key_padding_mask.bool()
        pos = (real.long().cumsum(dim=1) - real.long()).clamp_min(0)
    if offset is not None:
        pos = pos + offset.unsqueeze(1)
    return pos


def copy_positions(key_padding_mask: Optional[Tensor], bsz: int, length: int, copies: int, device) -> Tensor:
    """``sequence_positions`` of keys that are ``copies`` concatenated copies of one source (B x length,
    length = copies * S): counted within each copy, so every copy has the positions 0..S-1 of the source."""
    if copies == 1:
        return sequence_positions(key_padding_mask, bsz, length, device)
    if length % copies:
        raise ValueError(f"cosformer encoder-decoder attention got {length} keys, not {copies} copies of one source")
    src_len = length // copies
    mask = None if key_padding_mask is None else key_padding_mask.reshape(bsz * copies, src_len)
    return sequence_positions(mask, bsz * copies, src_len, device).reshape(bsz, length)


def _check_contiguous(key_padding_mask: Tensor):
    """The causal chunked form needs each sequence's real tokens in one block
    (fairseq's left or right padding)."""
    real = ~key_padding_mask.bool()
    starts = real & ~F.pad(real[:, :-1], (1, 0), value=False)
    if bool((starts.sum(dim=1) > 1).any()):
        raise ValueError(
            "cosformer causal attention needs padding only at the start or the end of each sequence "
            "(fairseq's left/right padding); got padding between real tokens"
        )


def _length_error(length: int, horizon: int, placement: str) -> ValueError:
    return ValueError(
        f"cosformer {placement} attention got a sequence position {length - 1} >= its horizon M = {horizon}: "
        f"raise --cosformer-max-positions (or --max-target-positions / --max-source-positions) to at least {length}"
    )


@without_autocast
def cosformer_bidirectional(q: Tensor, k: Tensor, v1: Tensor, q_angle: Tensor, k_angle: Tensor, eps: float) -> Tensor:
    """Non-causal cosFormer, eq. 10. q: B,H,T,D; k: B,H,S,D; v1: B,H,S,E (last column: 1 for real keys);
    angles: B,1,T,1 and B,1,S,1. Returns B,H,T,E-1. Runs with autocast off (sums over all keys: see
    ``CosformerAttention.forward``)."""
    kv_cos = (k * torch.cos(k_angle)).transpose(-1, -2) @ v1  # B,H,D,E
    kv_sin = (k * torch.sin(k_angle)).transpose(-1, -2) @ v1
    out = (q * torch.cos(q_angle)) @ kv_cos + (q * torch.sin(q_angle)) @ kv_sin
    return out[..., :-1] / out[..., -1:].clamp_min(eps)


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
        return _causal_step(q, k, v, u, cos_a, sin_a, eps, state)
    chunk = max(1, min(chunk_size, q.size(2)))
    decay = _causal_decay(chunk, horizon, q.dtype, q.device)
    return _ChunkedCausalCosformer.apply(q, k, v, u, cos_a, sin_a, decay, state, eps, chunk, k_pad, raw, own)


@without_autocast
def _causal_step(q, k, v, u, cos_a, sin_a, eps, state):
    """One new token per sequence (decoding): add it to the state, then read the state. q, k, v: B,H,1,*.
    Runs with autocast off, like ``_ChunkedCausalCosformer``: the state sums over the whole prefix."""
    bsz, heads, _, dim = q.shape
    e_dim = v.size(-1)
    v1 = torch.cat([v, u.expand(bsz, heads, 1, 1) if u is not None else v.new_ones(bsz, heads, 1, 1)], dim=-1)
    k2 = torch.cat([k * cos_a, k * sin_a], dim=-1)  # B,H,1,2D
    new_state = k2.transpose(-1, -2) @ v1  # B,H,2D,E+1
    if state is not None:
        new_state = new_state + state.reshape(bsz, heads, 2 * dim, e_dim + 1)
    out = torch.cat([q * cos_a, q * sin_a], dim=-1) @ new_state  # B,H,1,E+1
    return out[..., :-1] / out[..., -1:].clamp_min(eps), new_state.view(bsz, heads, 2, dim, e_dim + 1)


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


def explicit_weights(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, horizon: Tensor, key_pad: Optional[Tensor], causal: bool, eps: float) -> Tensor:
    """The attention matrix that cosFormer applies implicitly (B,H,T,S), for analysis only: O(T*S)."""
    scores = q @ k.transpose(-1, -2)
    rel = (q_pos.unsqueeze(2) - k_pos.unsqueeze(1)).to(q.dtype)  # B,T,S
    reweight = torch.cos(rel * (math.pi / 2) / horizon.view(-1, 1, 1).to(q.dtype))
    scores = scores * reweight.unsqueeze(1)
    if causal:
        scores = scores * torch.ones_like(rel).tril(k.size(2) - q.size(2)).unsqueeze(1)
    if key_pad is not None:
        scores = scores.masked_fill(key_pad.bool()[:, None, None, :], 0.0)
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(eps)


def naive_cosformer(module, query, key, value, key_padding_mask=None):
    """Eq. 9 term by term: for every query i, the sums over allowed keys j of
    relu(q_i).relu(k_j) cos(pi/2 (p_i - p_j)/M) v_j and of the same weights."""
    tgt_len, bsz, _ = query.shape
    src_len = key.shape[0]
    heads, dim = module.num_heads, module.head_dim
    q = F.relu(F.linear(query, module.q_proj.weight, module.q_proj.bias))
    k = F.relu(F.linear(key, module.k_proj.weight, module.k_proj.bias))
    v = F.linear(value, module.v_proj.weight, module.v_proj.bias)
    out = query.new_zeros(tgt_len, bsz, heads * dim)
    copies = getattr(module, "key_copies", 1) if module.placement == ENCODER_DECODER else 1
    copy_len = src_len // copies  # encoder-decoder keys: ``copies`` copies of one source, positions within each
    for b in range(bsz):
        pad = key_padding_mask[b].bool().tolist() if key_padding_mask is not None else [False] * src_len
        real_keys = [j for j in range(src_len) if not pad[j]]
        key_pos = {}
        for c in range(copies):
            copy_keys = [j for j in real_keys if c * copy_len <= j < (c + 1) * copy_len]
            first_real = copy_keys[0] if copy_keys else 0
            key_pos.update({j: j - first_real for j in copy_keys})
        if module.placement == ENCODER_SELF:
            horizon = len(real_keys)
            query_pos = {i: key_pos.get(i, 0) for i in range(tgt_len)}
        elif module.placement == DECODER_SELF:
            horizon = module.horizon
            query_pos = {i: key_pos.get(i, 0) for i in range(tgt_len)}
        else:
            horizon = module.horizon
            query_pos = {i: i for i in range(tgt_len)}
        for h in range(heads):
            sl = slice(h * dim, (h + 1) * dim)
            for i in range(tgt_len):
                numerator = query.new_zeros(dim)
                denominator = query.new_zeros(())
                for j in real_keys:
                    if module.causal and j > i:
                        continue
                    weight = (q[i, b, sl] @ k[j, b, sl]) * math.cos(math.pi / 2 * (query_pos[i] - key_pos[j]) / horizon)
                    numerator = numerator + weight * v[j, b, sl]
                    denominator = denominator + weight
                out[i, b, sl] = numerator / denominator.clamp_min(module.eps)
    return F.linear(out, module.out_proj.weight, module.out_proj.bias)


# ------------------------------------------------------------------ costs ---
def _parameters(placement, d, heads, kdim, options):
    return projection_parameters(d, kdim)


def _macs(placement, d, heads, queries, keys, kdim, options):
    """The linear form of eq. 10, cos and sin parts, with the normaliser as an extra
    all-ones value column (as computed above): phi(K)^T [V 1] and phi(Q) (phi(K)^T [V 1]),
    2 (S + T) d (d_h + 1); the causal form counted the same (its prefix sums are additions)."""
    return projection_macs(d, queries, keys, kdim) + 2 * (queries + keys) * d * (d // heads + 1)


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # the running sums of eq. 10, cos and sin parts: per head d_h x (d_h + 1) each (B,H,2,D,E+1);
    # encoder-decoder attention also keeps the source keys (for attention weights on request)
    state = 2 * d * (d // heads + 1)
    return state + (length * d if placement == ENCODER_DECODER else 0)


def running_sum_flops(length, heads, head_dim, chunk, element_size=4, batch=1):
    """The running sums of one pass of the chunked causal form: per segment of s chunks, one product
    of an (s+1) x (s+1) triangular matrix of ones with the (s+1) states of the cos and sin parts, values
    (d_h x d_h per head) and denominator (d_h x 1)."""
    bh = batch * heads
    n = -(-length // chunk)
    per_chunk = bh * chunk * head_dim * element_size
    seg_chunks = max(1, SEGMENT_BYTES // per_chunk)
    total = 0
    for first in range(0, n, seg_chunks):
        s1 = min(seg_chunks, n - first) + 1
        if s1 > 1:
            total += 2 * 2 * s1 * s1 * bh * head_dim * (head_dim + 1)
    return total


def implementation_layer_flops(length, embed_dim, heads, options, chunk=None, **settings):
    """The chunked causal form (``_ChunkedCausalCosformer``), its hand-written backward counted product
    by product; ``chunk``: the chunk size (default ``DEFAULT_CHUNK_SIZE``)."""
    T, d, h = length, embed_dim, heads
    dh = d // h
    proj = 2 * T * d * d  # one d x d linear map
    c = max(1, min(chunk or DEFAULT_CHUNK_SIZE, T))
    n = -(-T // c)  # chunks (the last one zero-padded)
    reading = n - 1  # chunk 0 has no earlier state to read
    running = running_sum_flops(T, h, dh, c)
    intra = 2 * c * c * dh  # one C x C x d_h product, per chunk and head
    state = 2 * c * dh * dh  # one C x d_h x d_h product, per chunk, head and part (cos, sin)
    den = 2 * c * dh  # one C x d_h x 1 product (the denominator's states)
    fwd_core = h * (n * 2 * intra + n * 2 * state + reading * 2 * (state + den)) + running
    # backward: scores recomputed, then dV, dA, dQ, dK (5 intra products); states recomputed (2 parts);
    # queries' reads: dQ and the states' gradients (2 products per part, plus the denominator's 2 x C x 2
    # products); keys and values: dK and dV from the states' gradients (2 per part, plus dK's C x 2 x d_h);
    # the running sums forward (recomputed) and in reverse
    bwd_core = h * (n * 5 * intra + n * 2 * state + reading * (4 * state + 2 * 2 * den) + n * (4 * state + 2 * den)) + 2 * running
    return 4 * proj + fwd_core, 8 * proj + bwd_core


COSFORMER_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="constant",
    asymptotic_class="O(T)",
    implementation_flops=implementation_layer_flops,
    implementation_flops_text="8 T d^2; per head, chunks of C = {chunk}: intra-chunk 4 T C d_h (scores, values), states "
    "4 T d_h^2 (cos, sin), reads of the earlier chunks' states 4 (T - C) d_h^2, running sums of the states per segment; "
    "forward about 8 T d^2 + 4 T C d + 8 T d d_h. Backward (hand-written, counted product by product): "
    "16 T d^2 + 10 T C d + 20 T d d_h + twice the running sums",
)


@register_attention(
    "cosformer",
    placements=PLACEMENTS,
    naive_reference=naive_cosformer,
    description="linear attention with cosine re-weighting (Qin et al. 2022): O(T) time, constant decoding state",
    costs=COSFORMER_COSTS,
    # encoder self-attention takes its M from each sequence
    options={"cosformer_max_positions": (DECODER_SELF, ENCODER_DECODER)},
)
class CosformerAttention(BaseAttention):
    uses_future_mask = False
    # Encoder-decoder attention over k concatenated copies of the source: key positions (and so the cos
    # re-weighting and the horizon check) are counted within each copy; the constant-size state sums over
    # every copy's keys, which is the sum of the per-copy states.
    supports_key_copies = True

    def __init__(
        self,
        placement: str,
        embed_dim: int,
        num_heads: int,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        horizon: Optional[int] = None,
        eps: float = DEFAULT_EPS,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ):
        kdim = kdim if kdim is not None else embed_dim
        vdim = vdim if vdim is not None else embed_dim
        super().__init__(placement, embed_dim, num_heads, kdim, vdim)
        if placement != ENCODER_SELF and (horizon is None or horizon < 1):
            raise ValueError(f"cosformer {placement} attention needs a horizon M >= 1, got {horizon}")
        if chunk_size < 1:
            raise ValueError(f"cosformer chunk_size must be >= 1, got {chunk_size}")
        self.horizon = horizon
        self.eps = eps
        self.chunk_size = chunk_size
        self.q_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.k_proj = quant_noise(nn.Linear(kdim, embed_dim), q_noise, qn_block_size)
        self.v_proj = quant_noise(nn.Linear(vdim, embed_dim), q_noise, qn_block_size)
        self.out_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.reset_parameters()

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, cfg):
        quant_noise_cfg = getattr(cfg, "quant_noise", None) if cfg is not None else None
        return cls(
            placement,
            embed_dim,
            num_heads,
            kdim=kdim,
            vdim=vdim,
            horizon=horizon_for(placement, cfg),
            q_noise=getattr(quant_noise_cfg, "pq", 0.0) if quant_noise_cfg is not None else 0.0,
            qn_block_size=getattr(quant_noise_cfg, "pq_block_size", 8) if quant_noise_cfg is not None else 8,
        )

    def reset_parameters(self):
        # fairseq's MultiheadAttention initialisation, q/k/v biases zero.
        self._reset_projections(zero_qkv_bias=True)

    def extra_repr(self):
        return super().extra_repr() + f", horizon={self.horizon}, chunk_size={self.chunk_size}"

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if before_softmax:
            raise ValueError("cosformer has no softmax: before_softmax=True is not supported")
        if need_head_weights:
            need_weights = True
        self._check_inputs(query, key, key_padding_mask)
        if self.causal:
            self._check_no_arbitrary_mask(attn_mask)
        elif attn_mask is not None:
            raise ValueError(f"cosformer {self.placement} attention cannot apply an attn_mask (linear attention has no score matrix)")
        tgt_len, bsz, _ = query.shape
        # The projections follow autocast like any linear layer; the attention itself runs in float32
        # (or float64) with autocast off: its sums run over all keys, which overflows float16 and keeps
        # too few digits in bfloat16 (a carried decoding state sums over the whole prefix).
        compute_dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        # W_q x; phi = ReLU is applied below, or, in causal self-attention, fused into the chunked form.
        q = self._split_heads(self.q_proj(query)).to(compute_dtype)

        if self.encoder_decoder_attention:
            out, weights = self._cross_attention(F.relu(q), key, key_padding_mask, incremental_state, need_weights, compute_dtype)
        elif self.causal:
            out, weights = self._causal_self_attention(q, query, key_padding_mask, incremental_state, need_weights, compute_dtype)
        else:
            if incremental_state is not None:
                raise ValueError("cosformer encoder self-attention does not decode incrementally")
            out, weights = self._bidirectional_self_attention(F.relu(q), query, key_padding_mask, need_weights, compute_dtype)

        out = out.to(query.dtype).permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
        out = self.out_proj(out)
        if weights is not None:
            weights = weights.to(query.dtype)
            weights = weights.transpose(0, 1) if need_head_weights else weights.mean(dim=1)
        return out, weights

    def _keys_values(self, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor], dtype) -> Tuple[Tensor, Tensor]:
        """phi(K) with padded keys zeroed, and [V, 1] with padded rows zeroed."""
        k = F.relu(self._split_heads(self.k_proj(key))).to(dtype)
        v = self._split_heads(self.v_proj(value)).to(dtype)
        v1 = F.pad(v, (0, 1), value=1.0)
        if key_padding_mask is not None:
            keep = (~key_padding_mask.bool()).to(dtype)[:, None, :, None]
            k = k * keep
            v1 = v1 * keep
        return k, v1

    def _angles(self, pos: Tensor, horizon, dtype) -> Tensor:
        horizon = horizon.to(dtype).view(-1, 1) if torch.is_tensor(horizon) else float(horizon)
        return (pos.to(dtype) * (math.pi / 2) / horizon).unsqueeze(1).unsqueeze(-1)  # B,1,T,1

    def _bidirectional_self_attention(self, q, x, key_padding_mask, need_weights, dtype):
        bsz, _, length, _ = q.shape
        k, v1 = self._keys_values(x, x, key_padding_mask, dtype)
        pos = sequence_positions(key_padding_mask, bsz, length, q.device)
        if key_padding_mask is None:
            horizon = torch.full((bsz,), length, device=q.device)
        else:
            horizon = (~key_padding_mask.bool()).sum(dim=1).clamp_min(1)
        angle = self._angles(pos, horizon, dtype)
        out = cosformer_bidirectional(q, k, v1, angle, angle, self.eps)
        weights = explicit_weights(q, k, pos, pos, horizon, key_padding_mask, False, self.eps) if need_weights else None
        return out, weights

    def _causal_self_attention(self, q, x, key_padding_mask, incremental_state, need_weights, dtype):
        """q: the raw query projection (B,H,T,D); phi is applied inside the causal form."""
        bsz, _, length, _ = q.shape
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        key_padding_mask = self._step_padding(key_padding_mask, length, incremental_state)
        if key_padding_mask is not None:
            _check_contiguous(key_padding_mask)
        offset = buffer.get("position")
        state = buffer.get("state")
        pos = sequence_positions(key_padding_mask, bsz, length, q.device, offset)
        n_real = (~key_padding_mask.bool()).sum(dim=1) if key_padding_mask is not None else torch.full((bsz,), length, device=q.device)
        end = (offset if offset is not None else 0) + n_real
        if int(end.max()) > self.horizon:
            raise _length_error(int(end.max()), self.horizon, self.placement)
        # Raw q and k go in: phi and the zeroing of padded keys are fused into the causal form's
        # chunking, and since nothing else holds these projections (nor v), its backward overwrites
        # them with their gradients. With padded keys zero, every weight of a pad is zero, so the
        # values need no masking and the denominator weights are all ones.
        k = self._split_heads(self.k_proj(x)).to(dtype)
        v = self._split_heads(self.v_proj(x)).to(dtype)
        angle = self._angles(pos, self.horizon, dtype)
        if need_weights:
            if incremental_state is not None:
                raise ValueError(
                    "cosformer causal decoding keeps only a constant-size state and cannot return attention weights "
                    "incrementally; ask for weights in a full (teacher-forced) forward pass"
                )
            phi_q, phi_k = F.relu(q), F.relu(k)
            if key_padding_mask is not None:
                phi_k = phi_k.masked_fill(key_padding_mask.bool()[:, None, :, None], 0.0)
            horizon = torch.full((bsz,), self.horizon, device=q.device)
            weights = explicit_weights(phi_q, phi_k, pos, pos, horizon, key_padding_mask, True, self.eps)
        else:
            weights = None
        out, new_state = _causal_chunked(
            q, k, v, None, angle, self.horizon, self.eps, state, self.chunk_size, k_pad=key_padding_mask, raw=True, own=True
        )
        if incremental_state is not None:
            buffer["state"] = new_state
            buffer["position"] = end
            self._set_input_buffer(incremental_state, buffer)
        return out, weights

    def _cross_attention(self, q, key, key_padding_mask, incremental_state, need_weights, dtype):
        bsz, _, tgt_len, _ = q.shape
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "kv_state" in buffer:
            kv_state, k, k_pos, key_padding_mask = buffer["kv_state"], buffer["keys"], buffer["key_positions"], buffer.get("key_padding_mask")
        else:
            if key is None:
                raise ValueError("cosformer encoder-decoder attention needs the encoder output as key on its first call")
            src_len = key.size(0)
            k, v1 = self._keys_values(key, key, key_padding_mask, dtype)
            k_pos = copy_positions(key_padding_mask, bsz, src_len, self.key_copies, q.device)
            if src_len > self.horizon and int(k_pos.max()) >= self.horizon:
                raise _length_error(int(k_pos.max()) + 1, self.horizon, self.placement)
            with autocast_off(q.device.type):
                k_angle = self._angles(k_pos, self.horizon, dtype)
                kv_state = torch.stack(
                    [(k * torch.cos(k_angle)).transpose(-1, -2) @ v1, (k * torch.sin(k_angle)).transpose(-1, -2) @ v1], dim=2
                )  # B,H,2,D,E
        offset = buffer.get("query_position")
        q_pos = sequence_positions(None, bsz, tgt_len, q.device, offset)
        end = (offset if offset is not None else 0) + tgt_len
        if int(torch.as_tensor(end).max()) > self.horizon:
            raise _length_error(int(torch.as_tensor(end).max()), self.horizon, self.placement)
        with autocast_off(q.device.type):
            q_angle = self._angles(q_pos, self.horizon, dtype)
            out = (q * torch.cos(q_angle)) @ kv_state[:, :, 0] + (q * torch.sin(q_angle)) @ kv_state[:, :, 1]
            out = out[..., :-1] / out[..., -1:].clamp_min(self.eps)
        if incremental_state is not None:
            buffer.update(kv_state=kv_state, keys=k, key_positions=k_pos, query_position=torch.as_tensor(end, device=q.device).expand(bsz).clone())
            if key_padding_mask is not None:
                buffer["key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, buffer)
        weights = None
        if need_weights:
            horizon = torch.full((bsz,), self.horizon, device=q.device)
            weights = explicit_weights(q, k, q_pos, k_pos, horizon, key_padding_mask, False, self.eps)
        return out, weights
