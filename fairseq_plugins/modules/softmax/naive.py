"""Tensor-level naive reference of ``softmax`` attention: Vaswani et al. 2017,
eq. 1, Attention(Q, K, V) = softmax(Q K^T / sqrt(d_h)) V per head, written in
explicit loops over batch, heads, queries and keys; with the diagonal
ablations of the Bird-Eye Transformer paper (Sha et al. 2022, section 4) in
causal self-attention."""
import math
from typing import Optional

import torch
from torch import Tensor


def naive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    num_heads: int,
    key_padding_mask: Optional[Tensor] = None,
    causal: bool = False,
    diag_free: bool = False,
    diag_scale: float = 1.0,
) -> Tensor:
    """Multi-head softmax attention of projected queries, keys and values.

    q: T x B x C (x W_q + b_q), k, v: S x B x C (C = num_heads * d_h);
    key_padding_mask: B x S, True at pads (hidden from every query);
    causal: query i is the (i + S - T)-th token and sees keys j <= i + S - T;
    diag_free (causal only): keys j < i + S - T, and a query with no such real
    key sees its own key only; diag_scale (causal only): the diagonal score
    q_i . k_i / sqrt(d_h) is multiplied by it before the softmax.
    Returns the concatenated heads, T x B x C (before the output projection);
    a query without any visible key gets zeros.
    """
    tgt_len, bsz, _ = q.shape
    src_len = k.shape[0]
    head_dim = q.shape[-1] // num_heads
    out = q.new_zeros(tgt_len, bsz, num_heads * head_dim)
    for b in range(bsz):
        for h in range(num_heads):
            sl = slice(h * head_dim, (h + 1) * head_dim)
            scores = q[:, b, sl] @ k[:, b, sl].T / math.sqrt(head_dim)  # eq. 1: Q K^T / sqrt(d_h), T x S
            real = [True] * src_len if key_padding_mask is None else (~key_padding_mask[b].bool()).tolist()
            allowed = torch.zeros(tgt_len, src_len, dtype=torch.bool)
            for i in range(tgt_len):
                own = i + src_len - tgt_len  # the query's own key
                for j in range(src_len):
                    if not causal:
                        allowed[i, j] = real[j]
                    elif diag_free:
                        allowed[i, j] = real[j] and j < own
                    else:
                        allowed[i, j] = real[j] and j <= own
                if causal and diag_free and not allowed[i].any() and real[own]:
                    allowed[i, own] = True
                if causal:
                    scores[i, own] = scores[i, own] * diag_scale
            scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # eq. 1: softmax(.)
            out[:, b, sl] = weights @ v[:, b, sl]  # eq. 1: (.) V
    return out
