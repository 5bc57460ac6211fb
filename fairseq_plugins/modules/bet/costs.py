"""Costs of the ``bet`` kind (``register_attention(costs=...)``): those of softmax
attention, twice (two T x S softmaxes per head), plus the token scores."""
from ..costs import (
    AttentionCosts,
    activation_bytes,
    attention_core_growth,
    attention_width,
    projection_macs,
    projection_parameters,
    visible_pairs,
)


def _parameters(placement, d, heads, kdim, options):
    a = attention_width(d, options)
    return projection_parameters(d, kdim, a) + 2 * a  # w: heads x 2 d_h (per-head) or 2 a (shared)


def _macs(placement, d, heads, queries, keys, kdim, options):
    """Softmax's q . k and a . v (eq. 6), the token scores w^T [H_j; K_j] (eq. 7, 2 a per
    token for attention width a), and A' V (eq. 10) over the pairs of the second mask."""
    a = attention_width(d, options)
    first = visible_pairs(placement, queries, keys)
    second = visible_pairs(placement, queries, keys, options.bet_diag_free)
    return projection_macs(d, queries, keys, kdim, a) + 2 * first * a + 2 * queries * a + second * a


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # prev_key, prev_value and the token scores R (eq. 7) of every decoded token: one per head, or one shared
    scores_per_token = heads if options.bet_score_weights == "per-head" else 1
    return length * (2 * attention_width(d, options) + scores_per_token)


def implementation_layer_flops(length, embed_dim, heads, options, **settings):
    """Two fused causal attentions: queries 0..T-1 over keys <= i (T(T+1)/2 pairs), then the
    diagonal-free one, queries 1..T-1 over keys < i ((T-1)T/2 pairs): T^2 pairs, 2 products of 2 d_h
    FLOPs per pair and head; plus eq. 7's token scores (2 products of T x d_h by d_h per head).
    Backward: twice the projections and scores, fused attention recomputes the scores (5 for 2)."""
    T, d = length, embed_dim
    proj = 2 * T * d * d  # one d x d linear map
    pairs = T * (T + 1) // 2 + (T - 1) * T // 2
    core = 4 * pairs * d
    scores = 2 * 2 * T * d
    return 4 * proj + core + scores, 8 * proj + 2.5 * core + 2 * scores


def implementation_peak_bytes(length, embed_dim, heads, options):
    """Fused scaled_dot_product_attention (no T x T tensors kept; 388 MB measured at T = 8192, d = 512 on
    CPU) with a T^2 allowance for the kernels' buffers."""
    return 8 * length * length + 1.6 * activation_bytes(length, embed_dim)


BET_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="per token",
    asymptotic_class="O(T^2)",
    options_from=lambda options, context: {
        "bet_diag_free": not options.bet_no_diag_free,
        "bet_score_weights": options.bet_score_weights,
    },
    option_defaults={"bet_diag_free": True, "bet_score_weights": "per-head"},
    implementation_flops=implementation_layer_flops,
    implementation_flops_text="8 T d^2; two fused causal attentions (the second diagonal-free), T(T+1)/2 + T(T-1)/2 = "
    "T^2 visible pairs, 2 products each: 4 T^2 d; eq. 7's token scores 4 T d. Backward: 16 T d^2 + 10 T^2 d + 8 T d "
    "(fused attention recomputes the scores). The kernels compute whole blocks on the diagonal, a few % more than "
    "the visible pairs",
    implementation_peak_bytes=implementation_peak_bytes,
    implementation_time_growth=attention_core_growth,
)
