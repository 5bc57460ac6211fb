"""Costs of the ``cosformer`` kind (``register_attention(costs=...)``), and what the speed benchmark
measures of it (``SpeedBenchmark``: its chunk sizes, the reference's cumulative-sum form as a baseline,
its targets)."""
from ..costs import (
    AttentionCosts,
    SettingSweep,
    SpeedBenchmark,
    SpeedTarget,
    attention_width,
    projection_macs,
    projection_parameters,
)
from ..registry import DECODER_SELF, ENCODER_DECODER
from .chunked import DEFAULT_CHUNK_SIZE, SEGMENT_BYTES
from .options import horizon_for
from .reference_cumsum import REFERENCE_CUMSUM


def _parameters(placement, d, heads, kdim, options):
    return projection_parameters(d, kdim, attention_width(d, options))


def _macs(placement, d, heads, queries, keys, kdim, options):
    """The linear form of eq. 10, cos and sin parts, with the normaliser as an extra
    all-ones value column (as computed above): phi(K)^T [V 1] and phi(Q) (phi(K)^T [V 1]),
    2 (S + T) a (d_h + 1) for attention width a = heads x d_h; the causal form counted the same
    (its prefix sums are additions)."""
    a = attention_width(d, options)
    return projection_macs(d, queries, keys, kdim, a) + 2 * (queries + keys) * a * (a // heads + 1)


def _decoding_state_elements(placement, d, heads, length, kdim, options):
    # the running sums of eq. 10, cos and sin parts: per head d_h x (d_h + 1) each (B,H,2,D,E+1);
    # encoder-decoder attention also keeps the source keys (for attention weights on request): all of
    # them, length = k*S with --encoder-decoder-connect k (the running sums stay d_h x (d_h + 1))
    a = attention_width(d, options)
    state = 2 * a * (a // heads + 1)
    return state + (length * a if placement == ENCODER_DECODER else 0)


def segment_chunks(heads, head_dim, chunk, element_size=4, batch=1):
    """Chunks per segment of the chunked causal form: whole chunks of at most ``SEGMENT_BYTES`` per
    (B*H, tokens, d_h) slice."""
    return max(1, SEGMENT_BYTES // (batch * heads * chunk * head_dim * element_size))


def running_sum_flops(length, heads, head_dim, chunk, element_size=4, batch=1):
    """The running sums of one pass of the chunked causal form: per segment of s chunks, one product
    of an (s+1) x (s+1) triangular matrix of ones with the (s+1) states of the cos and sin parts, values
    (d_h x d_h per head) and denominator (d_h x 1)."""
    bh = batch * heads
    n = -(-length // chunk)
    seg_chunks = segment_chunks(heads, head_dim, chunk, element_size, batch)
    total = 0
    for first in range(0, n, seg_chunks):
        s1 = min(seg_chunks, n - first) + 1
        if s1 > 1:
            total += 2 * 2 * s1 * s1 * bh * head_dim * (head_dim + 1)
    return total


def implementation_layer_flops(length, embed_dim, heads, options, chunk_size=None, **settings):
    """The chunked causal form (``_ChunkedCausalCosformer``), its hand-written backward counted product
    by product; ``chunk_size``: the module's (default ``DEFAULT_CHUNK_SIZE``)."""
    T, d, h = length, embed_dim, heads
    dh = d // h
    proj = 2 * T * d * d  # one d x d linear map
    c = max(1, min(chunk_size or DEFAULT_CHUNK_SIZE, T))
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


def implementation_notes(kind, run):
    """How the causal form is computed; the sizes quoted are computed from the code's constants at the
    report's longest T (no measurement lives here: the benchmark's chunk-size table is the run's)."""
    length, head_dim = max(run.lengths), run.embed_dim // run.heads
    segment_tokens = segment_chunks(run.heads, head_dim, DEFAULT_CHUNK_SIZE) * DEFAULT_CHUNK_SIZE  # batch 1, float32
    return IMPLEMENTATION_NOTES.format(segment_mb=SEGMENT_BYTES / 2 ** 20, segments=-(-length // segment_tokens),
                                       length=length, head_dim=head_dim, chunk=DEFAULT_CHUNK_SIZE)


IMPLEMENTATION_NOTES = """\
## How the causal cosFormer is computed

`fairseq_plugins/modules/cosformer/chunked.py`: `_ChunkedCausalCosformer` (a `torch.autograd.Function`), used by the
module and by `cosformer_causal`.

- **Chunked form.** Tokens are cut into chunks of C. Inside a chunk, the exact quadratic form
  `(Q K^T * decay) V` with one shared C x C matrix `decay[i, j] = cos(pi/2 (i - j) / M)` (i >= j). Across chunks,
  each query reads the sums over all earlier chunks, `S = sum_j k_j [cos a_j; sin a_j] v_j^T`, through its
  `q cos a_i` and `q sin a_i` features. No T x d x d tensor exists (the reference form keeps T of them).
- **Layout.** Tensors are chunked as (n, B, H, C, d), chunk index outermost: each per-chunk product is one batched
  matrix product over all chunks and heads, a range of chunks is a contiguous slice, and per-chunk states fill
  slots 1..n of a contiguous (2, n+1, B*H, d, d) tensor whose running sum (one product with a triangular matrix
  of ones per segment, which ran faster than `cumsum` over that dimension) turns slot i into the state before
  chunk i. Chunk 0's
  inter-chunk products are skipped when there is no incoming state.
- **No doubled or odd-sized products.** The cos and sin halves are separate tensors, and the denominator (the ones
  column of `v1`) has its own small d x 1 states, so every large product is {head_dim} x {head_dim} x C (products
  with one or d_h more output columns, i.e. the ones column appended or cos and sin side by side, ran slower per
  flop in micro-benchmarks). phi = ReLU of q and k, and the zeroing of padded keys, are fused into the
  copies that chunk them (the module hands over the raw projections).
- **Segments and a hand-written backward.** Forward and backward run over segments of whole chunks of at most
  {segment_mb:g} MB per (B*H, tokens, d) slice ({segments} segments at T = {length} in this report's layer), which
  keeps the working set in cache and the temporaries bounded whatever T is. The backward walks the segments in reverse and recomputes a segment's chunked inputs,
  intra-chunk weights and states from the state saved at its start, so the layer keeps only q, k, v, the output,
  the clamped denominator and one state per segment: memory O(T d) per head. Gradients are accumulated with
  in-place `baddbmm_`; since nothing but the layer holds its raw q, k, v projections, their gradients overwrite
  them (backpropagating twice through one graph of the layer is refused with an error), and output and gradients
  are written straight in fairseq's time-major layout, so the reshapes around the layer are free.
- **Decoding** (one new token with `incremental_state`) skips the chunk machinery: one outer product updates the
  2d x (d+1) state per head and one product reads it, so the cost per token does not depend on the prefix.
- **Chunk size.** `DEFAULT_CHUNK_SIZE = {chunk}`: a smaller C slows the per-chunk state products (their inner
  dimension is C), a larger one doubles the intra-chunk part (2 T C d per head and pass) with every doubling of C.
  The chunk-size table above times the whole layer at several C in this run; the four d x d projections
  (forward and backward) take much of the layer's time, so the differences there are small. Any C gives the same
  result.
"""

SPEED_BENCHMARK = SpeedBenchmark(
    sweeps={"chunk_size": SettingSweep(values=(32, 64, 128), default=DEFAULT_CHUNK_SIZE)},
    baselines=(REFERENCE_CUMSUM,),
    targets=(
        SpeedTarget("softmax", 8192, "time", 8),
        SpeedTarget("softmax", 8192, "memory", 1),
        SpeedTarget(REFERENCE_CUMSUM.name, 4096, "time", 25),
        SpeedTarget(REFERENCE_CUMSUM.name, 4096, "memory", 6),
    ),
    memory_above_reference="cosFormer needs more memory than {reference} at T = {lengths} ({measure}): there its own "
    "temporaries (one segment of chunks, see below) outweigh its O(T d) tensors.",
    notes={
        "setup": lambda kind, run: f"cosFormer horizon M = {horizon_for(DECODER_SELF, run.kind_options[kind], run.context)}, "
        f"chunk size C = {DEFAULT_CHUNK_SIZE}",
        "implementation": implementation_notes,
    },
)

COSFORMER_COSTS = AttentionCosts(
    parameters=_parameters,
    macs=_macs,
    decoding_state_elements=_decoding_state_elements,
    decoding_state_growth="constant",
    asymptotic_class="O(T)",
    implementation_flops=implementation_layer_flops,
    implementation_flops_text=f"8 T d^2; per head, chunks of C = {DEFAULT_CHUNK_SIZE}: intra-chunk 4 T C d_h (scores, values), states "
    "4 T d_h^2 (cos, sin), reads of the earlier chunks' states 4 (T - C) d_h^2, running sums of the states per segment; "
    "forward about 8 T d^2 + 4 T C d + 8 T d d_h. Backward (hand-written, counted product by product): "
    "16 T d^2 + 10 T C d + 20 T d d_h + twice the running sums",
    implementation_time_growth=lambda t1, t2, embed_dim, heads, options: (t2 / t1, "chunked form: O(T (C + d_h) d)"),
    speed_benchmark=SPEED_BENCHMARK,
)
