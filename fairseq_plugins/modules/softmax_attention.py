"""``softmax``: fairseq's own scaled dot-product multi-head attention
(Vaswani et al. 2017, eq. 1: softmax(QK^T / sqrt(d)) V), registered as an
attention kind so that mixed models can choose it per layer.
"""
import math
from typing import Optional

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .registry import DECODER_SELF, ENCODER_DECODER, PLACEMENTS, register_attention


def causal_additive_mask(tgt_len: int, src_len: int, like: Tensor) -> Tensor:
    """fairseq's future mask: -inf above the diagonal, aligned to the last query."""
    offset = src_len - tgt_len
    return torch.triu(utils.fill_with_neg_inf(like.new_zeros(tgt_len, src_len)), 1 + offset)


def naive_softmax_attention(module, query, key, value, key_padding_mask=None):
    """Explicit per-head softmax(q k^T / sqrt(d_h)) v with the module's weights."""
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
            allowed = torch.ones(tgt_len, src_len, dtype=torch.bool)
            if module.causal:
                allowed &= torch.ones(tgt_len, src_len, dtype=torch.bool).tril(src_len - tgt_len)
            if key_padding_mask is not None:
                allowed &= ~key_padding_mask[b].bool()[None, :]
            scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
            out[:, b, sl] = weights @ v[:, b, sl]
    return torch.nn.functional.linear(out, module.out_proj.weight, module.out_proj.bias)


@register_attention(
    "softmax",
    placements=PLACEMENTS,
    naive_reference=naive_softmax_attention,
    description="fairseq's scaled dot-product multi-head attention (O(T^2))",
)
class SoftmaxAttention(MultiheadAttention):
    """fairseq's MultiheadAttention, causal by construction in ``decoder_self``.

    fairseq's decoder passes its future mask; when called without one (as the
    conformance suite and the mixed decoder may do) the same mask is built here.
    """

    uses_future_mask = True
    returns_attention_weights = True

    def __init__(self, placement, embed_dim, num_heads, kdim=None, vdim=None, dropout=0.0, q_noise=0.0, qn_block_size=8):
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
        )

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
