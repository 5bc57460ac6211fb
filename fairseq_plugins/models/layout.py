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
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from fairseq.dataclass import FairseqDataclass
from fairseq.models.transformer import TransformerConfig

from ..modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, AttentionConfigError
from .architecture import Architecture

logger = logging.getLogger(__name__)


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
            "architecture search writes them; see the README): the per-layer options, layer counts, embedding widths "
            "and whole-side heads and FFN widths then come from the file and conflict on the command line"
        },
    )
    decoder_attention_kinds: str = field(
        default="softmax",
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
    cosformer_max_positions: Optional[int] = field(
        default=None,
        metadata={
            "help": "cosFormer horizon M of causal and encoder-decoder attention: positions must stay below it, so it "
            "must be at least the positions the model is built for (default: --max-target-positions, and for "
            "encoder-decoder attention the larger of source and target)"
        },
    )
    extractor_lags: Optional[int] = field(
        default=None,
        metadata={
            "help": "Extractors: number of lags l (context window; only the last l inputs contribute), "
            "1 <= l <= --max-target-positions (default: --max-target-positions; language models: --tokens-per-sample)"
        },
    )
    extractor_no_output_projection: bool = field(
        default=False,
        metadata={"help": "Extractors SHE/HE/WE: leave out the output projection W_out (eq. 25)"},
    )
    extractor_conv_impl: str = field(
        default="auto",
        metadata={
            "help": "Extractors: causal convolution of a full pass: auto (smaller estimated time, weighted multiplication counts), "
            "direct (conv1d) or fft (rfft/irfft); choices: auto, direct, fft"
        },
    )
    bet_score_weights: str = field(
        default="per-head",
        metadata={
            "help": "Bird-Eye attention (bet): weights w of the token scores R_j = sigmoid(w^T [H_j; K_j]) (eq. 7): "
            "per-head (each head its own w_h and score) or shared (one w over all heads, one score per token); "
            "choices: per-head, shared (default: per-head)"
        },
    )
    bet_no_diag_free: bool = field(
        default=False,
        metadata={
            "help": "Bird-Eye attention (bet): use the ordinary causal mask (diagonal visible) for the re-weighted "
            "attention A' instead of the diagonal-free mask (the paper's ablation; default: diagonal-free)"
        },
    )
    softmax_diag_free: bool = field(
        default=False,
        metadata={
            "help": "softmax decoder self-attention only: diagonal-free mask, token i attends to tokens j < i "
            "(a token with no earlier real token attends to itself); excludes --softmax-diag-scale (default: off)"
        },
    )
    softmax_diag_scale: float = field(
        default=1.0,
        metadata={
            "help": "softmax decoder self-attention only: multiply the diagonal scores q_i.k_i/sqrt(d_h) by this finite "
            "factor before the softmax (BET paper: 0.2 reduced, 2.0 magnified diagonal; default: 1.0, unchanged)"
        },
    )


@dataclass
class EncoderDecoderLayoutConfig(DecoderLayoutConfig):
    encoder_attention_kinds: str = field(
        default="softmax",
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
    cross_attention_kinds: str = field(
        default="softmax",
        metadata={"help": "attention kind of each decoder layer's encoder-decoder attention (comma-separated)"},
    )
    cross_attention_heads: Optional[str] = field(
        default=None,
        metadata={"help": "encoder-decoder attention heads of each decoder layer (comma-separated; default: the layer's self-attention heads)"},
    )
    encoder_decoder_connect: Optional[str] = field(
        default=None,
        metadata={
            "help": "En-De Connect: how many last encoder layers each decoder layer's encoder-decoder attention attends "
            "to, 1 <= k <= --encoder-layers (comma-separated, one value broadcasts; default: 1, the last encoder layer "
            "only). With k > 1 the keys are the outputs of the last k encoder layers concatenated along time (the last "
            "one after the encoder's final layer norm, the earlier ones as the layers return them; see the README)"
        },
    )


LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EncoderDecoderLayoutConfig)}
DECODER_LAYOUT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecoderLayoutConfig)}


def set_layout_defaults(args, decoder_only: bool = False):
    """Fill unset layout options (architectures call this, fairseq style).

    ``decoder_only`` (language models): only the decoder's options, since a
    language model's structured config has no encoder or cross-attention keys.
    """
    for name, default in (DECODER_LAYOUT_DEFAULTS if decoder_only else LAYOUT_DEFAULTS).items():
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
PLACEMENT_NAMES = {ENCODER_SELF: "encoder self-attention", DECODER_SELF: "decoder self-attention",
                   ENCODER_DECODER: "encoder-decoder attention"}
def kind_option_users() -> Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """option -> (the kinds whose layers read it, in registration order; the placements where they do),
    as each kind registers them (``register_attention(options=...)``); options in the order of the
    model options (``DecoderLayoutConfig``), then any others."""
    users: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {}
    for name, spec in ATTENTION_REGISTRY.items():
        for option, placements in spec.options.items():
            kinds, known = users.get(option, ((), ()))
            users[option] = (kinds + (name,), tuple(p for p in PLACEMENT_NAMES if p in known or p in placements))
    order = list(DECODER_LAYOUT_DEFAULTS)
    return dict(sorted(users.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))


def placed_kinds(architecture: Architecture) -> List[Tuple[str, int, str]]:
    """(placement, layer index, kind) of every attention sub-layer of the model."""
    encoder, decoder = architecture.encoder_layers, architecture.decoder_layers
    return ([(ENCODER_SELF, i, layer.attention_kind) for i, layer in enumerate(encoder)]
            + [(DECODER_SELF, i, layer.attention_kind) for i, layer in enumerate(decoder)]
            + [(ENCODER_DECODER, i, layer.cross_attention_kind) for i, layer in enumerate(decoder)
               if layer.cross_attention_kind is not None])


class Positions(NamedTuple):
    """The positions of a model's sequences an option sets: ``value`` of ``option`` plus ``extra`` positions
    (``why``: what adds them, e.g. the BOS token of --add-bos-token)."""
    option: str
    value: Optional[int]
    extra: int = 0
    why: str = ""

    @property
    def count(self) -> Optional[int]:
        return None if self.value is None else int(self.value) + self.extra

    def describe(self) -> str:
        if not self.extra:
            return f"{self.option} {self.value}"
        return f"{self.option} {self.value} + {self.extra} ({self.why}) = {self.count}"


def check_cosformer_horizon(args, architecture: Architecture,
                            target_positions: Sequence[Tuple],
                            source_positions: Sequence[Tuple] = ()) -> None:
    """An explicit ``--cosformer-max-positions`` must cover the positions the model is built for, or
    cosFormer fails only at the first batch with a longer sequence, possibly hours into training.

    ``target_positions`` / ``source_positions``: ``Positions`` (or (option, positions) pairs) of the decoder's
    and the encoder's sequences (a language model: ``--tokens-per-sample``, plus the BOS position with
    ``--add-bos-token``, and an explicit ``--max-target-positions``). Causal self-attention sees target
    positions, encoder-decoder attention both (as ``horizon_for``)."""
    horizon = _option(args, "cosformer_max_positions")
    if horizon is None:  # the default horizon is taken from these same positions
        return
    for placement, layer, kind in placed_kinds(architecture):
        if kind != "cosformer" or placement == ENCODER_SELF:
            continue
        candidates = [Positions(*entry) for entry in list(target_positions) + (list(source_positions) if placement == ENCODER_DECODER else [])]
        known = [entry for entry in candidates if entry.value is not None]
        if not known:
            continue
        largest = max(known, key=lambda entry: entry.count)  # (the first option on a tie)
        if int(horizon) < largest.count:
            option = largest.option
            raise AttentionConfigError(
                f"--cosformer-max-positions {horizon} is smaller than {largest.describe()}, the positions the model is "
                f"built for: cosformer {PLACEMENT_NAMES[placement]} (decoder layer {layer}) would fail at the first "
                f"longer sequence; raise --cosformer-max-positions to at least {largest.count} or lower {option} (a checkpoint "
                f"trained before this check loads with --model-overrides \"{{'{option[2:].replace('-', '_')}': "
                f"{int(horizon) - largest.extra}}}\")")


def warn_unused_kind_options(args, architecture: Architecture) -> None:
    """A warning for every kind option set to a value other than its default that no layer of the model
    reads (e.g. ``--bet-score-weights`` without a ``bet`` layer): such a run silently trains something else
    than asked. Values at their defaults never warn, so a preset's or script's explicit defaults are quiet."""
    layers = placed_kinds(architecture)
    model = "; ".join(
        f"{PLACEMENT_NAMES[placement]} {', '.join(dict.fromkeys(k for p, _, k in layers if p == placement))}"
        for placement in PLACEMENT_NAMES if any(p == placement for p, _, _ in layers))
    for name, (kinds, placements) in kind_option_users().items():
        value = _option(args, name)
        default = DECODER_LAYOUT_DEFAULTS.get(name)
        if value is None or value == default:
            continue
        if any(kind in kinds and placement in placements for placement, _, kind in layers):
            continue
        flag = f"--{name.replace('_', '-')}" + ("" if isinstance(value, bool) else f" {value}")
        logger.warning(f"{flag} is set, but no layer of this model uses it: it acts on {', '.join(kinds)} "
                       f"{' and '.join(PLACEMENT_NAMES[p] for p in placements)} (this model: {model})")
