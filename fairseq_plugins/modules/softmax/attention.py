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
from typing import Optional

import torch
from fairseq.modules import MultiheadAttention
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from ..options import AttentionContext
from ..registry import (
    DECODER_SELF,
    ENCODER_DECODER,
    PLACEMENTS,
    ConformanceVariant,
    register_attention,
)
from ..shared import (causal_additive_mask, causal_softmax, module_output, module_projections,
                      without_cudnn_attention)
from .costs import SOFTMAX_COSTS
from .naive import naive_attention
from .options import SoftmaxOptions, check_diag_options


def naive_softmax_attention(module, query, key, value, key_padding_mask=None):
    """The registered naive reference (module signature): the module's q/k/v
    projections, ``naive.naive_attention`` with its placement and diagonal
    ablations, the output projection."""
    q, k, v = module_projections(module, query, key, value)
    heads = naive_attention(
        q,
        k,
        v,
        module.num_heads,
        key_padding_mask,
        causal=module.causal,
        diag_free=getattr(module, "diag_free", False),
        diag_scale=getattr(module, "diag_scale", 1.0),
    )
    return module_output(module, heads)


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
    options=SoftmaxOptions,
    default=True,  # fairseq's own attention: what a layer gets when the options name no kind
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
    # fairseq's MultiheadAttention wraps its projections in quant_noise (q_noise, qn_block_size)
    supports_quant_noise = True
    # fairseq's --cross-self-attention: the decoder's self-attention over the source and the prefix
    # together (keys of two lengths, fairseq's own masks), which fairseq's MultiheadAttention handles
    supports_cross_self_attention = True
    # --*-attention-head-dims: projections to heads x head dimension (``_set_head_dim``)
    supports_head_dim = True

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
        head_dim: Optional[int] = None,
    ):
        diag_free, diag_scale = bool(diag_free), float(diag_scale)
        check_diag_options(diag_free, diag_scale)
        own_head_dim = head_dim is not None and head_dim * num_heads != embed_dim
        super().__init__(
            embed_dim,
            # (fairseq asserts that the heads divide the width; with a head dimension of its own they need not)
            1 if own_head_dim and embed_dim % num_heads else num_heads,
            kdim=kdim,
            vdim=vdim,
            dropout=dropout,
            self_attention=placement != ENCODER_DECODER,
            encoder_decoder_attention=placement == ENCODER_DECODER,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.model_dim = embed_dim
        if own_head_dim:
            self._set_head_dim(num_heads, head_dim, q_noise, qn_block_size)
        self.attention_dim = self.embed_dim
        self.placement = placement
        self.causal = placement == DECODER_SELF
        # The ablations change causal self-attention only.
        self.diag_free = diag_free and self.causal
        self.diag_scale = diag_scale if self.causal else 1.0
        self.hides_diagonal = self.diag_free

    def _set_head_dim(self, num_heads: int, head_dim: int, q_noise: float, qn_block_size: int):
        """Heads of ``head_dim`` dimensions: q/k/v projections to heads x head_dim, the output projection
        back to the model width. fairseq's forward reads the attention width as ``embed_dim`` (as after
        its own head pruning, ``_adaptive_prune_heads``) and, told to skip the query-width check, takes its
        explicit path (PyTorch's fused one needs the attention width to be the model width)."""
        width = head_dim * num_heads
        self.num_heads, self.head_dim, self.embed_dim, self.scaling = num_heads, head_dim, width, head_dim**-0.5
        self.q_proj = quant_noise(nn.Linear(self.model_dim, width), q_noise, qn_block_size)
        self.k_proj = quant_noise(nn.Linear(self.kdim, width), q_noise, qn_block_size)
        self.v_proj = quant_noise(nn.Linear(self.vdim, width), q_noise, qn_block_size)
        self.out_proj = quant_noise(nn.Linear(width, self.model_dim), q_noise, qn_block_size)
        self.reset_parameters()
        self._set_skip_embed_dim_check()

    @property
    def changes_diagonal(self) -> bool:
        return self.diag_free or self.diag_scale != 1.0

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options: SoftmaxOptions,
                    context: AttentionContext, head_dim: Optional[int] = None):
        return cls(placement, embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout,
                   q_noise=context.quant_noise_pq, qn_block_size=context.quant_noise_pq_block_size,
                   diag_free=options.softmax_diag_free, diag_scale=options.softmax_diag_scale, head_dim=head_dim)

    def extra_repr(self):
        extra = f"placement={self.placement}"
        if self.embed_dim != self.model_dim:
            extra += f", head_dim={self.head_dim}"
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
        if self.causal and attn_mask is None and query.size(0) > 1:
            # several tokens at once are causal in an incremental call too (fairseq's decoder feeds one at a
            # time and gives no mask there; a prefix fed in one call would otherwise see its own future)
            past = 0
            if incremental_state is not None:
                prev_key = self._get_input_buffer(incremental_state).get("prev_key")
                past = prev_key.size(2) if prev_key is not None else 0
            attn_mask = causal_additive_mask(query.size(0), past + query.size(0), query)  # (self-attention)
        if need_head_weights and incremental_state is None:
            # fairseq's fast path (F.multi_head_attention_forward) averages the
            # heads even when per-head weights are asked for; static_kv=True,
            # a no-op without incremental state, selects its explicit path.
            static_kv = True
        with without_cudnn_attention(query.device):  # fairseq's fast path runs scaled_dot_product_attention
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
        if self.diag_scale != 1.0:
            # Scale q_i . k_i / sqrt(d_h) itself: query i's own key is key i + S - T, the diagonal of the last T
            # columns (a view, scaled in a copy of the scores); a padded diagonal stays -inf (0 * -inf or a
            # negative factor would turn it into NaN or +inf).
            scores = scores.clone()
            own = scores[..., src_len - tgt_len:].diagonal(dim1=-2, dim2=-1)
            own.copy_(torch.where(torch.isfinite(own), own * self.diag_scale, own))
        hidden = None
        if attn_mask is not None:
            scores = scores + attn_mask.unsqueeze(0)
            hidden = ~torch.isfinite(scores).view(bsz, self.num_heads, tgt_len, src_len)  # what the caller's mask hides
        scores = scores.view(bsz, self.num_heads, tgt_len, src_len)  # fairseq's (B*H) rows are b * H + h
        weights_float = causal_softmax(scores, key_padding_mask, self.diag_free, hidden).view(
            bsz * self.num_heads, tgt_len, src_len)
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
