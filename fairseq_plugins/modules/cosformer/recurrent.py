"""Causal cosFormer, one token at a time (decoding): the recurrent form of eq. 10,
a constant-size state of running sums per head."""
import torch

from ..precision import without_autocast


@without_autocast
def causal_step(q, k, v, u, cos_a, sin_a, eps, state):
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
