"""Tensor-level naive reference of ``cosformer`` (Qin et al. 2022, "cosFormer:
Rethinking Softmax in Attention"): eq. 9 term by term, in explicit loops over
batch, heads, queries and keys, with this implementation's positions (counted
from each sequence's first real token) and horizon M (see ``attention.py``)."""
import math
from typing import Optional

import torch.nn.functional as F
from torch import Tensor


def naive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    num_heads: int,
    key_padding_mask: Optional[Tensor] = None,
    *,
    causal: bool,
    horizon: Optional[int],
    positions_from_keys: bool,
    key_copies: int = 1,
    eps: float,
) -> Tensor:
    """O_i = sum_j phi(q_i) phi(k_j)^T cos(pi/2 (p_i - p_j)/M) v_j
             / sum_j phi(q_i) phi(k_j)^T cos(pi/2 (p_i - p_j)/M)          (eq. 9)
    with phi = ReLU (eq. 6) and the re-weighting of eq. 8, over the real keys j
    (j <= i when ``causal``); the denominator clamped at ``eps``.

    q: T x B x C (x W_q + b_q, before phi), k, v: S x B x C (C = num_heads * d_h);
    key_padding_mask: B x S, True at pads. Key positions p_j count the real keys
    from the first real one, within each of ``key_copies`` equal parts of the
    keys (encoder-decoder attention over concatenated copies of one source).
    Query positions: those of the keys (self-attention, ``positions_from_keys``)
    or 0..T-1. horizon: M, or None for each sequence's number of real keys
    (encoder self-attention, the paper's M = N).
    Returns the concatenated heads, T x B x C (before the output projection).
    """
    tgt_len, bsz, _ = q.shape
    src_len = k.shape[0]
    dim = q.shape[-1] // num_heads
    q, k = F.relu(q), F.relu(k)  # eq. 6: phi = ReLU
    out = q.new_zeros(tgt_len, bsz, num_heads * dim)
    copy_len = src_len // key_copies
    for b in range(bsz):
        pad = key_padding_mask[b].bool().tolist() if key_padding_mask is not None else [False] * src_len
        real_keys = [j for j in range(src_len) if not pad[j]]
        key_pos = {}
        for c in range(key_copies):
            copy_keys = [j for j in real_keys if c * copy_len <= j < (c + 1) * copy_len]
            first_real = copy_keys[0] if copy_keys else 0
            key_pos.update({j: j - first_real for j in copy_keys})
        m = len(real_keys) if horizon is None else horizon
        if positions_from_keys:
            query_pos = {i: key_pos.get(i, 0) for i in range(tgt_len)}
        else:
            query_pos = {i: i for i in range(tgt_len)}
        for h in range(num_heads):
            sl = slice(h * dim, (h + 1) * dim)
            for i in range(tgt_len):
                numerator = q.new_zeros(dim)
                denominator = q.new_zeros(())
                for j in real_keys:
                    if causal and j > i:
                        continue
                    # eq. 8: phi(q_i) phi(k_j)^T cos(pi/2 (p_i - p_j)/M)
                    weight = (q[i, b, sl] @ k[j, b, sl]) * math.cos(math.pi / 2 * (query_pos[i] - key_pos[j]) / m)
                    numerator = numerator + weight * v[j, b, sl]
                    denominator = denominator + weight
                out[i, b, sl] = numerator / denominator.clamp_min(eps)  # eq. 9
    return out
