"""Costs of the ``softmax`` kind (``register_attention(costs=...)``; the interface and the
shared counting helpers: ``modules/costs.py``)."""
from ..costs import (
    AttentionCosts,
    Counts,
    OperationCounts,
    SpeedBenchmark,
    activation_bytes,
    attention_core_growth,
    attention_width,
    linear,
    linear_parameters,
    projection_macs,
    projection_parameters,
    visible_pairs,
)
from ..registry import DECODER_SELF


# Counted as defined (``modules/costs.py``; per-operation conventions in
# ``fairseq_plugins/complexity.py``).
def softmax_attention(d: int, heads: int, queries: int, pairs: int) -> Counts:
    """Per-operation counts of multi-head softmax self-attention with Q, K, V and
    output projections (fairseq's MultiheadAttention) for ``queries`` new tokens
    that together attend to ``pairs`` (query, key) pairs."""
    if d % heads:
        raise ValueError(f"d = {d} is not divisible by {heads} heads")
    return (
        # q, k, v of the new tokens (earlier keys and values are cached when decoding)
        linear(queries, d, 3 * d)
        # q * 1/sqrt(d_h)
        + Counts(multiplications=queries * d)
        # scores q_i . k_j: per pair and head a dot product of length d_h = d / h
        + Counts(multiplications=pairs * d, additions=pairs * (d - heads))
        # softmax per query and head over its keys: one exp and one division
        # per pair and head; the normaliser of a query with m keys: m - 1 additions
        + Counts(exponentiations=pairs * heads, divisions=pairs * heads, additions=(pairs - queries) * heads)
        # sum_j a_ij v_j: per pair one d_h-vector scaled in every head (d mult.),
        # per query (m - 1) d additions
        + Counts(multiplications=pairs * d, additions=(pairs - queries) * d)
        # output projection
        + linear(queries, d, d)
    )


def softmax_parameters(d: int) -> int:
    return 4 * linear_parameters(d, d)  # W_q, W_k, W_v, W_o with biases


def softmax_training(d: int, heads: int, n: int) -> Counts:
    """A causal pass over n tokens: token i attends to i keys, n(n+1)/2 pairs."""
    return softmax_attention(d, heads, queries=n, pairs=n * (n + 1) // 2)


def softmax_step(d: int, heads: int, t: int) -> Counts:
    """The t-th token attends to t keys (t - 1 cached and its own)."""
    return softmax_attention(d, heads, queries=1, pairs=t)


def _parameters(placement, d, heads, kdim, options):
    return projection_parameters(d, kdim, attention_width(d, options))


def _macs(placement, d, heads, queries, keys, kdim, options):
    """Projections, then q . k and a . v over the visible (query, key) pairs only
    (fairseq's implementation computes the whole T x S matrices and masks them)."""
    diag_free = options.softmax_diag_free and placement == DECODER_SELF
    a = attention_width(d, options)
    return projection_macs(d, queries, keys, kdim, a) + 2 * visible_pairs(placement, queries, keys, diag_free) * a


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # fairseq's prev_key and prev_value: every decoded token's (or source token's) k and v
    return 2 * length * attention_width(d, options)


def implementation_layer_flops(length, embed_dim, heads, options, **settings):
    """fairseq's MultiheadAttention: the four projections, Q K^T and A V over all T x T pairs (the
    additive future mask hides keys, it does not skip them); backward: twice the projections, and
    fused attention recomputes the scores (5 products for the forward's 2)."""
    T, d = length, embed_dim
    proj = 2 * T * d * d  # one d x d linear map
    core = 4 * T * T * d
    return 4 * proj + core, 8 * proj + 2.5 * core


def implementation_peak_bytes(length, embed_dim, heads, options):
    """fairseq's T x T float future mask, and fused scaled_dot_product_attention, which keeps no (h, T, T)
    tensors (fairseq's explicit path would need about (3 h + 1) T^2 floats)."""
    return 4 * length * length + 1.6 * activation_bytes(length, embed_dim)


SOFTMAX_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="per token",
    asymptotic_class="O(T^2)",
    options_from=lambda options, context: {"softmax_diag_free": options.softmax_diag_free},
    option_defaults={"softmax_diag_free": False},  # decoder self-attention only
    implementation_flops=implementation_layer_flops,
    implementation_flops_text="4 projections 8 T d^2; Q K^T and A V over all T^2 pairs (the additive future mask does "
    "not skip work) 4 T^2 d. Backward: 16 T d^2 + 10 T^2 d (fused attention recomputes the scores: 5 products for the "
    "forward's 2)",
    implementation_peak_bytes=implementation_peak_bytes,
    implementation_time_growth=attention_core_growth,
    # the standard attention: the speed benchmark's ratios are to it
    speed_benchmark=SpeedBenchmark(ratio_reference=True),
    operation_counts=OperationCounts(
        label="softmax self-attention",
        training=lambda d, heads, n, options: softmax_training(d, heads, n),
        step=lambda d, heads, t, options: softmax_step(d, heads, t),
        per_head=True,
    ),
)
