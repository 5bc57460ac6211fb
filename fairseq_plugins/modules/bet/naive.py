"""Tensor-level naive reference of ``bet``, Bird-Eye attention (Sha et al. 2022,
"Bird-Eye Transformers for Text Generation Models"), eqs. 6-10 in explicit
loops over batch, heads and tokens. Causal self-attention: queries, keys and
values are the same T tokens."""
import math
from typing import Optional

import torch
from torch import Tensor


def naive_token_scores(
    q: Tensor, k: Tensor, v: Tensor, score_weight: Tensor, num_heads: int, key_padding_mask: Optional[Tensor] = None, shared: bool = False
) -> Tensor:
    """Eqs. 6-7: R of every token.

    q, k, v: T x B x C projections of the layer input (C = num_heads * d_h);
    score_weight: H x 2 d_h (per head, row h = [w_H ; w_K] of head h) or 2 C
    (``shared``: [w_H ; w_K] over the concatenations of all heads, head-major);
    key_padding_mask: B x T, True at pads.
    Returns R: B x H x T (per head) or B x 1 x T (shared).
    """
    tgt_len, bsz, _ = q.shape
    heads, dim = num_heads, q.shape[-1] // num_heads
    w = score_weight
    r = q.new_zeros(bsz, 1 if shared else heads, tgt_len)
    for b in range(bsz):
        real = [True] * tgt_len if key_padding_mask is None else (~key_padding_mask[b].bool()).tolist()
        hidden = []
        for h in range(heads):
            sl = slice(h * dim, (h + 1) * dim)
            m_dp = q[:, b, sl] @ k[:, b, sl].T / math.sqrt(dim)  # eq. 6: M_dp = Q K^T / sqrt(d_h), T x T
            causal = torch.tensor([[real[j] and j <= i for j in range(tgt_len)] for i in range(tgt_len)])
            a = torch.softmax(m_dp.masked_fill(~causal, float("-inf")), dim=-1).nan_to_num(0.0)  # eq. 6: A
            hidden.append(a @ v[:, b, sl])  # eq. 6: H = A V, T x d_h
        for j in range(tgt_len):  # eq. 7: R_j = sigmoid(w^T [H_j ; K_j])
            if not shared:
                for h in range(heads):
                    r[b, h, j] = torch.sigmoid(w[h] @ torch.cat([hidden[h][j], k[j, b, h * dim : (h + 1) * dim]]))
            else:  # one w over the concatenation of all heads' H_j and K_j
                r[b, 0, j] = torch.sigmoid(w @ torch.cat([torch.cat([hidden[h][j] for h in range(heads)]), k[j, b]]))
    return r


def naive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    token_scores: Tensor,
    num_heads: int,
    key_padding_mask: Optional[Tensor] = None,
    diag_free: bool = True,
) -> Tensor:
    """Eqs. 8-10 given the token scores R of eq. 7 (``naive_token_scores``).

    q, k, v: T x B x C; token_scores: B x H x T or B x 1 x T; key_padding_mask:
    B x T, True at pads; diag_free: the diagonal-free mask of eq. 9 (keys j < i;
    a query with no such real key sees itself only), else the causal mask.
    Returns the concatenated heads H', T x B x C (before the output projection).
    """
    tgt_len, bsz, _ = q.shape
    heads, dim = num_heads, q.shape[-1] // num_heads
    r = token_scores
    out = q.new_zeros(tgt_len, bsz, heads * dim)
    for b in range(bsz):
        real = [True] * tgt_len if key_padding_mask is None else (~key_padding_mask[b].bool()).tolist()
        for h in range(heads):
            sl = slice(h * dim, (h + 1) * dim)
            m_dp = q[:, b, sl] @ k[:, b, sl].T / math.sqrt(dim)  # eq. 6: M_dp, T x T
            m_prime = m_dp * r[b, h if r.size(1) > 1 else 0][None, :]  # eq. 8: column j times R_j
            allowed = torch.zeros(tgt_len, tgt_len, dtype=torch.bool)
            for i in range(tgt_len):
                for j in range(tgt_len):
                    allowed[i, j] = real[j] and (j < i if diag_free else j <= i)
                if diag_free and not allowed[i].any() and real[i]:
                    allowed[i, i] = True  # no other visible key: the token itself
            a_prime = torch.softmax(m_prime.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)  # eq. 9
            out[:, b, sl] = a_prime @ v[:, b, sl]  # eq. 10: H' = A' V
    return out
