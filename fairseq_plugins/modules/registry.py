"""One interface and one registry for every attention kind.

Every kind is an ``nn.Module`` with the call signature and return value of
fairseq's :class:`~fairseq.modules.MultiheadAttention` (inputs T x B x C,
``key_padding_mask`` B x S with True at pads, ``incremental_state`` for
step-by-step decoding and ``reorder_incremental_state`` for beam search). It is
registered under a name with the placements it supports and a naive reference
written straight from its paper's equations; the conformance suite in
``tests/modules`` runs every registered kind in every placement it supports.

Placements:

* ``encoder_self``: bidirectional self-attention in an encoder;
* ``decoder_self``: causal self-attention in a decoder or language model. Kinds
  are causal *by construction* here: they must give the same result whether or
  not fairseq's additive future mask is passed (see ``BaseAttention``);
* ``encoder_decoder``: decoder queries over encoder keys and values.

Key copies (the "En-De Connect" of the mixed-attention search space): an
``encoder_decoder`` module built with ``key_copies=k`` gets as keys and values
the outputs of k encoder layers of one source concatenated along time (k*S x B
x C, ``key_padding_mask`` B x k*S: the source's mask repeated). Kinds that
declare ``supports_key_copies`` accept it; a kind whose weights depend on key
positions counts them within each copy (each copy has positions 0..S-1).
"""
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Tuple

import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from .options import AttentionContext, KindOptions, ModelKindOptions, NoOptions, option_fields

ENCODER_SELF = "encoder_self"
DECODER_SELF = "decoder_self"
ENCODER_DECODER = "encoder_decoder"
PLACEMENTS = (ENCODER_SELF, DECODER_SELF, ENCODER_DECODER)
# the placements as messages name them
PLACEMENT_NAMES = {ENCODER_SELF: "encoder self-attention", DECODER_SELF: "decoder self-attention",
                   ENCODER_DECODER: "encoder-decoder attention"}

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class AttentionConfigError(ValueError):
    """A model option selects an attention kind or setting that cannot be built."""


@dataclass(frozen=True)
class AttentionSpec:
    name: str
    cls: type
    placements: Tuple[str, ...]
    # naive_reference(module, query, key, value, key_padding_mask) -> T x B x C,
    # computed in explicit loops from the paper's equations (used by the tests).
    naive_reference: Callable
    description: str
    # Option variants the conformance suite runs besides the defaults:
    # variant name -> ConformanceVariant (model-option overrides, placements).
    conformance_variants: Mapping[str, "ConformanceVariant"] = field(default_factory=dict)
    # Parameters, FLOPs, decoding state and asymptotic class (an ``AttentionCosts`` of
    # ``modules/costs.py``); None only for kinds registered by tests.
    costs: Optional["AttentionCosts"] = None  # noqa: F821
    # True when the kind's attention weights are a softmax distribution over the
    # visible keys (every visible key strictly positive, rows summing to one), so
    # losses on attention such as the pointer loss's -log A[t, hint_t] can read them.
    # Kinds without weights, or whose weights can be zero on a visible key (ReLU
    # feature maps), leave it False.
    attention_distribution: bool = False
    # The kind's options: a ``KindOptions`` dataclass (``modules/options.py``) whose fields are model
    # options; its instances are what ``from_config`` receives.
    options_class: type = NoOptions
    # option name -> the placements where the kind reads it (the fields' ``placements`` metadata,
    # default every placement of the kind); used to warn about options no layer reads.
    options: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    # The kind a layer gets when the model options name none (``--*-attention-kinds`` unset): one kind,
    # valid in every placement, declares it (fairseq's own attention).
    default: bool = False


@dataclass(frozen=True)
class ConformanceVariant:
    """Model options (``cfg`` attribute name -> value) that change a kind's
    behaviour, run by the conformance suite in ``placements`` (default: every
    placement of the kind; name only those where the options act)."""

    overrides: Mapping[str, object]
    placements: Optional[Tuple[str, ...]] = None


ATTENTION_REGISTRY: Dict[str, AttentionSpec] = {}


def register_attention(
    name: str,
    placements,
    naive_reference: Callable,
    description: str,
    conformance_variants: Optional[Mapping[str, object]] = None,
    costs=None,
    attention_distribution: bool = False,
    options: Optional[type] = None,
    default: bool = False,
):
    """Class decorator: register an attention kind under ``name``.

    ``costs`` is the kind's ``AttentionCosts`` (``modules/costs.py``): what
    ``fairseq_plugins.complexity``, ``cli/model_costs`` and the benchmarks ask
    instead of naming kinds. ``attention_distribution``: see ``AttentionSpec``.
    ``options``: the kind's ``KindOptions`` dataclass (``modules/options.py``; default: none);
    a field's ``placements`` metadata names the placements where the kind reads it (default:
    every placement of the kind). The models compose the registered classes into their
    configuration and command line, and ``from_config`` receives an instance.

    ``conformance_variants`` maps a variant name to the model options it sets
    (a dict, run in every placement of the kind) or to a ``ConformanceVariant``
    (options and the placements where they act); the conformance suite runs
    every variant through every check, like the default configuration.

    ``default``: the kind is the model's default, taken by every layer whose kind the options do
    not name (``default_kind``); one kind declares it, and it must support every placement.
    """
    placements = tuple(placements)
    unknown = [p for p in placements if p not in PLACEMENTS]
    if unknown:
        raise ValueError(f"unknown placements {unknown} for attention kind {name!r}; valid: {PLACEMENTS}")
    variants = {}
    for variant, value in (conformance_variants or {}).items():
        if not isinstance(value, ConformanceVariant):
            value = ConformanceVariant(dict(value))
        variant_placements = tuple(value.placements) if value.placements is not None else placements
        outside = [p for p in variant_placements if p not in placements]
        if outside:
            raise ValueError(f"conformance variant {variant!r} of attention kind {name!r} names placements {outside} the kind does not support")
        variants[str(variant)] = ConformanceVariant(dict(value.overrides), variant_placements)
    options_class = NoOptions if options is None else options
    if not (isinstance(options_class, type) and issubclass(options_class, KindOptions)):
        raise TypeError(f"options of attention kind {name!r} must be a KindOptions dataclass "
                        f"(fairseq_plugins.modules.options), got {options!r}")
    read_options = {}
    for option in option_fields(options_class):
        option_placements = tuple(option.metadata.get("placements") or placements)
        outside = [p for p in option_placements if p not in placements]
        if outside:
            raise ValueError(f"option {option.name!r} of attention kind {name!r} names placements {outside} the kind does not support")
        read_options[option.name] = option_placements
    for spec in ATTENTION_REGISTRY.values():  # an option name means one thing: one class declares it
        related = issubclass(spec.options_class, options_class) or issubclass(options_class, spec.options_class)
        clash = [] if related else sorted(set(read_options) & set(spec.options))
        if clash:
            raise ValueError(f"attention kind {name!r} declares options {clash}, which kind {spec.name!r} declares too")

    def decorator(cls):
        if name in ATTENTION_REGISTRY:
            raise ValueError(f"attention kind {name!r} is already registered")
        if default:
            if set(placements) != set(PLACEMENTS):
                raise ValueError(f"the default attention kind {name!r} must support every placement ({', '.join(PLACEMENTS)})")
            other = [spec.name for spec in ATTENTION_REGISTRY.values() if spec.default]
            if other:
                raise ValueError(f"attention kind {name!r} declares itself the default kind, which {other[0]!r} is")
        # Kinds either subclass BaseAttention or (softmax) fairseq's own
        # MultiheadAttention; both must provide these class-level hooks.
        missing = [a for a in ("from_config", "uses_future_mask", "reorder_incremental_state") if not hasattr(cls, a)]
        if missing:
            raise TypeError(f"attention kind {name!r} lacks the attention interface: {missing}")
        cls.kind_name = name
        ATTENTION_REGISTRY[name] = AttentionSpec(
            name, cls, placements, naive_reference, description, variants, costs, bool(attention_distribution),
            options_class, read_options, bool(default)
        )
        return cls

    return decorator


def default_kind() -> str:
    """The kind of a layer whose kind the model options do not name (the one registered with
    ``default=True``)."""
    for spec in ATTENTION_REGISTRY.values():
        if spec.default:
            return spec.name
    raise AttentionConfigError("no attention kind is registered as the default (register_attention(..., default=True))")


def unregister_attention(name: str) -> None:
    """Remove kind ``name`` from the registry (a test that registers a kind for itself
    undoes it with this); an unknown name is an error."""
    if name not in ATTENTION_REGISTRY:
        raise KeyError(f"attention kind {name!r} is not registered")
    del ATTENTION_REGISTRY[name]


# Environment variable naming modules (comma-separated, importable from sys.path) that
# register attention kinds of their own: ``import fairseq_plugins`` imports them after the
# built-in kinds, so that a kind kept in its own package reaches every entry point that
# takes no ``--user-dir`` (``python -m fairseq_plugins.complexity``, the benchmarks and
# their worker processes, the conformance suite) with no file of this package touched.
KIND_MODULES_ENV = "FAIRSEQ_PLUGINS_KIND_MODULES"


def import_kind_modules(names: Optional[str] = None):
    """Import the kind modules named in ``names`` (default: the ``FAIRSEQ_PLUGINS_KIND_MODULES``
    environment variable), comma-separated; each registers its kinds with
    ``register_attention`` when imported. Returns the imported modules."""
    import importlib
    import os

    if names is None:
        names = os.environ.get(KIND_MODULES_ENV, "")
    modules = []
    for name in (n.strip() for n in names.split(",")):
        if name:
            try:
                modules.append(importlib.import_module(name))
            except ImportError as exc:
                raise ImportError(f"{KIND_MODULES_ENV}: cannot import the kind module {name!r} ({exc})") from exc
    return modules


def valid_kinds(placement: Optional[str] = None):
    return sorted(n for n, s in ATTENTION_REGISTRY.items() if placement is None or placement in s.placements)


def spec_of_module(module: nn.Module) -> Optional[AttentionSpec]:
    """The registered kind of an attention module: its ``kind_name``, or for a module
    of a class that a registered kind extends (fairseq's own MultiheadAttention, which
    a kind may subclass) that kind; None for anything else."""
    name = getattr(module, "kind_name", None)
    if name in ATTENTION_REGISTRY:
        return ATTENTION_REGISTRY[name]
    for spec in ATTENTION_REGISTRY.values():
        if issubclass(spec.cls, type(module)) and type(module) not in (nn.Module, BaseAttention, FairseqIncrementalState):
            return spec
    return None


def check_kind(kind: str, placement: str, option_name: str = "attention kind") -> AttentionSpec:
    """Fail with the list of valid choices if ``kind`` cannot go in ``placement``."""
    if placement not in PLACEMENTS:
        raise AttentionConfigError(f"unknown placement {placement!r}; valid: {', '.join(PLACEMENTS)}")
    spec = ATTENTION_REGISTRY.get(kind)
    if spec is None:
        raise AttentionConfigError(
            f"{option_name}: unknown attention kind {kind!r}; registered kinds: "
            f"{', '.join(valid_kinds()) or '(none)'} (valid for {placement}: {', '.join(valid_kinds(placement))})"
        )
    if placement not in spec.placements:
        raise AttentionConfigError(
            f"{option_name}: attention kind {kind!r} cannot be used for {placement} "
            f"(it supports {', '.join(spec.placements)}); valid for {placement}: {', '.join(valid_kinds(placement))}"
        )
    return spec


def check_key_copies(kind: str, copies: int, option_name: str = "key copies") -> None:
    """Fail unless ``kind``'s encoder-decoder attention can attend to ``copies`` concatenated copies."""
    spec = ATTENTION_REGISTRY.get(kind)
    if copies != 1 and spec is not None and not getattr(spec.cls, "supports_key_copies", False):
        raise AttentionConfigError(
            f"{option_name}: attention kind {kind!r} cannot attend to {copies} concatenated encoder layers "
            f"(kinds that can: {', '.join(n for n in valid_kinds(ENCODER_DECODER) if getattr(ATTENTION_REGISTRY[n].cls, 'supports_key_copies', False))})"
        )


def check_head_dim(kind: str, head_dim: Optional[int], option_name: str = "head dimension") -> None:
    """Fail unless ``kind`` can take a head dimension of its own (an attention width of heads x
    ``head_dim`` instead of the layer's width); None (width / heads) always can."""
    if head_dim is None:
        return
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise AttentionConfigError(f"{option_name}: {head_dim!r} is not a positive head dimension")
    spec = ATTENTION_REGISTRY.get(kind)
    if spec is not None and not getattr(spec.cls, "supports_head_dim", False):
        raise AttentionConfigError(
            f"{option_name}: attention kind {kind!r} computes in the layer's width and takes no head dimension of "
            f"its own (kinds that do: {', '.join(head_dim_kinds()) or 'none'}); leave it unset (auto) for this layer")


def head_dim_kinds():
    """The kinds that take a head dimension of their own (``supports_head_dim``)."""
    return sorted(n for n, s in ATTENTION_REGISTRY.items() if getattr(s.cls, "supports_head_dim", False))


def build_attention(
    kind: str,
    placement: str,
    embed_dim: int,
    num_heads: int,
    cfg=None,
    kdim: Optional[int] = None,
    vdim: Optional[int] = None,
    dropout: float = 0.0,
    option_name: str = "attention kind",
    key_copies: int = 1,
    head_dim: Optional[int] = None,
):
    """Build attention kind ``kind`` for ``placement``.

    ``key_copies`` (``encoder_decoder`` only): the keys are that many concatenated
    copies of the source (module docstring).

    ``head_dim``: None, each head has ``embed_dim / num_heads`` dimensions (fairseq's rule); a
    number, each head has that many and the attention width (the q/k/v projections' outputs, the
    output projection's input) is ``num_heads * head_dim`` (kinds that declare ``supports_head_dim``).

    ``cfg``: the model's ``ModelKindOptions`` (``modules/options.py``: every kind's typed
    options and the ``AttentionContext``, read once by the model), or raw model options
    (an argparse Namespace or omegaconf DictConfig, read here; None: every default).
    The kind's ``from_config`` receives its own ``KindOptions`` instance and the context.
    """
    spec = check_kind(kind, placement, option_name)
    check_head_dim(kind, head_dim, option_name)
    if head_dim is None and embed_dim % num_heads != 0:
        raise AttentionConfigError(
            f"{option_name}: embedding dimension {embed_dim} is not divisible by {num_heads} attention heads"
        )
    if key_copies < 1 or (key_copies != 1 and placement != ENCODER_DECODER):
        raise AttentionConfigError(f"{option_name}: key_copies {key_copies} needs encoder_decoder placement and >= 1")
    check_key_copies(kind, key_copies, option_name)
    if isinstance(cfg, ModelKindOptions):
        options, context = cfg.of(spec.options_class), cfg.context
    else:
        options, context = spec.options_class.from_args(cfg), AttentionContext.from_args(cfg)
    if context.quant_noise_pq > 0 and not getattr(spec.cls, "supports_quant_noise", False):
        raise AttentionConfigError(
            f"--quant-noise-pq {context.quant_noise_pq}: attention kind {kind!r} ({option_name}) has no linear maps that "
            f"take quantisation noise; set --quant-noise-pq 0 or use another kind there")
    block = context.quant_noise_pq_block_size
    if context.quant_noise_pq > 0 and head_dim is not None and (num_heads * head_dim) % block:
        # (fairseq's quant_noise asserts that a map's input features are whole blocks; the output projection
        # reads the attention width)
        raise AttentionConfigError(
            f"--quant-noise-pq-block-size {block}: {option_name} attends in {num_heads} heads x {head_dim} = "
            f"{num_heads * head_dim} dimensions, not a multiple of the block size; choose a block size that divides it")
    extra = {} if head_dim is None else {"head_dim": head_dim}  # (kinds without head dimensions take no such argument)
    module = spec.cls.from_config(
        placement=placement,
        embed_dim=embed_dim,
        num_heads=num_heads,
        kdim=kdim if kdim is not None else embed_dim,
        vdim=vdim if vdim is not None else embed_dim,
        dropout=dropout,
        options=options,
        context=context,
        **extra,
    )
    if key_copies != 1:
        module.key_copies = key_copies
    return module


class BaseAttention(FairseqIncrementalState, nn.Module):
    """Base of all attention kinds: placement bookkeeping, incremental-state
    storage and beam reordering.

    Subclasses implement ``forward`` with fairseq's MultiheadAttention signature
    and keep every incremental tensor with the batch (times beam) as dim 0, so
    that ``reorder_incremental_state`` can reorder them generically.
    """

    kind_name = "base"
    # True when the kind wants fairseq's explicit T x T additive future mask in
    # decoder self-attention. Kinds that are causal by construction set False,
    # so the decoder can skip materialising the O(T^2) mask.
    uses_future_mask = False
    # False for kinds that have no attention distribution (e.g. Extractors):
    # they return None as weights even when need_weights=True.
    returns_attention_weights = True
    # True when a query never attends to its own token (BET's diagonal-free
    # mask), except where no other key is visible: losses on attention read it.
    hides_diagonal = False
    # True when the kind's encoder-decoder attention handles keys that are concatenated copies of one
    # source (module docstring); key_copies: how many (set by build_attention).
    supports_key_copies = False
    key_copies = 1
    # True when the kind's decoder self-attention can take fairseq's --cross-self-attention (keys: the
    # source and the prefix together); the architecture check refuses it for the other kinds.
    supports_cross_self_attention = False

    # True when the kind takes a head dimension of its own (``build_attention(head_dim=...)``: the attention
    # width ``attention_dim`` = heads x head dimension, which the q/k/v projections output and the output
    # projection reads); its ``from_config`` then takes a ``head_dim`` keyword.
    supports_head_dim = False
    # Parameters made of equal parts concatenated along their last dimension (name -> number of parts, e.g.
    # BET's score weight [w_H ; w_K]): a weight-sharing supernet gives a smaller sub-network the leading slice
    # of each part, so that a part shares weights with the same part (search/supernet.py).
    concatenated_parameters: Dict[str, int] = {}

    def __init__(self, placement: str, embed_dim: int, num_heads: int, kdim: int, vdim: int,
                 head_dim: Optional[int] = None):
        super().__init__()
        if placement not in PLACEMENTS:
            raise AttentionConfigError(f"unknown placement {placement!r}; valid: {', '.join(PLACEMENTS)}")
        self.placement = placement
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        self.attention_dim = self.head_dim * num_heads  # = embed_dim unless a head dimension is given
        self.kdim = kdim
        self.vdim = vdim
        self.causal = placement == DECODER_SELF
        self.self_attention = placement != ENCODER_DECODER
        self.encoder_decoder_attention = placement == ENCODER_DECODER

    # True when the kind's linear maps take fairseq's quantisation noise (``--quant-noise-pq``, read
    # into ``AttentionContext``; build them with ``_linear``); build_attention refuses the option for
    # the other kinds.
    supports_quant_noise = False

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options: KindOptions,
                    context: AttentionContext):
        """Build from the kind's typed ``options`` (an instance of its registered ``KindOptions`` class)
        and the model-wide ``context``; kinds with options override it."""
        return cls(placement, embed_dim, num_heads, kdim, vdim)

    # -- incremental state (same helper names as fairseq's MultiheadAttention) --
    def _get_input_buffer(self, incremental_state: Optional[IncrementalState]) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attn_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state: IncrementalState, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "attn_state", buffer)

    @torch.jit.export
    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor):
        """Reorder the cached state for beam search: every tensor has batch as dim 0."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            for key, value in buffer.items():
                if value is not None:
                    buffer[key] = value.index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state

    # -- helpers for kinds with fairseq-style q/k/v/out projections --
    def _split_heads(self, x: Tensor) -> Tensor:
        """T x B x (H d) -> B x H x T x d."""
        length, bsz, _ = x.shape
        return x.view(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    @staticmethod
    def _linear(d_in: int, d_out: int, context: Optional[AttentionContext] = None) -> nn.Linear:
        """nn.Linear(d_in, d_out) with the model's quantisation noise (fairseq's ``quant_noise``, as
        its MultiheadAttention wraps its projections; none without a context)."""
        if context is None:
            return nn.Linear(d_in, d_out)
        return quant_noise(nn.Linear(d_in, d_out), context.quant_noise_pq, context.quant_noise_pq_block_size)

    def _reset_projections(self, zero_qkv_bias: bool = False):
        """q_proj, k_proj, v_proj, out_proj initialised as fairseq's
        MultiheadAttention.reset_parameters (which keeps nn.Linear's q/k/v biases;
        ``zero_qkv_bias`` zeroes them)."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
            if zero_qkv_bias:
                nn.init.zeros_(proj.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def _step_padding(self, key_padding_mask: Optional[Tensor], length: int, incremental_state) -> Optional[Tensor]:
        """The padding of the ``length`` new tokens of causal self-attention (B x length).
        When decoding, fairseq passes the padding of the current token or of the whole prefix."""
        if key_padding_mask is None or key_padding_mask.size(1) == length:
            return key_padding_mask
        if incremental_state is None or key_padding_mask.size(1) < length:
            raise ValueError(f"key_padding_mask has {key_padding_mask.size(1)} columns for {length} tokens")
        return key_padding_mask[:, -length:]

    # -- argument checks shared by all kinds --
    def _check_inputs(self, query: Tensor, key: Optional[Tensor], key_padding_mask: Optional[Tensor]):
        if query.dim() != 3 or query.size(-1) != self.embed_dim:
            raise ValueError(
                f"{self.kind_name} attention expects query of shape (T, B, {self.embed_dim}), got {tuple(query.shape)}"
            )
        if key is not None and key_padding_mask is not None:
            if key_padding_mask.shape[0] != key.shape[1]:
                raise ValueError(
                    f"key_padding_mask batch size {key_padding_mask.shape[0]} does not match key batch size {key.shape[1]}"
                )

    def _check_no_arbitrary_mask(self, attn_mask: Optional[Tensor]):
        if attn_mask is not None:
            raise ValueError(
                f"attention kind {self.kind_name!r} is causal by construction in decoder self-attention and "
                "cannot apply an arbitrary attn_mask; pass attn_mask=None (the mixed decoder does this)"
            )

    def extra_repr(self):
        extra = f"placement={self.placement}, embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        return extra + (f", head_dim={self.head_dim}" if self.attention_dim != self.embed_dim else "")
