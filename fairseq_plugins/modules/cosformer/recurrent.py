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
    if state is None:
        new_state = k2.transpose(-1, -2) @ v1  # B,H,2D,E+1
    else:
        # state + k2^T v1 in one out-of-place call: one B,H,2D,E+1 allocation instead of two (the outer
        # product, then the sum), which dominate a step's time; the state itself is left as it is (a beam
        # may share it).
        rows = bsz * heads
        new_state = torch.baddbmm(state.reshape(rows, 2 * dim, e_dim + 1), k2.reshape(rows, 1, 2 * dim).transpose(1, 2),
                                  v1.reshape(rows, 1, e_dim + 1)).view(bsz, heads, 2 * dim, e_dim + 1)
    out = torch.cat([q * cos_a, q * sin_a], dim=-1) @ new_state  # B,H,1,E+1
    return out[..., :-1] / out[..., -1:].clamp_min(eps), new_state.view(bsz, heads, 2, dim, e_dim + 1)
