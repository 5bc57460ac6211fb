"""The cost interface every attention kind registers (``register_attention(costs=...)``)
and the counting helpers the kinds share.

A kind's ``AttentionCosts`` gives, for one sub-layer in a placement:

* ``parameters(placement, embed_dim, heads, kdim, options)``: trainable parameters,
  equal to those of the built module (``tests/cli/test_model_costs.py`` builds and compares);
* ``macs(placement, embed_dim, heads, queries, keys, kdim, options)``: multiply-accumulates
  of the matrix products of one forward pass over one sequence without padding, the kind
  counted as defined; ``forward_flops`` = 2 MACs (the convention of
  ``torch.utils.flop_counter``), ``backward_flops`` = 2 x forward (below);
* ``decoding_state_bytes(placement, embed_dim, heads, length, kdim, options, element_bytes)``:
  bytes of the floating-point incremental state of **one sequence** after ``length`` decoded
  tokens (``decoder_self``) or with ``length`` source tokens (``encoder_decoder``; 0 in
  ``encoder_self``, which is not decoded). Padding masks and position counters, which every
  kind keeps alike, are not counted. ``decoding_state_growth`` says how the ``decoder_self``
  state grows with decoded tokens: "per token", "constant" or "window" (per token up to a fixed
  number of tokens); an ``encoder_decoder`` state depends on the source length only;
* ``asymptotic_class``: the time of a forward pass over T tokens, e.g. "O(T^2)", "O(T)", "O(T*l)";
* ``operation_counts`` (optional): per-operation counts (multiplications, additions,
  divisions, exponentiations) for ``python -m fairseq_plugins.complexity``'s table;
* what ``benchmarks/attention_speed.py`` measures of the implementation (optional, with
  defaults): FLOPs, peak memory and time growth of one forward+backward in decoder
  self-attention, and ``speed_benchmark`` (``SpeedBenchmark``): the model options the
  benchmark builds the kind with, the implementation settings it times, the baselines it
  compares the kind with, the kind's targets and its words in the report.

Counting conventions (see ``fairseq_plugins/complexity.py`` for the per-operation ones;
``implementation_flops`` states its own):

* linear maps: rows x d_in x d_out MACs (biases are element-wise, not counted);
* element-wise work (softmax, scaling, re-weighting, activations, norms) is left out of MACs.
"""
import re
from dataclasses import dataclass, field, fields
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from .options import AttentionContext, KindOptions
from .registry import DECODER_SELF, ENCODER_SELF

# Backward of a matrix product C = A B: dA = dC B^T and dB = A^T dC, two products of
# the same size as the forward one, so 2 x its FLOPs (when both operands need gradients,
# as every weight product in training does). The one place this rule is written.
BACKWARD_FLOPS_PER_FORWARD_FLOP = 2
# torch.utils.flop_counter counts 2 FLOPs per multiply-accumulate.
FLOPS_PER_MAC = 2



@dataclass(frozen=True)
class Counts:
    multiplications: int = 0
    additions: int = 0
    divisions: int = 0
    exponentiations: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def linear(rows: int, d_in: int, d_out: int) -> Counts:
    """``rows`` vectors times a d_in x d_out matrix plus a bias: per output
    element a dot product of length d_in (d_in mult., d_in - 1 add.) and the
    bias (1 add.)."""
    return Counts(multiplications=rows * d_in * d_out, additions=rows * d_in * d_out)


def linear_parameters(d_in: int, d_out: int) -> int:
    return d_in * d_out + d_out  # weight and bias


def lag_terms(positions: Sequence[int], lags: int) -> int:
    """Terms of the extraction sums: position i (1-based) sums min(i, l) inputs."""
    return sum(min(i, lags) for i in positions)


def visible_pairs(placement: str, queries: int, keys: int, diag_free: bool = False) -> int:
    """(query, key) pairs an attention distribution covers: all of them, or in
    causal self-attention (queries = keys = n) token i sees tokens j <= i, and
    with the diagonal-free mask j < i (the first token still sees itself)."""
    if placement != DECODER_SELF:
        return queries * keys
    if queries != keys:
        raise ValueError(f"decoder self-attention has as many keys as queries, got {queries} and {keys}")
    n = queries
    return n * (n - 1) // 2 + min(n, 1) if diag_free else n * (n + 1) // 2


def attention_width(d: int, options: "AttentionOptions") -> int:
    """The attention width of a sub-layer of model width ``d``: ``options.attention_dim`` (heads x a
    head dimension of its own, ``build_attention(head_dim=...)``), else ``d``."""
    return options.attention_dim or d


def projection_parameters(d: int, kdim: int, width: Optional[int] = None) -> int:
    """W_q (d -> width), W_k and W_v (kdim -> width), W_o (width -> d), each with its bias;
    ``width``: the attention width (default d)."""
    a = width or d
    return linear_parameters(d, a) + 2 * linear_parameters(kdim, a) + linear_parameters(a, d)


def projection_macs(d: int, queries: int, keys: int, kdim: int, width: Optional[int] = None) -> int:
    """q and the output projection per query, k and v per key (``width``: as ``projection_parameters``)."""
    a = width or d
    return 2 * queries * d * a + 2 * keys * kdim * a


def activation_bytes(length: int, d: int) -> float:
    """A rough allowance (float32, on the high side) for the T x d activations and gradients of one
    forward+backward of a layer: 40 of them. The peak-memory estimate of a kind that gives none."""
    return 40 * length * d * 4


def attention_core_growth(t1: int, t2: int, d: int, heads: int, options: "AttentionOptions") -> Tuple[float, str]:
    """The time growth from T = t1 to t2 of an attention core over all T x T pairs, O(T^2 d)
    (an ``AttentionCosts.implementation_time_growth``)."""
    return (t2 / t1) ** 2, "O(T^2 d) attention core"


def class_growth(asymptotic_class: str, t1: int, t2: int) -> float:
    """time(t2) / time(t1) of the power of T of an asymptotic class: "O(T^2)" (t2 / t1)^2, "O(T)" or
    "O(T*l)" t2 / t1."""
    power = re.search(r"T\^(\d+)", asymptotic_class)
    return (t2 / t1) ** (int(power.group(1)) if power else 1)


def format_bytes(nbytes: Optional[float]) -> str:
    """A size as the benchmark reports quote it: "-", "< 1 MB", "134 MB", "2.73 GB"."""
    if nbytes is None:
        return "-"
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:.2f} GB"
    if nbytes < 1e6:
        return "< 1 MB"
    return f"{nbytes / 1e6:.0f} MB"


def _attention_options(values):
    return AttentionOptions(**values)


class AttentionOptions:
    """The model options that change a kind's parameters, counted work or decoding state: the values
    given as keywords, and for every other option the default its kind registers
    (``AttentionCosts.option_defaults``). Immutable; equal when the values are."""

    __slots__ = ("_values",)

    def __init__(self, **values):
        defaults = registered_option_defaults()
        unknown = sorted(set(values) - set(defaults))
        if unknown:
            raise TypeError(f"unknown attention cost options {unknown}; the registered kinds read: {', '.join(sorted(defaults))}")
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        defaults = registered_option_defaults()
        if name in defaults:
            return defaults[name]
        raise AttributeError(f"no attention cost option {name!r}; the registered kinds read: {', '.join(sorted(defaults))}")

    def __setattr__(self, name, value):
        raise AttributeError("AttentionOptions are immutable")

    def __reduce__(self):
        # pickle and copy.deepcopy rebuild through __init__ (the default protocol would set the
        # slot with __setattr__, which refuses): options sent to worker processes keep working
        return (_attention_options, (dict(object.__getattribute__(self, "_values")),))

    def as_dict(self):
        return {**registered_option_defaults(), **self._values}

    def __eq__(self, other):
        return isinstance(other, AttentionOptions) and self.as_dict() == other.as_dict()

    def __hash__(self):
        return hash(tuple(sorted(self.as_dict().items())))

    def __repr__(self):
        return f"AttentionOptions({', '.join(f'{k}={v!r}' for k, v in sorted(self._values.items()))})"


def registered_option_defaults() -> Dict[str, object]:
    """option -> default, over the costs of every registered kind (kinds sharing an option share its default)."""
    from .registry import ATTENTION_REGISTRY

    # every kind's: the attention width of kinds that take a head dimension of their own (attention_width)
    defaults: Dict[str, object] = {"attention_dim": None}
    for spec in ATTENTION_REGISTRY.values():
        if spec.costs is not None:
            for option, default in spec.costs.option_defaults.items():
                defaults.setdefault(option, default)
    return defaults


@dataclass(frozen=True)
class OperationCounts:
    """Per-operation counts of one causal self-attention sub-layer, for the table of
    ``python -m fairseq_plugins.complexity``: ``training(d, heads, n, options)`` for a pass
    over n tokens, ``step(d, heads, t, options)`` for the t-th token with the kind's caches.
    ``label`` names the row; with ``per_head`` the table has a row per head count."""

    label: str
    training: Callable[[int, int, int, AttentionOptions], Counts]
    step: Callable[[int, int, int, AttentionOptions], Counts]
    per_head: bool = False


@dataclass(frozen=True)
class Baseline:
    """Another implementation of a kind's function (e.g. a paper's public code), which
    ``benchmarks/attention_speed.py`` times next to the kind and first checks against it (float64,
    T = 50). Declared by the kind (``SpeedBenchmark.baselines``); not a registered kind (no other
    placements, no decoding). The counts have the signatures of ``AttentionCosts``' methods of the
    same names."""

    name: str
    # build(module) -> the baseline's module, computing with the weights of the kind's decoder
    # self-attention ``module``; called with fairseq's MultiheadAttention arguments
    build: Callable[[object], object]
    # the report's words for it
    description: str
    training_flops: Callable[..., Tuple[float, float]]
    training_flops_text: str
    training_peak_bytes: Callable[[int, int, int, "AttentionOptions"], float]
    time_growth: Callable[[int, int, int, int, "AttentionOptions"], Tuple[float, str]]
    # implementation settings (module attribute -> value) of the kind's module in the check, e.g. small
    # chunks, so that T = 50 crosses several
    check_settings: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingSweep:
    """Values of an implementation setting (a module attribute, e.g. a chunk size) that
    ``benchmarks/attention_speed.py`` times at its longest T, and the module's default."""

    values: Tuple[object, ...]
    default: object


@dataclass(frozen=True)
class SpeedTarget:
    """A goal of the kind's implementation: its ``measure`` ("time" of forward+backward or peak
    "memory") at T = ``length`` at least ``factor`` times below ``other``'s (a kind or a baseline)."""

    other: str
    length: int
    measure: str
    factor: float

    def __post_init__(self):
        if self.measure not in ("time", "memory"):
            raise ValueError(f"SpeedTarget measure must be 'time' or 'memory', got {self.measure!r}")


@dataclass(frozen=True)
class BenchmarkRun:
    """What a kind's report notes (``SpeedBenchmark.notes``) read of a run of
    ``benchmarks/attention_speed.py``."""

    kinds: Tuple[str, ...]  # the kinds and baselines measured, in the report's order
    lengths: Tuple[int, ...]  # the sequence lengths T
    embed_dim: int
    heads: int
    options: "AttentionOptions"  # the options the kinds' counts read
    kind_options: Mapping[str, KindOptions]  # kind -> its typed options, as its layer was built with them
    context: AttentionContext
    growth_margin: float  # the time growth targets' margin over each kind's growth


# the sections of the report that take the kinds' notes
NOTE_SECTIONS = ("setup", "memory", "decoding", "growth", "implementation")


@dataclass(frozen=True)
class SpeedBenchmark:
    """What ``benchmarks/attention_speed.py`` needs of a kind besides its counts (``AttentionCosts``)."""

    # model option -> the value the benchmark builds the kind with (e.g. a paper's window); the command
    # line's --kind-option overrides it
    model_options: Mapping[str, object] = field(default_factory=dict)
    # implementation setting (module attribute) -> values timed at the longest T
    sweeps: Mapping[str, SettingSweep] = field(default_factory=dict)
    baselines: Tuple[Baseline, ...] = ()
    targets: Tuple[SpeedTarget, ...] = ()
    # True for the kind the report divides the others' times, peaks and decoding costs by (the standard
    # one; the first measured kind that declares it)
    ratio_reference: bool = False
    # The report's sentence where the kind's measured peak memory exceeds the reference kind's; fields
    # {reference} (its name), {lengths} (those T) and {measure} (the memory measurement)
    memory_above_reference: str = ""
    # section (NOTE_SECTIONS) -> note(kind, run) -> the kind's words there (markdown; kinds giving the
    # same words are quoted once): "setup", the setting it is measured in (one clause); "memory",
    # "decoding", "growth", sentences after those tables; "implementation", sections on how it is computed
    notes: Mapping[str, Callable[[str, BenchmarkRun], str]] = field(default_factory=dict)

    def __post_init__(self):
        unknown = sorted(set(self.notes) - set(NOTE_SECTIONS))
        if unknown:
            raise ValueError(f"SpeedBenchmark notes for unknown sections {unknown}; sections: {', '.join(NOTE_SECTIONS)}")


@dataclass(frozen=True)
class AttentionCosts:
    # parameters(placement, d, heads, kdim, options) -> int
    parameters: Callable[[str, int, int, int, AttentionOptions], int]
    # macs(placement, d, heads, queries, keys, kdim, options) -> int
    macs: Callable[[str, int, int, int, int, int, AttentionOptions], int]
    # decoding_state_elements(placement, d, heads, length, kdim, options) -> floating elements of one sequence
    decoding_state_elements: Callable[[str, int, int, int, int, AttentionOptions], int]
    decoding_state_growth: str  # "per token", "constant" or "window"
    asymptotic_class: str
    operation_counts: Optional[OperationCounts] = None
    # options_from(options, context) -> the AttentionOptions values of the kind's typed options (an
    # instance of its registered KindOptions class) and the model's AttentionContext, as its from_config
    # resolves them; errors are AttentionConfigErrors
    options_from: Optional[Callable[[object, object], Mapping[str, object]]] = None
    # the AttentionOptions the kind's counts read -> their defaults
    option_defaults: Mapping[str, object] = field(default_factory=dict)
    # implementation_flops(length, embed_dim, heads, options, **settings) -> (forward, backward) FLOPs of
    # one forward+backward of the kind's implementation (what runs, not the definition) in decoder
    # self-attention on T tokens of one sequence; settings: the implementation's own (e.g. ``chunk``,
    # ``conv_impl``), None for its defaults. benchmarks/attention_speed.py divides times by it.
    # ``implementation_flops_text`` says the same in words. None: the benchmark uses the definition.
    implementation_flops: Optional[Callable[..., Tuple[float, float]]] = None
    implementation_flops_text: str = ""
    # implementation_peak_bytes(length, embed_dim, heads, options) -> a rough peak (float32, on the high
    # side) of the memory one such forward+backward allocates; None: ``activation_bytes``
    implementation_peak_bytes: Optional[Callable[[int, int, int, AttentionOptions], float]] = None
    # implementation_time_growth(t1, t2, embed_dim, heads, options) -> (time(t2) / time(t1) of the fastest-
    # growing term of such a forward+backward, that term in words); None: from ``asymptotic_class``
    implementation_time_growth: Optional[Callable[[int, int, int, int, AttentionOptions], Tuple[float, str]]] = None
    # implementation_path(length, embed_dim, heads, options) -> which of its paths the implementation takes
    # for such a pass (e.g. "direct" or "fft"); None: it has one
    implementation_path: Optional[Callable[[int, int, int, AttentionOptions], str]] = None
    speed_benchmark: SpeedBenchmark = field(default_factory=SpeedBenchmark)

    def forward_flops(self, placement: str, d: int, heads: int, queries: int, keys: int, kdim: int, options: AttentionOptions) -> int:
        return FLOPS_PER_MAC * self.macs(placement, d, heads, queries, keys, kdim, options)

    def backward_flops(self, placement: str, d: int, heads: int, queries: int, keys: int, kdim: int, options: AttentionOptions) -> int:
        return BACKWARD_FLOPS_PER_FORWARD_FLOP * self.forward_flops(placement, d, heads, queries, keys, kdim, options)

    def training_flops(self, length: int, d: int, heads: int, options: AttentionOptions, **settings) -> Tuple[float, float]:
        """(forward, backward) FLOPs of one forward+backward in decoder self-attention on T tokens of one
        sequence: ``implementation_flops`` (``settings``: the implementation's own), else the count of the
        definition (the defined products, backward twice the forward)."""
        if self.implementation_flops is not None:
            return self.implementation_flops(length, d, heads, options, **settings)
        args = (DECODER_SELF, d, heads, length, length, d, options)
        return self.forward_flops(*args), self.backward_flops(*args)

    @property
    def training_flops_text(self) -> str:
        return self.implementation_flops_text or "the definition's products (modules/costs.py)"

    def training_peak_bytes(self, length: int, d: int, heads: int, options: AttentionOptions) -> float:
        """``implementation_peak_bytes``, by default ``activation_bytes``."""
        if self.implementation_peak_bytes is not None:
            return self.implementation_peak_bytes(length, d, heads, options)
        return activation_bytes(length, d)

    def time_growth(self, t1: int, t2: int, d: int, heads: int, options: AttentionOptions) -> Tuple[float, str]:
        """``implementation_time_growth``, by default the growth of the power of T of ``asymptotic_class``."""
        if self.implementation_time_growth is not None:
            return self.implementation_time_growth(t1, t2, d, heads, options)
        return class_growth(self.asymptotic_class, t1, t2), f"{self.asymptotic_class} (its asymptotic class)"

    def decoding_state_bytes(self, placement: str, d: int, heads: int, length: int, kdim: int, options: AttentionOptions,
                             element_bytes: int = 4) -> int:
        """Bytes of one sequence's incremental state (see the module docstring); float32 by default."""
        if placement == ENCODER_SELF:
            return 0
        return element_bytes * self.decoding_state_elements(placement, d, heads, length, kdim, options)
