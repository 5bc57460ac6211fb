"""Costs of the Extractor kinds (``register_attention(costs=...)``): counted as defined
(eqs. 23-29), the implementation's FLOPs (``implementation_flops``), peak memory and time growth, and
what the speed benchmark measures of them (``SpeedBenchmark``: the paper's window, the report's words)."""
import math

from ..costs import (
    AttentionCosts,
    Counts,
    OperationCounts,
    SpeedBenchmark,
    format_bytes,
    lag_terms,
    linear,
    linear_parameters,
)
from ..registry import ATTENTION_REGISTRY
from .conv import choose_conv_impl, fft_length
from .options import resolve_lags

# The Extractor paper's context window l (Chen 2023), the speed benchmark's
PAPER_LAGS = 128

# Counted as defined (eqs. 23-29, every lag term evaluated), not as the FFT
# convolution the implementation may choose for long windows.
EXTRACTOR_KINDS = ("extractor_she", "extractor_he", "extractor_we", "extractor_me")


def extractor(kind: str, d: int, queries: int, terms: int, output_projection: bool = True) -> Counts:
    """Per-operation counts of an Extractor for ``queries`` new tokens whose extraction
    sums have ``terms`` lag terms in all."""
    if kind not in EXTRACTOR_KINDS:
        raise ValueError(f"unknown Extractor {kind!r}; valid: {', '.join(EXTRACTOR_KINDS)}")
    counts = Counts()
    if kind == "extractor_he":
        counts += linear(queries, d, d)  # eq. 27: X_in = X W_in + b_in (cached when decoding)
    if kind == "extractor_she":
        # eq. 23: a position with m terms: m vector-matrix products (m d^2 mult.,
        # m d (d - 1) add.), their sum ((m - 1) d add.) and b_ext (d add.) = m d^2 add.
        counts += Counts(multiplications=terms * d * d, additions=terms * d * d)
    else:
        # eqs. 26, 28 (vector per lag) and 29 (scalar per lag times a d-vector):
        # m element-wise products (m d mult.), their sum ((m - 1) d add.) and b_ext (d add.)
        counts += Counts(multiplications=terms * d, additions=terms * d)
    if kind != "extractor_me":
        # eq. 24: X W_adj + b_adj, then the element-wise product with X_ext (d mult. per token)
        counts += linear(queries, d, d) + Counts(multiplications=queries * d)
        if output_projection:
            counts += linear(queries, d, d)  # eq. 25: X_adj W_out + b_out
    return counts


def extractor_parameters(kind: str, d: int, lags: int, output_projection: bool = True) -> int:
    if kind not in EXTRACTOR_KINDS:
        raise ValueError(f"unknown Extractor {kind!r}; valid: {', '.join(EXTRACTOR_KINDS)}")
    per_lag = {"extractor_she": d * d, "extractor_he": d, "extractor_we": d, "extractor_me": 1}[kind]
    params = lags * per_lag + d  # W_ext[1..l] (matrices, vectors or scalars) and b_ext
    if kind == "extractor_he":
        params += linear_parameters(d, d)  # W_in, b_in
    if kind != "extractor_me":
        params += linear_parameters(d, d)  # W_adj, b_adj
        if output_projection:
            params += linear_parameters(d, d)  # W_out, b_out
    return params


def extractor_training(kind: str, d: int, lags: int, n: int, output_projection: bool = True) -> Counts:
    """A pass over n tokens: token i sums min(i, l) lag terms."""
    return extractor(kind, d, queries=n, terms=lag_terms(range(1, n + 1), lags), output_projection=output_projection)


def extractor_step(kind: str, d: int, lags: int, t: int, output_projection: bool = True) -> Counts:
    """The t-th token sums min(t, l) lag terms."""
    return extractor(kind, d, queries=1, terms=lag_terms([t], lags), output_projection=output_projection)


def fft_flops(n, complex_input=False):
    """One FFT of length n: 2.5 n log2 n for a real transform (rfft / irfft), 5 n log2 n for a complex one
    (the usual count of a radix-2 FFT; mixed radix for 5-smooth n, counted alike)."""
    return (5.0 if complex_input else 2.5) * n * math.log2(max(n, 2))


def conv_path(cls, length, embed_dim, options):
    """The convolution path ("direct" or "fft") an Extractor class takes for a full pass over T tokens of one
    sequence: ``--extractor-conv-impl`` (cost option ``conv_impl``), and for ``auto`` its cost rule's choice."""
    if options.conv_impl != "auto":
        return options.conv_impl
    return choose_conv_impl(cls.lag_shape, 1, length, min(options.lags, length), embed_dim)


def implementation_layer_flops(cls, length, embed_dim, heads, options, conv_impl=None, **settings):
    """An Extractor class's convolution (``conv_impl``: "direct" or "fft", default the cost rule's choice
    for one sequence, ``conv_path``) and linear maps. Complex multiply-adds count 8, complex
    products 6, FFTs as ``fft_flops``; the adjustment's element-wise product is not counted."""
    T, d = length, embed_dim
    proj = 2 * T * d * d  # one d x d linear map
    lag_shape = cls.lag_shape
    taps = min(options.lags, T)
    impl = conv_impl or conv_path(cls, T, d, options)
    maps = int(cls.has_input_map) + (1 + int(options.output_projection)) * int(cls.has_adjustment)  # W_in, W_adj, W_out
    if impl == "direct":
        # conv1d: every output position multiplies taps lags of d x d (SHE) or d (depthwise) each;
        # backward: the input's and the weights' gradients, the same size each
        conv = 2 * T * taps * (d * d if lag_shape == "matrix" else d)
        return maps * proj + conv, 2 * maps * proj + 2 * conv
    n = fft_length(T + taps - 1)  # zero-padded, no circular wrap into the kept outputs
    freqs = n // 2 + 1
    kernel_cols = {"matrix": d * d, "vector": d, "scalar": 1}[lag_shape]
    # forward: rfft of the input (d columns) and of the kernel, irfft of the output (d columns); per
    # frequency a (1 x d) (d x d) complex product (SHE) or d complex products
    product = 8 * freqs * d * d if lag_shape == "matrix" else 6 * freqs * d
    fwd = (2 * d + kernel_cols) * fft_flops(n) + product
    # backward: an rfft of the output's gradient, complex FFTs of length n for the input's and the
    # kernel's gradients, and the products for the input's spectrum (as the forward's) and the kernel's
    # (SHE: a d x 1 by 1 x d outer product per frequency, one complex product per element)
    kernel_grad = 6 * freqs * d * d if lag_shape == "matrix" else product
    bwd = d * fft_flops(n) + (d + kernel_cols) * fft_flops(n, complex_input=True) + product + kernel_grad
    return maps * proj + fwd, 2 * maps * proj + bwd


def matrix_lags_peak_bytes(cls, length, embed_dim, heads, options):
    """SHE (d x d lags): the l d x d extraction weights and their gradient, the activations, and for the
    direct path conv1d's T x l d im2col buffer (2.73 GB measured at T = 8192, l = 128, d = 512); for the FFT
    path the (n/2+1) x d x d complex kernel spectrum, its gradient and the product."""
    lags = options.lags
    weights = 2 * lags * embed_dim * embed_dim * 4 + 60 * length * embed_dim * 4
    if conv_path(cls, length, embed_dim, options) == "fft":
        return weights + 3 * (fft_length(length + min(lags, length) - 1) // 2 + 1) * embed_dim * embed_dim * 8
    return weights + length * min(lags, length) * embed_dim * 4


def time_growth(cls, t1, t2, embed_dim, heads, options):
    """The direct convolution grows with T; the FFT path's with n log n, n the FFT length (5-smooth
    >= T + l - 1), about 2 log(2T) / log(T) per doubling, never below T's."""
    r = t2 / t1
    if "fft" in {conv_path(cls, t, embed_dim, options) for t in (t1, t2)}:
        n1, n2 = (fft_length(t + min(options.lags, t) - 1) for t in (t1, t2))
        fft = (n2 * math.log2(n2)) / (n1 * math.log2(n1))
        return max(r, fft), f"FFT path: O(n log n), n = {n1} -> {n2}"
    return r, "direct path: O(T l d^2)" if cls.lag_shape == "matrix" else "direct path: O(T l d)"


# The speed benchmark's report: the Extractors' words, alike for every one of them (quoted once).
def setup_note(kind, run):
    if run.options.conv_impl != "auto":
        path = f"convolution path `--extractor-conv-impl {run.options.conv_impl}`"
    else:
        path = "convolution path chosen by their cost rule (`--extractor-conv-impl auto`)"
    return f"extractors: l = {run.options.lags} lags, {path}; extractors have no heads"


def memory_note(kind, run):
    lags, d = run.options.lags, run.embed_dim
    return (f"The extractors' memory is O(T d) plus, for SHE, its l d x d weights' gradient (l = {lags}: "
            f"{format_bytes(lags * d * d * 4)}) and, on its direct path, conv1d's T x l d unfolded input.")


def decoding_note(kind, run):
    return (f"The extractors keep the last l = {run.options.lags} inputs, so their cost stops growing once the prefix "
            "exceeds l.")


def growth_note(kind, run):
    """The FFT path's bound, and which of the measured Extractors took it at which lengths."""
    lags, margin = run.options.lags, run.growth_margin
    parts = []
    for other in (k for k in run.kinds if k in EXTRACTOR_KINDS):
        path = ATTENTION_REGISTRY[other].costs.implementation_path
        on_fft = [t for t in run.lengths if path(t, run.embed_dim, run.heads, run.options) == "fft"]
        if on_fft:
            parts.append(other if len(on_fft) == len(run.lengths) else f"{other} at T = {', '.join(map(str, on_fft))}")
    taken = "taken here by " + ", ".join(parts) if parts else "not taken at these lengths"
    he = ATTENTION_REGISTRY["extractor_he"].costs
    return (
        f"The extractors' FFT path ({taken}) convolves over n points, n the smallest 5-smooth number >= T + l - 1, at "
        f"O(n log n): `<= {margin:g} x n2 log n2 / (n1 log n1)` (the FFT lengths n1, n2 of the two T; {margin:g} x "
        f"2 log(2T) / log(T) when n doubles exactly, as from 4096 (n = {fft_length(4096 + lags - 1)}) to 8192 "
        f"(n = {fft_length(8192 + lags - 1)}): {margin * he.time_growth(4096, 8192, run.embed_dim, run.heads, run.options)[0]:.2f} "
        f"for l = {lags}); the former flat {2 * margin:g} ignored the log factor."
    )


IMPLEMENTATION_NOTES = """\
## How the extractors are computed

`fairseq_plugins/modules/extractors/conv.py`: the extraction (eqs. 23, 26, 28, 29 of Chen 2023) is a causal
convolution over time with a kernel of l lags: d -> d channels for SHE, depthwise for WE and HE, one kernel
shared by all channels for ME. A full pass takes `conv1d` (direct) or an FFT convolution, whichever the cost rule
(`choose_conv_impl`: multiplications times a measured cost per multiplication) estimates faster for the batch,
length and l; both are exact. Time and memory are O(T l d^2) / O(T l d) for the direct path and O(T log T d) for
the FFT path: linear in T for a fixed window. Decoding keeps the last l inputs per layer, so a token costs
O(l d^2) (SHE) or O(l d) whatever the prefix.
"""

SPEED_BENCHMARK = SpeedBenchmark(
    model_options={"extractor_lags": PAPER_LAGS},
    notes={"setup": setup_note, "memory": memory_note, "decoding": decoding_note, "growth": growth_note,
           "implementation": lambda kind, run: IMPLEMENTATION_NOTES},
)


IMPLEMENTATION_FLOPS_TEXT = {
    "extractor_she": "W_adj, W_out 4 T d^2; direct path: conv1d with l d x d lags 2 T l d^2. FFT path (when the cost rule "
    "takes it): (2 d + d^2) real FFTs of n = 5-smooth >= T + l - 1 points (2.5 n log2 n each) and 8 (n/2+1) d^2. "
    "Backward twice the forward (FFT path: as counted in `layer_flops`)",
    "extractor_he": "W_in, W_adj, W_out 6 T d^2; FFT path: 3 d real FFTs of n points (2.5 n log2 n each) and "
    "6 (n/2+1) d for the complex products; backward: the projections twice, d real and 2 d complex FFTs "
    "(5 n log2 n each), two complex products. Direct path: depthwise conv1d 2 T l d, backward twice",
    "extractor_we": "W_adj, W_out 4 T d^2; the extraction as extractor_he (d-vector lags)",
    "extractor_me": "no projections; FFT path: (2 d + 1) real FFTs of n points and 6 (n/2+1) d; backward: d real and "
    "d + 1 complex FFTs, two complex products. Direct path: 2 T l d, backward twice",
}


def extractor_costs(kind: str, cls) -> AttentionCosts:
    def parameters(placement, d, heads, kdim, options):
        return extractor_parameters(kind, d, options.lags, options.output_projection)

    def macs(placement, d, heads, queries, keys, kdim, options):
        counts = extractor(kind, d, queries, lag_terms(range(1, queries + 1), options.lags), options.output_projection)
        # eq. 24's X_adj * X_ext is element-wise: d multiplications per token, no product
        return counts.multiplications - (0 if kind == "extractor_me" else queries * d)

    def decoding_state_elements(placement, d, heads, length, kdim, options):
        return min(length, options.lags) * d  # the window of the last min(t, l) inputs (HE: after W_in)

    return AttentionCosts(
        parameters=parameters,
        macs=macs,
        decoding_state_elements=decoding_state_elements,
        decoding_state_growth="window",
        asymptotic_class="O(T*l)",
        # (ME has no output projection: its options do not hold the option)
        options_from=lambda options, context: {
            "lags": resolve_lags(options, context),
            "conv_impl": options.extractor_conv_impl,  # (what runs: the implementation's FLOPs, memory and growth)
            **({"output_projection": not options.extractor_no_output_projection} if cls.has_adjustment else {}),
        },
        option_defaults={"lags": PAPER_LAGS, "output_projection": True, "conv_impl": "auto"},
        implementation_flops=lambda *args, **settings: implementation_layer_flops(cls, *args, **settings),
        implementation_flops_text=IMPLEMENTATION_FLOPS_TEXT[kind],
        implementation_peak_bytes=(lambda *args: matrix_lags_peak_bytes(cls, *args)) if cls.lag_shape == "matrix" else None,
        implementation_time_growth=lambda *args: time_growth(cls, *args),
        implementation_path=lambda length, embed_dim, heads, options: conv_path(cls, length, embed_dim, options),
        speed_benchmark=SPEED_BENCHMARK,
        operation_counts=OperationCounts(
            label=kind.replace("extractor_", "").upper(),
            training=lambda d, heads, n, options: extractor_training(kind, d, options.lags, n, options.output_projection),
            step=lambda d, heads, t, options: extractor_step(kind, d, options.lags, t, options.output_projection),
        ),
    )
