"""Per-layer choices of mixed models: attention kind, head count and FFN width.

Every per-layer option is a comma-separated list with one value per layer; a
single value is broadcast to all layers (the mixed-attention paper's searched
architectures vary kind, heads and FFN width per layer). The lists stay strings
in the model configuration, so checkpoints store them as given; they are
resolved into one ``Architecture`` value (architecture.py) when the model is built.
"""
import copy
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models.transformer import TransformerConfig

from ..modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, default_kind
from ..modules.registry import PLACEMENT_NAMES
from ..modules.options import ModelKindOptions, compose_option_classes, option_fields, registered_option_classes
from .architecture import Architecture

logger = logging.getLogger(__name__)


HEAD_DIMS_HELP = (
    "{what} (comma-separated, one value broadcasts; 'auto' or unset: the layer's width over its heads, fairseq's "
    "rule). A number gives the attention an inner width of heads x head dimension (the q/k/v projections' outputs), "
    "whatever the layer's width: a search space's head_dim: fixed. Only kinds that support it (those with q/k/v "
    "projections; the error for another kind lists them)")


@dataclass
class DecoderLayoutConfig(FairseqDataclass):
    preset: Optional[str] = field(
        default=None,
        metadata={
            "help": "the preset (--arch) whose values the model options hold: set when the preset fills them in, and "
            "by the preset's hydra config file fairseq_plugins/config/model/<preset>.yaml; a fairseq-hydra-train "
            "config naming a preset without its file is refused (it would hold the model's defaults instead)"
        },
    )
    architecture_file: Optional[str] = field(
        default=None,
        metadata={
            "help": "build the model from this JSON architecture (embedding widths and every layer's choices, as an "
            "architecture search writes them; see docs/kinds.md, \"One architecture value, and architecture files\"): "
            "the per-layer options, layer counts, embedding widths and whole-side heads and FFN widths then come from "
            "the file and conflict on the command line"
        },
    )
    decoder_attention_kinds: str = field(
        default=default_kind(),  # (the kind registered as the default: fairseq's own attention)
        metadata={"help": "attention kind of each decoder layer's self-attention (comma-separated, one value broadcasts)"},
    )
    decoder_layer_attention_heads: Optional[str] = field(
        default=None,
        metadata={"help": "self-attention heads of each decoder layer (comma-separated; default: --decoder-attention-heads)"},
    )
    decoder_layer_ffn_embed_dims: Optional[str] = field(
        default=None,
        metadata={"help": "FFN width of each decoder layer (comma-separated; default: --decoder-ffn-embed-dim)"},
    )
    decoder_layer_attention_head_dims: Optional[str] = field(
        default=None,
        metadata={"help": HEAD_DIMS_HELP.format(what="self-attention head dimension of each decoder layer")},
    )


@dataclass
class EncoderDecoderLayoutConfig(DecoderLayoutConfig):
    encoder_attention_kinds: str = field(
        default=default_kind(),  # (the kind registered as the default: fairseq's own attention)
        metadata={"help": "attention kind of each encoder layer's self-attention (comma-separated, one value broadcasts)"},
    )
    encoder_layer_attention_heads: Optional[str] = field(
        default=None,
        metadata={"help": "self-attention heads of each encoder layer (comma-separated; default: --encoder-attention-heads)"},
    )
    encoder_layer_ffn_embed_dims: Optional[str] = field(
        default=None,
        metadata={"help": "FFN width of each encoder layer (comma-separated; default: --encoder-ffn-embed-dim)"},
    )
    encoder_layer_attention_head_dims: Optional[str] = field(
        default=None,
        metadata={"help": HEAD_DIMS_HELP.format(what="self-attention head dimension of each encoder layer")},
    )
    cross_attention_kinds: str = field(
        default=default_kind(),  # (the kind registered as the default: fairseq's own attention)
        metadata={"help": "attention kind of each decoder layer's encoder-decoder attention (comma-separated)"},
    )
    cross_attention_heads: Optional[str] = field(
        default=None,
        metadata={"help": "encoder-decoder attention heads of each decoder layer (comma-separated; default: the layer's self-attention heads)"},
    )
    cross_attention_head_dims: Optional[str] = field(
        default=None,
        metadata={"help": HEAD_DIMS_HELP.format(what="encoder-decoder attention head dimension of each decoder layer")},
    )
    encoder_decoder_connect: Optional[str] = field(
        default=None,
        metadata={
            "help": "En-De Connect: how many last encoder layers each decoder layer's encoder-decoder attention attends "
            "to, 1 <= k <= --encoder-layers (comma-separated, one value broadcasts; default: 1, the last encoder layer "
            "only). With k > 1 the keys are the outputs of the last k encoder layers concatenated along time (the last "
            "one after the encoder's final layer norm, the earlier ones as the layers return them; see docs/kinds.md, "
            "\"Encoder-decoder connect\")"
        },
    )


LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EncoderDecoderLayoutConfig)}
DECODER_LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecoderLayoutConfig)}

# The options of the kinds registered when the models are defined (the built-in kinds, and those of
# $FAIRSEQ_PLUGINS_KIND_MODULES), composed from their KindOptions classes: part of the language
# model's dataclass, so of its hydra configuration. ``add_args`` adds those of kinds registered later.
KindOptionsConfig = compose_option_classes(registered_option_classes())


def kind_option_defaults() -> Dict[str, object]:
    """option -> default, over every registered kind's options."""
    return {f.name: f.default for options_class in registered_option_classes() for f in option_fields(options_class)}


def add_kind_options(parser, known: Sequence[str] = ()):
    """Add every registered kind's options to ``parser`` (no defaults: the architectures set them, fairseq's
    convention), except the options named in ``known`` (already added from the model's dataclass)."""
    fields = [f for options_class in registered_option_classes() for f in option_fields(options_class)]
    missing = list({f.name: f for f in fields if f.name not in known}.values())
    if missing:
        only = dataclasses.make_dataclass("KindOptionsToAdd", [
            (f.name, f.type, dataclasses.field(default=f.default, metadata=f.metadata)) for f in missing], bases=(FairseqDataclass,))
        gen_parser_from_dataclass(parser, only(), delete_default=True)


def set_layout_defaults(args, decoder_only: bool = False):
    """Fill unset layout and kind options (architectures call this, fairseq style).

    ``decoder_only`` (language models): only the decoder's layout options, since a
    language model's structured config has no encoder or cross-attention keys.
    """
    defaults = {**(DECODER_LAYOUT_DEFAULTS if decoder_only else LAYOUT_DEFAULTS), **kind_option_defaults()}
    for name, default in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def _option(args, name: str, default=None):
    """Read a plugin option from the raw model args (see ``architecture._option``)."""
    value = getattr(args, name, None)
    return default if value is None else value


def layer_config(cfg: TransformerConfig, side: str, heads: int, ffn_embed_dim: int) -> TransformerConfig:
    """A shallow copy of fairseq's ``cfg`` whose ``side`` ('encoder'/'decoder') block has this layer's
    heads and FFN width, the values fairseq's layer reads from it."""
    layer_cfg = copy.copy(cfg)
    setattr(layer_cfg, side, dataclasses.replace(getattr(cfg, side), attention_heads=heads, ffn_embed_dim=ffn_embed_dim))
    return layer_cfg


def layer_count_config(args, side: str, layers: int):
    """fairseq builds as many layers as its config names: the options themselves when they already
    name ``layers`` (as fairseq's build_model leaves them), else a TransformerConfig copy that does
    (a language model pruned with --decoder-layers-to-keep)."""
    cfg = TransformerConfig.from_namespace(args)
    if getattr(cfg, side).layers == layers:
        return args
    cfg = copy.copy(cfg)
    setattr(cfg, side, dataclasses.replace(getattr(cfg, side), layers=layers))
    return cfg


# ------------------------------------------------- checks across options ---
def kind_option_users() -> Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """option -> (the kinds whose layers read it, in registration order; the placements where they do),
    as each kind registers them (``register_attention(options=...)``); options in registration order."""
    users: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {}
    for name, spec in ATTENTION_REGISTRY.items():
        for option, placements in spec.options.items():
            kinds, known = users.get(option, ((), ()))
            users[option] = (kinds + (name,), tuple(p for p in PLACEMENT_NAMES if p in known or p in placements))
    order = list(kind_option_defaults())
    return dict(sorted(users.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))


def placed_kinds(architecture: Architecture) -> List[Tuple[str, int, str]]:
    """(placement, layer index, kind) of every attention sub-layer of the model."""
    encoder, decoder = architecture.encoder_layers, architecture.decoder_layers
    return ([(ENCODER_SELF, i, layer.attention_kind) for i, layer in enumerate(encoder)]
            + [(DECODER_SELF, i, layer.attention_kind) for i, layer in enumerate(decoder)]
            + [(ENCODER_DECODER, i, layer.cross_attention_kind) for i, layer in enumerate(decoder)
               if layer.cross_attention_kind is not None])


def resolve_kind_options(args, architecture: Architecture, target_positions: Sequence[Tuple] = (),
                         source_positions: Sequence[Tuple] = ()) -> ModelKindOptions:
    """Every registered kind's options read from ``args`` and validated, each kind's checks against this
    model (``KindOptions.check_model``: e.g. an explicit cosFormer horizon must cover the positions the
    model is built for, or it fails only at the first longer batch, possibly hours into training), and a
    warning for options no layer reads (``warn_unused_kind_options``). Called once by the models' build,
    before any module is built.

    ``target_positions`` / ``source_positions``: ``Positions`` (or (option, positions) pairs) of the decoder's
    and the encoder's sequences (a language model: ``--tokens-per-sample``, plus the BOS position with
    ``--add-bos-token``, and an explicit ``--max-target-positions``)."""
    resolved = ModelKindOptions.from_args(args, target_positions, source_positions)
    layers = placed_kinds(architecture)
    for name, spec in ATTENTION_REGISTRY.items():
        used = [(placement, index) for placement, index, kind in layers if kind == name]
        if used:
            resolved.of(spec.options_class).check_model(resolved.context, used)
    warn_unused_kind_options(args, architecture)
    return resolved


def warn_unused_kind_options(args, architecture: Architecture) -> None:
    """A warning for every kind option set to a value other than its default that no layer of the model
    reads (e.g. ``--bet-score-weights`` without a ``bet`` layer): such a run silently trains something else
    than asked. Values at their defaults never warn, so a preset's or script's explicit defaults are quiet."""
    layers, defaults = placed_kinds(architecture), kind_option_defaults()
    model = "; ".join(
        f"{PLACEMENT_NAMES[placement]} {', '.join(dict.fromkeys(k for p, _, k in layers if p == placement))}"
        for placement in PLACEMENT_NAMES if any(p == placement for p, _, _ in layers))
    for name, (kinds, placements) in kind_option_users().items():
        value = _option(args, name)
        default = defaults.get(name)
        if value is None or value == default:
            continue
        if any(kind in kinds and placement in placements for placement, _, kind in layers):
            continue
        flag = f"--{name.replace('_', '-')}" + ("" if isinstance(value, bool) else f" {value}")
        logger.warning(f"{flag} is set, but no layer of this model uses it: it acts on {', '.join(kinds)} "
                       f"{' and '.join(PLACEMENT_NAMES[p] for p in placements)} (this model: {model})")
