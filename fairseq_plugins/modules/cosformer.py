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
DEFAULT_CHUNK_SIZE = 128


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


def cosformer_bidirectional(q: Tensor, k: Tensor, v1: Tensor, q_angle: Tensor, k_angle: Tensor, eps: float) -> Tensor:
    """Non-causal cosFormer, eq. 10. q: B,H,T,D; k: B,H,S,D; v1: B,H,S,E (last column: 1 for real keys);
    angles: B,1,T,1 and B,1,S,1. Returns B,H,T,E-1."""
    kv_cos = (k * torch.cos(k_angle)).transpose(-1, -2) @ v1  # B,H,D,E
    kv_sin = (k * torch.sin(k_angle)).transpose(-1, -2) @ v1
    out = (q * torch.cos(q_angle)) @ kv_cos + (q * torch.sin(q_angle)) @ kv_sin
    return out[..., :-1] / out[..., -1:].clamp_min(eps)


def _causal_decay(chunk: int, horizon: int, dtype, device) -> Tensor:
    """The C x C intra-chunk re-weighting cos(pi/2 (i - j)/M) for i >= j, zero above the diagonal."""
    idx = torch.arange(chunk, device=device)
    rel = (idx.unsqueeze(1) - idx.unsqueeze(0)).to(dtype)
    return torch.cos(rel * (math.pi / 2 / horizon)).masked_fill_(rel < 0, 0.0)


def _to_chunks(x: Tensor, n_chunks: int, chunk: int) -> Tensor:
    """B,H,T,F (any strides) -> contiguous B,H,n,C,F, zero-padded at the end."""
    bsz, heads, length, feat = x.shape
    if n_chunks * chunk == length:
        return x.contiguous().view(bsz, heads, n_chunks, chunk, feat)
    out = x.new_zeros(bsz, heads, n_chunks * chunk, feat)
    out[:, :, :length] = x
    return out.view(bsz, heads, n_chunks, chunk, feat)


class _ChunkedCausalCosformer(torch.autograd.Function):
    """Chunked causal cosFormer with a hand-written backward.

    Shapes (G = B*H*n batched matrices of one chunk each): q, k: B,H,n,C,D;
    v1: B,H,n,C,E; cos, sin: B,1,n,C,1; decay: C,C; state: B,H,D,2E or None.

    With W = [v1 cos | v1 sin] (C x 2E per chunk) the sums over earlier tokens
    are the D x 2E matrix S = sum_j k_j W_j^T, and a query reads them as
    cos_i (q_i S)[:E] + sin_i (q_i S)[E:]. Every product is a batched matrix
    product over all chunks at once; the only sequential step is the cumulative
    sum of the n per-chunk states.
    """

    @staticmethod
    def forward(ctx, q, k, v1, cos, sin, decay, state, eps):
        bsz, heads, n, chunk, dim = q.shape
        e_dim = v1.size(-1)
        g = bsz * heads * n
        q3, k3, v3 = q.view(g, chunk, dim), k.view(g, chunk, dim), v1.view(g, chunk, e_dim)
        # Intra-chunk: exact quadratic form.
        attn = torch.bmm(q3, k3.transpose(1, 2)).mul_(decay)
        out = torch.bmm(attn, v3)  # g,C,E (last column: denominator)
        # Per-chunk states and their exclusive prefix sums (plus the incoming state).
        w = v1.new_empty(bsz, heads, n, chunk, 2 * e_dim)
        torch.mul(v1, cos, out=w[..., :e_dim])
        torch.mul(v1, sin, out=w[..., e_dim:])
        w3 = w.view(g, chunk, 2 * e_dim)
        chunk_states = torch.bmm(k3.transpose(1, 2), w3).view(bsz, heads, n, dim, 2 * e_dim)
        excl = torch.empty_like(chunk_states)
        if state is None:
            excl[:, :, 0].zero_()
        else:
            excl[:, :, 0].copy_(state)
        if n > 1:
            torch.cumsum(chunk_states[:, :, :-1], dim=2, out=excl[:, :, 1:])
            if state is not None:
                excl[:, :, 1:] += state.unsqueeze(2)
        final = excl[:, :, -1] + chunk_states[:, :, -1]
        # Inter-chunk: every query reads the state of all earlier chunks.
        u = torch.bmm(q3, excl.view(g, dim, 2 * e_dim)).view(bsz, heads, n, chunk, 2 * e_dim)
        out = out.view(bsz, heads, n, chunk, e_dim)
        out.addcmul_(u[..., :e_dim], cos).addcmul_(u[..., e_dim:], sin)
        den_raw = out[..., dim:]
        den = den_raw.clamp_min(eps)
        y = out[..., :dim] / den
        ctx.save_for_backward(q, k, v1, cos, sin, decay, attn, w, excl, den, y)
        ctx.clamped = den_raw < eps
        ctx.has_state = state is not None
        ctx.set_materialize_grads(False)
        return y, final

    @staticmethod
    def backward(ctx, gy, gfinal):
        q, k, v1, cos, sin, decay, attn, w, excl, den, y = ctx.saved_tensors
        bsz, heads, n, chunk, dim = q.shape
        e_dim = v1.size(-1)
        g = bsz * heads * n
        q3, k3, v3 = q.view(g, chunk, dim), k.view(g, chunk, dim), v1.view(g, chunk, e_dim)
        gout = q.new_empty(bsz, heads, n, chunk, e_dim)
        if gy is None:
            gout.zero_()
        else:
            torch.div(gy, den, out=gout[..., :dim])
            gden = torch.sum(gout[..., :dim] * y, dim=-1, keepdim=True).neg_()
            gden.masked_fill_(ctx.clamped, 0.0)
            gout[..., dim:] = gden
        go3 = gout.view(g, chunk, e_dim)
        # Intra-chunk.
        gattn = torch.bmm(go3, v3.transpose(1, 2)).mul_(decay)
        gv = torch.bmm(attn.transpose(1, 2), go3)
        gq = torch.bmm(gattn, k3)
        gk = torch.bmm(gattn.transpose(1, 2), q3)
        # Inter-chunk: queries.
        gu = q.new_empty(bsz, heads, n, chunk, 2 * e_dim)
        torch.mul(gout, cos, out=gu[..., :e_dim])
        torch.mul(gout, sin, out=gu[..., e_dim:])
        gu3 = gu.view(g, chunk, 2 * e_dim)
        gq.baddbmm_(gu3, excl.view(g, dim, 2 * e_dim).transpose(1, 2))
        gexcl = torch.bmm(q3.transpose(1, 2), gu3).view(bsz, heads, n, dim, 2 * e_dim)
        # Reverse exclusive prefix sum: chunk m feeds the states of every later chunk (and the final state).
        gchunk = torch.empty_like(gexcl)
        if gfinal is None:
            gchunk[:, :, -1].zero_()
        else:
            gchunk[:, :, -1].copy_(gfinal)
        for i in range(n - 2, -1, -1):
            torch.add(gchunk[:, :, i + 1], gexcl[:, :, i + 1], out=gchunk[:, :, i])
        gstate = None
        if ctx.has_state and ctx.needs_input_grad[6]:
            gstate = gchunk[:, :, 0] + gexcl[:, :, 0]
        gc3 = gchunk.view(g, dim, 2 * e_dim)
        # Keys and values.
        gk.baddbmm_(w.view(g, chunk, 2 * e_dim), gc3.transpose(1, 2))
        gw = torch.bmm(k3, gc3).view(bsz, heads, n, chunk, 2 * e_dim)
        gv = gv.view(bsz, heads, n, chunk, e_dim)
        gv.addcmul_(gw[..., :e_dim], cos).addcmul_(gw[..., e_dim:], sin)
        return (
            gq.view(q.shape),
            gk.view(k.shape),
            gv,
            None, None, None, gstate, None,
        )


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
    state: B,H,D,2E running sums [sum_j k_j (v1_j cos a_j)^T | sum_j k_j (v1_j sin a_j)^T]
    over earlier tokens (None: empty). Returns (B,H,T,E-1 output, new state).

    Inside a chunk, cos(pi/2 (i - j)/M) depends only on i - j, which for real
    tokens of one sequence equals the chunk-local index difference, so one
    C x C matrix serves every chunk and no doubled feature dimension is needed.
    """
    bsz, heads, tgt_len, dim = q.shape
    e_dim = v1.size(-1)
    cos_a, sin_a = torch.cos(angle), torch.sin(angle)
    if tgt_len == 1:
        return _causal_step(q, k, v1, cos_a, sin_a, eps, state)
    chunk = max(1, min(chunk_size, tgt_len))
    n_chunks = (tgt_len + chunk - 1) // chunk
    decay = _causal_decay(chunk, horizon, q.dtype, q.device)
    y, final = _ChunkedCausalCosformer.apply(
        _to_chunks(q, n_chunks, chunk),
        _to_chunks(k, n_chunks, chunk),
        _to_chunks(v1, n_chunks, chunk),
        _to_chunks(cos_a, n_chunks, chunk),
        _to_chunks(sin_a, n_chunks, chunk),
        decay,
        state,
        eps,
    )
    y = y.view(bsz, heads, n_chunks * chunk, dim)
    if n_chunks * chunk != tgt_len:
        y = y[:, :, :tgt_len]
    return y, final


def _causal_step(q, k, v1, cos_a, sin_a, eps, state):
    """One new token per sequence (decoding): update the state, read it back. q, k: B,H,1,D."""
    w = torch.cat([v1 * cos_a, v1 * sin_a], dim=-1)  # B,H,1,2E
    new_state = k.transpose(-1, -2) @ w  # B,H,D,2E
    if state is not None:
        new_state = new_state + state
    e_dim = v1.size(-1)
    u = q @ new_state  # B,H,1,2E
    out = u[..., :e_dim] * cos_a + u[..., e_dim:] * sin_a
    return out[..., :-1] / out[..., -1:].clamp_min(eps), new_state


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
    for b in range(bsz):
        pad = key_padding_mask[b].bool().tolist() if key_padding_mask is not None else [False] * src_len
        real_keys = [j for j in range(src_len) if not pad[j]]
        first_real = real_keys[0] if real_keys else 0
        key_pos = {j: j - first_real for j in real_keys}
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


@register_attention(
    "cosformer",
    placements=PLACEMENTS,
    naive_reference=naive_cosformer,
    description="linear attention with cosine re-weighting (Qin et al. 2022): O(T) time, constant decoding state",
)
class CosformerAttention(BaseAttention):
    uses_future_mask = False

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
        return cls(
            placement,
            embed_dim,
            num_heads,
            kdim=kdim,
            vdim=vdim,
            horizon=horizon_for(placement, cfg),
            q_noise=getattr(cfg, "quant_noise_pq", 0.0) or 0.0,
            qn_block_size=getattr(cfg, "quant_noise_pq_block_size", 8) or 8,
        )

    def reset_parameters(self):
        # Same initialisation as fairseq's MultiheadAttention.
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
            nn.init.zeros_(proj.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self):
        return super().extra_repr() + f", horizon={self.horizon}, chunk_size={self.chunk_size}"

    def _split_heads(self, x: Tensor) -> Tensor:
        length, bsz, _ = x.shape
        return x.view(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

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
        compute_dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        q = F.relu(self._split_heads(self.q_proj(query))).to(compute_dtype)

        if self.encoder_decoder_attention:
            out, weights = self._cross_attention(q, key, key_padding_mask, incremental_state, need_weights, compute_dtype)
        elif self.causal:
            out, weights = self._causal_self_attention(q, query, key_padding_mask, incremental_state, need_weights, compute_dtype)
        else:
            if incremental_state is not None:
                raise ValueError("cosformer encoder self-attention does not decode incrementally")
            out, weights = self._bidirectional_self_attention(q, query, key_padding_mask, need_weights, compute_dtype)

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
        bsz, _, length, _ = q.shape
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if key_padding_mask is not None and key_padding_mask.size(1) != length:
            if incremental_state is None or key_padding_mask.size(1) < length:
                raise ValueError(f"key_padding_mask has {key_padding_mask.size(1)} columns for {length} tokens")
            key_padding_mask = key_padding_mask[:, -length:]  # fairseq may pass the mask of the whole prefix
        if key_padding_mask is not None:
            _check_contiguous(key_padding_mask)
        offset = buffer.get("position")
        state = buffer.get("state")
        pos = sequence_positions(key_padding_mask, bsz, length, q.device, offset)
        n_real = (~key_padding_mask.bool()).sum(dim=1) if key_padding_mask is not None else torch.full((bsz,), length, device=q.device)
        end = (offset if offset is not None else 0) + n_real
        if int(end.max()) > self.horizon:
            raise _length_error(int(end.max()), self.horizon, self.placement)
        k, v1 = self._keys_values(x, x, key_padding_mask, dtype)
        angle = self._angles(pos, self.horizon, dtype)
        out, new_state = cosformer_causal(q, k, v1, angle, self.horizon, self.eps, state, self.chunk_size)
        if incremental_state is not None:
            buffer["state"] = new_state
            buffer["position"] = end
            self._set_input_buffer(incremental_state, buffer)
        weights = None
        if need_weights:
            if incremental_state is not None:
                raise ValueError(
                    "cosformer causal decoding keeps only a constant-size state and cannot return attention weights "
                    "incrementally; ask for weights in a full (teacher-forced) forward pass"
                )
            horizon = torch.full((bsz,), self.horizon, device=q.device)
            weights = explicit_weights(q, k, pos, pos, horizon, key_padding_mask, True, self.eps)
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
            k_pos = sequence_positions(key_padding_mask, bsz, src_len, q.device)
            if src_len > self.horizon and int(k_pos.max()) >= self.horizon:
                raise _length_error(int(k_pos.max()) + 1, self.horizon, self.placement)
            k_angle = self._angles(k_pos, self.horizon, dtype)
            kv_state = torch.stack(
                [(k * torch.cos(k_angle)).transpose(-1, -2) @ v1, (k * torch.sin(k_angle)).transpose(-1, -2) @ v1], dim=2
            )  # B,H,2,D,E
        offset = buffer.get("query_position")
        q_pos = sequence_positions(None, bsz, tgt_len, q.device, offset)
        end = (offset if offset is not None else 0) + tgt_len
        if int(torch.as_tensor(end).max()) > self.horizon:
            raise _length_error(int(torch.as_tensor(end).max()), self.horizon, self.placement)
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
