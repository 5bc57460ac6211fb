"""Costs of the ``cosformer`` kind (``register_attention(costs=...)``)."""
from ..costs import AttentionCosts, projection_macs, projection_parameters
from ..registry import ENCODER_DECODER
from .chunked import DEFAULT_CHUNK_SIZE, SEGMENT_BYTES


def _parameters(placement, d, heads, kdim, options):
    return projection_parameters(d, kdim)


def _macs(placement, d, heads, queries, keys, kdim, options):
    """The linear form of eq. 10, cos and sin parts, with the normaliser as an extra
    all-ones value column (as computed above): phi(K)^T [V 1] and phi(Q) (phi(K)^T [V 1]),
    2 (S + T) d (d_h + 1); the causal form counted the same (its prefix sums are additions)."""
    return projection_macs(d, queries, keys, kdim) + 2 * (queries + keys) * d * (d // heads + 1)


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # the running sums of eq. 10, cos and sin parts: per head d_h x (d_h + 1) each (B,H,2,D,E+1);
    # encoder-decoder attention also keeps the source keys (for attention weights on request): all of
    # them, length = k*S with --encoder-decoder-connect k (the running sums stay d_h x (d_h + 1))
    state = 2 * d * (d // heads + 1)
    return state + (length * d if placement == ENCODER_DECODER else 0)


def running_sum_flops(length, heads, head_dim, chunk, element_size=4, batch=1):
    """The running sums of one pass of the chunked causal form: per segment of s chunks, one product
    of an (s+1) x (s+1) triangular matrix of ones with the (s+1) states of the cos and sin parts, values
    (d_h x d_h per head) and denominator (d_h x 1)."""
    bh = batch * heads
    n = -(-length // chunk)
    per_chunk = bh * chunk * head_dim * element_size
    seg_chunks = max(1, SEGMENT_BYTES // per_chunk)
    total = 0
    for first in range(0, n, seg_chunks):
        s1 = min(seg_chunks, n - first) + 1
        if s1 > 1:
            total += 2 * 2 * s1 * s1 * bh * head_dim * (head_dim + 1)
    return total


def implementation_layer_flops(length, embed_dim, heads, options, chunk=None, **settings):
    """The chunked causal form (``_ChunkedCausalCosformer``), its hand-written backward counted product
    by product; ``chunk``: the chunk size (default ``DEFAULT_CHUNK_SIZE``)."""
    T, d, h = length, embed_dim, heads
    dh = d // h
    proj = 2 * T * d * d  # one d x d linear map
    c = max(1, min(chunk or DEFAULT_CHUNK_SIZE, T))
    n = -(-T // c)  # chunks (the last one zero-padded)
    reading = n - 1  # chunk 0 has no earlier state to read
    running = running_sum_flops(T, h, dh, c)
    intra = 2 * c * c * dh  # one C x C x d_h product, per chunk and head
    state = 2 * c * dh * dh  # one C x d_h x d_h product, per chunk, head and part (cos, sin)
    den = 2 * c * dh  # one C x d_h x 1 product (the denominator's states)
    fwd_core = h * (n * 2 * intra + n * 2 * state + reading * 2 * (state + den)) + running
    # backward: scores recomputed, then dV, dA, dQ, dK (5 intra products); states recomputed (2 parts);
    # queries' reads: dQ and the states' gradients (2 products per part, plus the denominator's 2 x C x 2
    # products); keys and values: dK and dV from the states' gradients (2 per part, plus dK's C x 2 x d_h);
    # the running sums forward (recomputed) and in reverse
    bwd_core = h * (n * 5 * intra + n * 2 * state + reading * (4 * state + 2 * 2 * den) + n * (4 * state + 2 * den)) + 2 * running
    return 4 * proj + fwd_core, 8 * proj + bwd_core


COSFORMER_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="constant",
    asymptotic_class="O(T)",
    implementation_flops=implementation_layer_flops,
    implementation_flops_text="8 T d^2; per head, chunks of C = {chunk}: intra-chunk 4 T C d_h (scores, values), states "
    "4 T d_h^2 (cos, sin), reads of the earlier chunks' states 4 (T - C) d_h^2, running sums of the states per segment; "
    "forward about 8 T d^2 + 4 T C d + 8 T d d_h. Backward (hand-written, counted product by product): "
    "16 T d^2 + 10 T C d + 20 T d d_h + twice the running sums",
)
