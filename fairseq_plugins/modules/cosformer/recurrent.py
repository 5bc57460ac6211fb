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
    # [x cos a, x sin a] as one product of x and [cos a, sin a] (a step is a few dozen small operations:
    # each one counts)
    trig = torch.stack([cos_a, sin_a], dim=-2)  # B,1,1,2,1
    k2 = (k.unsqueeze(-2) * trig).view(bsz, heads, 2, dim, 1)  # [k cos a, k sin a] as B,H,2,D,1
    v1 = v1.view(bsz, heads, 1, 1, e_dim + 1)
    # state + k2 v1^T, the outer product broadcast in one out-of-place call: one B,H,2,D,E+1 allocation (they
    # dominate a step's time), and no batched matrix product of inner size 1 (several times slower on the
    # CPU); the state itself is left as it is (a beam may share it).
    # (a full pass's state may be strided otherwise: made contiguous once, the steps' own states are)
    new_state = k2 * v1 if state is None else torch.addcmul(state.contiguous(), k2, v1)
    out = (q.unsqueeze(-2) * trig).view(bsz, heads, 1, 2 * dim) @ new_state.view(bsz, heads, 2 * dim, e_dim + 1)
    return out[..., :-1] / out[..., -1:].clamp_min(eps), new_state
