"""``softmax``: fairseq's own scaled dot-product multi-head attention
(Vaswani et al. 2017, eq. 1: softmax(QK^T / sqrt(d)) V), registered as an
attention kind so that mixed models can choose it per layer.

Two diagonal ablations of the Bird-Eye Transformer paper (Sha et al. 2022,
section 4) act on causal self-attention (the ``decoder_self`` placement only;
encoder self-attention and encoder-decoder attention ignore them):

* ``--softmax-diag-free``: the diagonal-free mask, query i sees keys j < i only;
  a query with no other visible key (the first token, or under left padding the
  first real token) sees itself only (``causal_visibility``);
* ``--softmax-diag-scale f``: the diagonal of the dot-product matrix,
  q_i . k_i / sqrt(d_h), is multiplied by f before the softmax ("Reduced Diag"
  f = 0.2, "Magnified Diag" f = 2.0); any finite f.

The two are exclusive. With either set, fairseq's projections and key/value
cache are reused through ``before_softmax=True`` (the masked raw scores and the
values) and the softmax, dropout and output projection are finished here; with
neither set the kind is fairseq's MultiheadAttention unchanged.
"""
import math
from typing import Optional

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .costs import (
    AttentionCosts,
    Counts,
    OperationCounts,
    linear,
    linear_parameters,
    projection_macs,
    projection_parameters,
    visible_pairs,
)
from .registry import (
    DECODER_SELF,
    ENCODER_DECODER,
    PLACEMENTS,
    AttentionConfigError,
    ConformanceVariant,
    register_attention,
)


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
    dtype = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    any_visible = visible.any(dim=-1, keepdim=True)
    scores = scores.to(dtype).masked_fill(~visible, float("-inf")).masked_fill(~any_visible, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~any_visible, 0.0)


def check_diag_options(diag_free: bool, diag_scale: float):
    if not math.isfinite(diag_scale):
        raise AttentionConfigError(f"--softmax-diag-scale must be a finite number, got {diag_scale}")
    if diag_free and diag_scale != 1.0:
        raise AttentionConfigError(
            f"--softmax-diag-free and --softmax-diag-scale {diag_scale} exclude each other: the diagonal-free mask "
            "hides the diagonal that the scale would change; set one of them"
        )


def naive_softmax_attention(module, query, key, value, key_padding_mask=None):
    """Explicit per-head softmax(q k^T / sqrt(d_h)) v with the module's weights;
    in causal self-attention with the diagonal ablations: the diagonal score
    q_i . k_i / sqrt(d_h) times --softmax-diag-scale, or the diagonal-free mask
    (keys j < i; a query with no such real key sees only itself)."""
    tgt_len, bsz, _ = query.shape
    src_len = key.shape[0]
    heads, head_dim = module.num_heads, module.head_dim
    q = torch.nn.functional.linear(query, module.q_proj.weight, module.q_proj.bias)
    k = torch.nn.functional.linear(key, module.k_proj.weight, module.k_proj.bias)
    v = torch.nn.functional.linear(value, module.v_proj.weight, module.v_proj.bias)
    out = query.new_zeros(tgt_len, bsz, heads * head_dim)
    for b in range(bsz):
        for h in range(heads):
            sl = slice(h * head_dim, (h + 1) * head_dim)
            scores = q[:, b, sl] @ k[:, b, sl].T / math.sqrt(head_dim)
            real = [True] * src_len if key_padding_mask is None else (~key_padding_mask[b].bool()).tolist()
            allowed = torch.zeros(tgt_len, src_len, dtype=torch.bool)
            for i in range(tgt_len):
                own = i + src_len - tgt_len  # the query's own key
                for j in range(src_len):
                    if not module.causal:
                        allowed[i, j] = real[j]
                    elif getattr(module, "diag_free", False):
                        allowed[i, j] = real[j] and j < own
                    else:
                        allowed[i, j] = real[j] and j <= own
                if module.causal and getattr(module, "diag_free", False) and not allowed[i].any() and real[own]:
                    allowed[i, own] = True
                if module.causal:
                    scores[i, own] = scores[i, own] * getattr(module, "diag_scale", 1.0)
            scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
            out[:, b, sl] = weights @ v[:, b, sl]
    return torch.nn.functional.linear(out, module.out_proj.weight, module.out_proj.bias)


# ------------------------------------------------------------------ costs ---
# Counted as defined (``modules/costs.py``; per-operation conventions in
# ``fairseq_plugins/complexity.py``).
def softmax_attention(d: int, heads: int, queries: int, pairs: int) -> Counts:
    """Per-operation counts of multi-head softmax self-attention with Q, K, V and
    output projections (fairseq's MultiheadAttention) for ``queries`` new tokens
    that together attend to ``pairs`` (query, key) pairs."""
    if d % heads:
        raise ValueError(f"d = {d} is not divisible by {heads} heads")
    return (
        # q, k, v of the new tokens (earlier keys and values are cached when decoding)
        linear(queries, d, 3 * d)
        # q * 1/sqrt(d_h)
        + Counts(multiplications=queries * d)
        # scores q_i . k_j: per pair and head a dot product of length d_h = d / h
        + Counts(multiplications=pairs * d, additions=pairs * (d - heads))
        # softmax per query and head over its keys: one exp and one division
        # per pair and head; the normaliser of a query with m keys: m - 1 additions
        + Counts(exponentiations=pairs * heads, divisions=pairs * heads, additions=(pairs - queries) * heads)
        # sum_j a_ij v_j: per pair one d_h-vector scaled in every head (d mult.),
        # per query (m - 1) d additions
        + Counts(multiplications=pairs * d, additions=(pairs - queries) * d)
        # output projection
        + linear(queries, d, d)
    )


def softmax_parameters(d: int) -> int:
    return 4 * linear_parameters(d, d)  # W_q, W_k, W_v, W_o with biases


def softmax_training(d: int, heads: int, n: int) -> Counts:
    """A causal pass over n tokens: token i attends to i keys, n(n+1)/2 pairs."""
    return softmax_attention(d, heads, queries=n, pairs=n * (n + 1) // 2)


def softmax_step(d: int, heads: int, t: int) -> Counts:
    """The t-th token attends to t keys (t - 1 cached and its own)."""
    return softmax_attention(d, heads, queries=1, pairs=t)


def _parameters(placement, d, heads, kdim, options):
    return projection_parameters(d, kdim)


def _macs(placement, d, heads, queries, keys, kdim, options):
    """Projections, then q . k and a . v over the visible (query, key) pairs only
    (fairseq's implementation computes the whole T x S matrices and masks them)."""
    diag_free = options.softmax_diag_free and placement == DECODER_SELF
    return projection_macs(d, queries, keys, kdim) + 2 * visible_pairs(placement, queries, keys, diag_free) * d


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # fairseq's prev_key and prev_value: every decoded token's (or source token's) k and v
    return 2 * length * d


def implementation_layer_flops(length, embed_dim, heads, options, **settings):
    """fairseq's MultiheadAttention: the four projections, Q K^T and A V over all T x T pairs (the
    additive future mask hides keys, it does not skip them); backward: twice the projections, and
    fused attention recomputes the scores (5 products for the forward's 2)."""
    T, d = length, embed_dim
    proj = 2 * T * d * d  # one d x d linear map
    core = 4 * T * T * d
    return 4 * proj + core, 8 * proj + 2.5 * core


SOFTMAX_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="per token",
    asymptotic_class="O(T^2)",
    options_from=lambda cfg: {"softmax_diag_free": bool(_option(cfg, "softmax_diag_free", False))},
    option_defaults={"softmax_diag_free": False},  # decoder self-attention only
    implementation_flops=implementation_layer_flops,
    implementation_flops_text="4 projections 8 T d^2; Q K^T and A V over all T^2 pairs (the additive future mask does "
    "not skip work) 4 T^2 d. Backward: 16 T d^2 + 10 T^2 d (fused attention recomputes the scores: 5 products for the "
    "forward's 2)",
    operation_counts=OperationCounts(
        label="softmax self-attention",
        training=lambda d, heads, n, options: softmax_training(d, heads, n),
        step=lambda d, heads, t, options: softmax_step(d, heads, t),
        per_head=True,
    ),
)


@register_attention(
    "softmax",
    placements=PLACEMENTS,
    naive_reference=naive_softmax_attention,
    description="fairseq's scaled dot-product multi-head attention (O(T^2))",
    conformance_variants={
        "diag_free": ConformanceVariant({"softmax_diag_free": True}, (DECODER_SELF,)),
        "diag_scale_0.2": ConformanceVariant({"softmax_diag_scale": 0.2}, (DECODER_SELF,)),
        "diag_scale_2.0": ConformanceVariant({"softmax_diag_scale": 2.0}, (DECODER_SELF,)),
    },
    costs=SOFTMAX_COSTS,
    attention_distribution=True,
    options={"softmax_diag_free": (DECODER_SELF,), "softmax_diag_scale": (DECODER_SELF,)},
)
class SoftmaxAttention(MultiheadAttention):
    """fairseq's MultiheadAttention, causal by construction in ``decoder_self``.

    fairseq's decoder passes its future mask; when called without one (as the
    conformance suite and the mixed decoder may do) the same mask is built here.
    ``diag_free`` / ``diag_scale``: the diagonal ablations (module docstring),
    in ``decoder_self`` only.
    """

    uses_future_mask = True
    returns_attention_weights = True
    # Softmax attention does not depend on key positions: k concatenated copies need nothing else.
    supports_key_copies = True
    key_copies = 1

    def __init__(
        self,
        placement,
        embed_dim,
        num_heads,
        kdim=None,
        vdim=None,
        dropout=0.0,
        q_noise=0.0,
        qn_block_size=8,
        diag_free: bool = False,
        diag_scale: float = 1.0,
    ):
        diag_free, diag_scale = bool(diag_free), float(diag_scale)
        check_diag_options(diag_free, diag_scale)
        super().__init__(
            embed_dim,
            num_heads,
            kdim=kdim,
            vdim=vdim,
            dropout=dropout,
            self_attention=placement != ENCODER_DECODER,
            encoder_decoder_attention=placement == ENCODER_DECODER,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.placement = placement
        self.causal = placement == DECODER_SELF
        # The ablations change causal self-attention only.
        self.diag_free = diag_free and self.causal
        self.diag_scale = diag_scale if self.causal else 1.0
        self.hides_diagonal = self.diag_free

    @property
    def changes_diagonal(self) -> bool:
        return self.diag_free or self.diag_scale != 1.0

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, cfg):
        return cls(
            placement,
            embed_dim,
            num_heads,
            kdim=kdim,
            vdim=vdim,
            dropout=dropout,
            q_noise=getattr(cfg, "quant_noise_pq", 0.0) or 0.0,
            qn_block_size=getattr(cfg, "quant_noise_pq_block_size", 8) or 8,
            diag_free=_option(cfg, "softmax_diag_free", False),
            diag_scale=_option(cfg, "softmax_diag_scale", 1.0),
        )

    def extra_repr(self):
        extra = f"placement={self.placement}"
        if self.diag_free:
            extra += ", diag_free=True"
        if self.diag_scale != 1.0:
            extra += f", diag_scale={self.diag_scale}"
        return extra

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
    ):
        if self.changes_diagonal and not before_softmax:
            return self._forward_changed_diagonal(
                query, key, value, key_padding_mask, incremental_state, need_weights, static_kv, attn_mask, need_head_weights
            )
        if self.causal and attn_mask is None and incremental_state is None and query.size(0) > 1:
            attn_mask = causal_additive_mask(query.size(0), key.size(0), query)
        if need_head_weights and incremental_state is None:
            # fairseq's fast path (F.multi_head_attention_forward) averages the
            # heads even when per-head weights are asked for; static_kv=True,
            # a no-op without incremental state, selects its explicit path.
            static_kv = True
        return super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            need_weights=need_weights,
            static_kv=static_kv,
            attn_mask=attn_mask,
            before_softmax=before_softmax,
            need_head_weights=need_head_weights,
        )

    def _forward_changed_diagonal(
        self, query, key, value, key_padding_mask, incremental_state, need_weights, static_kv, attn_mask, need_head_weights
    ):
        """Causal self-attention with the diagonal scaled or hidden.

        fairseq's explicit path computes the projections, updates the key/value
        cache and returns, with ``before_softmax=True``, the (B*H) x T x S scores
        q . k / sqrt(d_h) (padded keys at -inf) and the values; the fast path
        (F.multi_head_attention_forward) would ignore before_softmax, and
        static_kv=True (a no-op without incremental state) avoids it. The causal
        mask is applied here, so fairseq gets no attn_mask; the caller's
        (additive, e.g. fairseq's future mask) is added to the scores."""
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, _ = query.shape
        scores, v = super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            static_kv=True if incremental_state is None else static_kv,
            attn_mask=None,
            before_softmax=True,
        )
        src_len = scores.size(-1)
        if incremental_state is not None:
            # fairseq appended the current padding to the cached one (B x S, or None).
            key_padding_mask = self._get_input_buffer(incremental_state).get("prev_key_padding_mask")
        own = torch.arange(tgt_len, device=scores.device).unsqueeze(1) + (src_len - tgt_len)
        diagonal = torch.arange(src_len, device=scores.device).unsqueeze(0) == own  # T x S
        if self.diag_scale != 1.0:
            # Scale q_i . k_i / sqrt(d_h) itself; a padded diagonal stays -inf
            # (0 * -inf or a negative factor would turn it into NaN or +inf).
            scores = torch.where(diagonal & torch.isfinite(scores), scores * self.diag_scale, scores)
        if attn_mask is not None:
            scores = scores + attn_mask.unsqueeze(0)
        scores = scores.view(bsz, self.num_heads, tgt_len, src_len)  # fairseq's (B*H) rows are b * H + h
        visible = causal_visibility(tgt_len, src_len, key_padding_mask, self.diag_free, scores.device).unsqueeze(1)
        visible = visible & torch.isfinite(scores)  # and whatever the caller's mask hides
        weights_float = masked_softmax(scores, visible).view(bsz * self.num_heads, tgt_len, src_len)
        probs = self.dropout_module(weights_float.to(v.dtype))
        attn = torch.bmm(probs, v)  # (B*H) x T x D
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        attn = self.out_proj(attn)
        weights = None
        if need_weights:
            # fairseq's conventions: H x B x T x S per head, else the head average.
            weights = weights_float.view(bsz, self.num_heads, tgt_len, src_len).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights


def _option(cfg, name: str, default):
    """A kind option from the raw model args (Namespace or DictConfig); None: default."""
    value = getattr(cfg, name, None) if cfg is not None else None
    return default if value is None else value
