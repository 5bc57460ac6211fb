"""The public reference's causal cosFormer (the authors' ``cosformer.py``), a baseline of the speed
benchmark (``REFERENCE_CUMSUM``, registered with the kind's costs): it materialises the T x 2d x d
cumulative sum of the cos/sin-weighted k v^T outer products, which the chunked form avoids."""
import math

import torch

from ..costs import Baseline


def cosformer_reference_cumsum(q, k, v, angle, eps=1e-6):
    """Causal cosFormer as in the authors' ``cosformer.py``: q, k (after ReLU), v: (N, L, d)
    with N = batch * heads; angle: (N or 1, L, 1). Materialises (N, L, 2d, d) tensors."""
    # (N, L, 2d): [x sin, x cos] features, as in the reference.
    q_ = torch.cat([q * torch.sin(angle), q * torch.cos(angle)], dim=-1)
    k_ = torch.cat([k * torch.sin(angle), k * torch.cos(angle)], dim=-1)
    # (N, L, 2d) (N, L, d) -> (N, L, 2d, d)
    kv_ = torch.einsum("nld,nlm->nldm", k_, v)
    # (N, L, 2d, d) -> (N, L, 2d, d)
    kv_cum = torch.cumsum(kv_, dim=1)
    # (N, L, 2d) (N, L, 2d, d) -> (N, L, d)
    qkv = torch.einsum("nld,nldm->nlm", q_, kv_cum)
    # (N, L, 2d) -> (N, L, 2d)
    k_cum = torch.cumsum(k_, dim=1)
    # (N, L, 2d) (N, L, 2d) -> (N, L)
    denom = torch.clamp_min(torch.einsum("nlm,nlm->nl", q_, k_cum), eps)
    return qkv / denom.unsqueeze(-1)


class ReferenceCumsumAttention(torch.nn.Module):
    """The projections, ReLU feature map and output projection of a cosFormer module, with the
    reference's cumulative-sum causal attention in between. Positions and horizon follow our module
    (angle = pi/2 * i / M, i from 0), so both compute the same function; the authors' 1-based index
    with M = T changes only constants, not cost."""

    def __init__(self, cosformer_module):
        super().__init__()
        m = cosformer_module
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = m.q_proj, m.k_proj, m.v_proj, m.out_proj
        self.num_heads, self.head_dim, self.horizon, self.eps = m.num_heads, m.head_dim, m.horizon, m.eps

    def forward(self, query, key=None, value=None, **unused):
        tgt_len, bsz, embed_dim = query.shape

        def split(x):  # (L, B, E) -> (B * h, L, d)
            return x.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)

        q = split(torch.relu(self.q_proj(query)))
        k = split(torch.relu(self.k_proj(query)))
        v = split(self.v_proj(query))
        angle = (math.pi / 2) * torch.arange(tgt_len, dtype=q.dtype, device=q.device).view(1, -1, 1) / self.horizon
        out = cosformer_reference_cumsum(q, k, v, angle, self.eps)
        out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


def reference_flops(length, embed_dim, heads, options, **settings):
    """(forward, backward) FLOPs of one forward+backward of ``ReferenceCumsumAttention`` on T tokens of one
    sequence: per head and token the 2 d_h x d_h outer product k_ v^T (1 FLOP each), its cumulative sum
    (1 each), the (1 x 2 d_h) (2 d_h x d_h) read (2 each); denominator: cumsum of k_ and a 2 d_h dot
    product. Backward twice the forward."""
    T, d, h = length, embed_dim, heads
    dh = d // h
    proj = 2 * T * d * d  # one d x d linear map
    core = h * T * (2 * dh * dh + 2 * dh * dh + 2 * 2 * dh * dh + 2 * dh + 2 * 2 * dh)
    return 4 * proj + core, 8 * proj + 2 * core


def reference_peak_bytes(length, embed_dim, heads, options):
    """kv_, kv_cum and their gradients: ~4.5 tensors of (h, T, 2 d_h, d_h) (4.7 GB measured at T = 4096,
    d = 512, 8 heads)."""
    head_dim = embed_dim // heads
    return 4.5 * heads * length * 2 * head_dim * head_dim * 4


REFERENCE_CUMSUM = Baseline(
    name="cosformer_reference_cumsum",
    build=ReferenceCumsumAttention,
    description="the public reference's causal formulation (the authors' `cosformer.py`: "
    "`einsum('nld,nlm->nldm', k_, v)`, `cumsum` over L, `einsum('nld,nldm->nlm', q_, kv_cum)`, the denominator "
    "likewise) between the same projections, which materialises the T x 2d x d cumulative sum of the "
    "cos/sin-weighted k v^T outer products",
    training_flops=reference_flops,
    training_flops_text="8 T d^2; per head and token the 2 d_h x d_h outer product k_ v^T and its cumulative "
    "sum (1 FLOP per element each) and the read q_ (k v)_cum (2 per element): 8 T d d_h (+ the denominator, 6 T d). "
    "Backward twice the forward",
    training_peak_bytes=reference_peak_bytes,
    time_growth=lambda t1, t2, embed_dim, heads, options: (t2 / t1, "cumulative sums: O(T d d_h)"),
    check_settings={"chunk_size": 16},  # T = 50: four chunks
)
