"""Non-causal cosFormer (encoder self-attention): eq. 10, the sums over all keys
shared by every query."""
import torch
from torch import Tensor

from ..precision import without_autocast


@without_autocast
def cosformer_bidirectional(q: Tensor, k: Tensor, v1: Tensor, q_angle: Tensor, k_angle: Tensor, eps: float) -> Tensor:
    """Non-causal cosFormer, eq. 10. q: B,H,T,D; k: B,H,S,D; v1: B,H,S,E (last column: 1 for real keys);
    angles: B,1,T,1 and B,1,S,1. Returns B,H,T,E-1. Runs with autocast off (sums over all keys: see
    ``CosformerAttention.forward``)."""
    kv_cos = (k * torch.cos(k_angle)).transpose(-1, -2) @ v1  # B,H,D,E
    kv_sin = (k * torch.sin(k_angle)).transpose(-1, -2) @ v1
    out = (q * torch.cos(q_angle)) @ kv_cos + (q * torch.sin(q_angle)) @ kv_sin
    return out[..., :-1] / out[..., -1:].clamp_min(eps)
