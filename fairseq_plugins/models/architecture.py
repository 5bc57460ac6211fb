"""The architecture of a mixed model as one value: embedding widths and, per
layer, the attention kind, head count and FFN width (decoder layers: also the
encoder-decoder attention kind and heads and how many last encoder layers it
attends to, the "En-De Connect" of the mixed-attention search space).

It is resolved once from the model options (command line, preset, hydra
config or ``--architecture-file``) by :func:`model_architecture`, validated
there with errors naming the option, and passed down explicitly to the
encoder, the decoder and every layer. ``to_json``/``from_json`` give the
format ``--architecture-file`` reads (what an architecture search writes)::

    {"encoder_embed_dim": 512,
     "encoder_layers": [{"attention_kind": "softmax", "attention_heads": 4, "ffn_embed_dim": 1024}, ...],
     "decoder_embed_dim": 512,
     "decoder_layers": [{"attention_kind": "softmax", "attention_heads": 4, "ffn_embed_dim": 1024,
                         "cross_attention_kind": "softmax", "cross_attention_heads": 4,
                         "encoder_decoder_connect": 1}, ...]}

Language models have no ``encoder_*`` keys (or ``null``/``[]``) and no
``cross_attention_*`` keys in their decoder layers. A layer's optional
``attention_head_dim`` / ``cross_attention_head_dim`` give its heads a
dimension of their own (attention width = heads x head dimension; unset, and
left out of the JSON: width / heads).

Checkpoints: ``build_model`` writes the built architecture's JSON into the
model options as ``architecture`` (a record, read back by
:func:`architecture_of_checkpoint`; the model is always built from the
per-layer options, which the checkpoint keeps as well). Checkpoints saved
before that field existed load exactly as before; for them (and where the
options object fairseq saves is not the one the model was built from)
:func:`architecture_of_checkpoint` resolves the architecture from the saved
options.
"""
import contextlib
import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from ..modules import (
    ATTENTION_REGISTRY,
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    AttentionConfigError,
    check_head_dim,
    check_key_copies,
    check_kind,
    default_kind,
    valid_kinds,
)

logger = logging.getLogger(__name__)


# A layer's attention head dimension: None (the default) is the layer's width over its heads, fairseq's
# rule (attention width = embedding width); a number keeps every head at that dimension whatever the
# heads, so the attention width is heads x head dimension (a search space's ``head_dim: fixed``).
@dataclass(frozen=True)
class EncoderLayer:
    attention_kind: str
    attention_heads: int
    ffn_embed_dim: int
    attention_head_dim: Optional[int] = None


@dataclass(frozen=True)
class DecoderLayer:
    attention_kind: str
    attention_heads: int
    ffn_embed_dim: int
    cross_attention_kind: Optional[str] = None  # None: no encoder-decoder attention (language models)
    cross_attention_heads: Optional[int] = None
    # how many last encoder layers the encoder-decoder attention attends to (their outputs concatenated
    # along time; 1: the last encoder layer only, fairseq's encoder-decoder attention)
    encoder_decoder_connect: int = 1
    attention_head_dim: Optional[int] = None  # (see EncoderLayer)
    cross_attention_head_dim: Optional[int] = None


# the per-layer head-dimension fields, which an architecture's JSON leaves out when unset
HEAD_DIM_FIELDS = ("attention_head_dim", "cross_attention_head_dim")


@dataclass(frozen=True)
class Architecture:
    decoder_embed_dim: int
    decoder_layers: Tuple[DecoderLayer, ...]
    encoder_embed_dim: Optional[int] = None  # None: a language model (no encoder)
    encoder_layers: Tuple[EncoderLayer, ...] = ()

    @property
    def decoder_only(self) -> bool:
        return self.encoder_embed_dim is None

    @property
    def has_cross_attention(self) -> bool:
        return any(layer.cross_attention_kind is not None for layer in self.decoder_layers)

    @property
    def connects_earlier_encoder_layers(self) -> bool:
        """Some decoder layer attends to more than the last encoder layer: the encoder must return its
        intermediate layer outputs (fairseq's ``encoder_states``)."""
        return any(layer.encoder_decoder_connect > 1 for layer in self.decoder_layers)

    # ------------------------------------------------------------- checks ---
    def check(self, cross_self_attention: bool = False, scale_heads: bool = False) -> "Architecture":
        """Every check of the per-layer choices, with errors naming the option that sets each value
        (a file's values carry the same names: see ``architecture_options``). Returns self."""
        if not self.decoder_layers:
            raise AttentionConfigError("--decoder-layers: the model has no decoder layers")
        _check_encoder_layers(self.encoder_layers, self.encoder_embed_dim)
        crossed = [layer.cross_attention_kind is not None for layer in self.decoder_layers]
        if any(crossed) and not all(crossed):
            raise AttentionConfigError("--cross-attention-kinds: either every decoder layer has encoder-decoder attention or none")
        if any(crossed) and self.decoder_only:
            raise AttentionConfigError("--cross-attention-kinds: a language model (no encoder) has no encoder-decoder attention")
        _check_decoder_layers(self.decoder_layers, self.decoder_embed_dim, cross_self_attention)
        if scale_heads:
            _check_scale_heads(self.decoder_layers, self.decoder_embed_dim)
        _check_connect(self.decoder_layers, len(self.encoder_layers))
        return self

    # ------------------------------------------------------------ pruning ---
    def keep_layers(self, encoder: Optional[Sequence[int]] = None, decoder: Optional[Sequence[int]] = None) -> "Architecture":
        """The architecture of the kept layers (LayerDrop pruning), in layer order as fairseq's
        ``prune_state_dict`` renumbers them; None keeps every layer of that side."""
        kept = dataclasses.replace(
            self,
            encoder_layers=_kept(self.encoder_layers, encoder, "--encoder-layers-to-keep", "encoder"),
            decoder_layers=_kept(self.decoder_layers, decoder, "--decoder-layers-to-keep", "decoder"),
        )
        _check_connect(kept.decoder_layers, len(kept.encoder_layers), " (after --encoder-layers-to-keep)")
        return kept

    # --------------------------------------------------------------- JSON ---
    def to_dict(self) -> dict:
        data = {
            "encoder_embed_dim": self.encoder_embed_dim,
            "encoder_layers": [dataclasses.asdict(layer) for layer in self.encoder_layers],
            "decoder_embed_dim": self.decoder_embed_dim,
            "decoder_layers": [dataclasses.asdict(layer) for layer in self.decoder_layers],
        }
        for layer in data["encoder_layers"] + data["decoder_layers"]:
            for name in HEAD_DIM_FIELDS:  # unset (width / heads): not written, as before the field existed
                if layer.get(name, 0) is None:
                    del layer[name]
        if self.decoder_only:
            del data["encoder_embed_dim"], data["encoder_layers"]
            for layer in data["decoder_layers"]:
                for name in ("cross_attention_kind", "cross_attention_heads", "encoder_decoder_connect", "cross_attention_head_dim"):
                    layer.pop(name, None)
        return data

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data) -> "Architecture":
        """The architecture ``data`` (as ``to_dict`` gives) describes, type-checked and validated."""
        if not isinstance(data, dict):
            raise AttentionConfigError(f"an architecture is a JSON object, got {type(data).__name__}")
        _check_keys(data, ("encoder_embed_dim", "encoder_layers", "decoder_embed_dim", "decoder_layers"), "the architecture")
        encoder_embed_dim = data.get("encoder_embed_dim")
        encoder_entries = data.get("encoder_layers") or []
        decoder_only = encoder_embed_dim is None
        if decoder_only and encoder_entries:
            raise AttentionConfigError("encoder_layers are given but encoder_embed_dim is not")
        if not decoder_only and not encoder_entries:
            raise AttentionConfigError("encoder_embed_dim is given but encoder_layers is empty: an encoder-decoder "
                                       "architecture needs at least one encoder layer (a language model has neither)")
        if not data.get("decoder_layers"):
            raise AttentionConfigError("decoder_layers is empty: give at least one decoder layer")
        encoder = tuple(EncoderLayer(**_layer_fields(entry, EncoderLayer, f"encoder layer {i}"))
                        for i, entry in enumerate(_list(encoder_entries, "encoder_layers")))
        decoder = tuple(DecoderLayer(**_layer_fields(entry, DecoderLayer, f"decoder layer {i}"))
                        for i, entry in enumerate(_list(data.get("decoder_layers"), "decoder_layers")))
        return cls(
            decoder_embed_dim=_positive(data.get("decoder_embed_dim"), "decoder_embed_dim"),
            decoder_layers=decoder,
            encoder_embed_dim=None if decoder_only else _positive(encoder_embed_dim, "encoder_embed_dim"),
            encoder_layers=encoder,
        ).check()

    @classmethod
    def from_json(cls, text: str) -> "Architecture":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise AttentionConfigError(f"not an architecture in JSON: {error}") from None
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str) -> "Architecture":
        """``--architecture-file``: errors name the file."""
        from ..files import TextFileError, read_text

        try:
            return cls.from_json(read_text(path))
        except (TextFileError, AttentionConfigError) as error:
            raise AttentionConfigError(f"--architecture-file {path}: {error}") from None

    # ----------------------------------------------------- model options ---
    @classmethod
    def from_args(cls, args, decoder_only: bool = False) -> "Architecture":
        """The full architecture the model options describe (before ``*_layers_to_keep``), validated:
        per-layer lists have one value per layer of ``--encoder-layers``/``--decoder-layers`` or one for all."""
        from fairseq.models.transformer import TransformerConfig

        std = TransformerConfig.from_namespace(args)
        encoder: Tuple[EncoderLayer, ...] = ()
        if not decoder_only:
            n = std.encoder.layers
            kinds = parse_per_layer(_option(args, "encoder_attention_kinds", default_kind()), n, "encoder_attention_kinds", str)
            heads = parse_per_layer(_option(args, "encoder_layer_attention_heads"), n, "encoder_layer_attention_heads", _positive_int, std.encoder.attention_heads)
            ffn = parse_per_layer(_option(args, "encoder_layer_ffn_embed_dims"), n, "encoder_layer_ffn_embed_dims", _positive_int, std.encoder.ffn_embed_dim)
            head_dims = parse_head_dims(_option(args, "encoder_layer_attention_head_dims"), n, "encoder_layer_attention_head_dims")
            encoder = tuple(EncoderLayer(*choices) for choices in zip(kinds, heads, ffn, head_dims))
            _check_encoder_layers(encoder, std.encoder.embed_dim)  # (before the decoder's options are read)
        n = std.decoder.layers
        kinds = parse_per_layer(_option(args, "decoder_attention_kinds", default_kind()), n, "decoder_attention_kinds", str)
        heads = parse_per_layer(_option(args, "decoder_layer_attention_heads"), n, "decoder_layer_attention_heads", _positive_int, std.decoder.attention_heads)
        ffn = parse_per_layer(_option(args, "decoder_layer_ffn_embed_dims"), n, "decoder_layer_ffn_embed_dims", _positive_int, std.decoder.ffn_embed_dim)
        head_dims = parse_head_dims(_option(args, "decoder_layer_attention_head_dims"), n, "decoder_layer_attention_head_dims")
        cross_kinds: List[Optional[str]] = [None] * n
        cross_heads: List[Optional[int]] = [None] * n
        cross_head_dims: List[Optional[int]] = [None] * n
        connect: List[int] = [1] * n
        if not decoder_only and not getattr(args, "no_cross_attention", False):
            cross_kinds = parse_per_layer(_option(args, "cross_attention_kinds", default_kind()), n, "cross_attention_kinds", str)
            cross_heads_value = _option(args, "cross_attention_heads")
            cross_heads = (parse_per_layer(cross_heads_value, n, "cross_attention_heads", _positive_int)
                           if cross_heads_value is not None else heads)
            connect = parse_per_layer(_option(args, "encoder_decoder_connect", "1"), n, "encoder_decoder_connect", _positive_int)
            cross_head_dims = parse_head_dims(_option(args, "cross_attention_head_dims"), n, "cross_attention_head_dims")
        elif any(d is not None for d in parse_head_dims(_option(args, "cross_attention_head_dims"), n, "cross_attention_head_dims")):
            raise AttentionConfigError("--cross-attention-head-dims: this model has no encoder-decoder attention")
        elif _option(args, "encoder_decoder_connect") is not None and str(_option(args, "encoder_decoder_connect")).strip() not in ("", "1"):
            raise AttentionConfigError("--encoder-decoder-connect: this model has no encoder-decoder attention")
        decoder = tuple(DecoderLayer(*choices) for choices in zip(kinds, heads, ffn, cross_kinds, cross_heads, connect,
                                                                  head_dims, cross_head_dims))
        return cls(
            decoder_embed_dim=std.decoder.embed_dim,
            decoder_layers=decoder,
            encoder_embed_dim=None if decoder_only else std.encoder.embed_dim,
            encoder_layers=encoder,
        ).check(cross_self_attention=bool(getattr(std, "cross_self_attention", False)),
                scale_heads=bool(_option(args, "scale_heads", False)))


def model_architecture(args, decoder_only: bool = False) -> Architecture:
    """The architecture of the model the options build: the full one for the given layer counts,
    then the layers ``--encoder-layers-to-keep``/``--decoder-layers-to-keep`` list (LayerDrop pruning)."""
    full = Architecture.from_args(args, decoder_only=decoder_only)
    return full.keep_layers(
        encoder=None if decoder_only else parse_layers_to_keep(_option(args, "encoder_layers_to_keep"), "--encoder-layers-to-keep"),
        decoder=parse_layers_to_keep(_option(args, "decoder_layers_to_keep"), "--decoder-layers-to-keep"),
    )


def architecture_options(architecture: Architecture) -> dict:
    """The model options (attribute name -> value) that describe ``architecture``: ``model_architecture``
    of options holding these values (and no layers to keep) is ``architecture`` again."""
    options = {
        "decoder_embed_dim": architecture.decoder_embed_dim,
        "decoder_layers": len(architecture.decoder_layers),
        "decoder_attention_kinds": _joined(layer.attention_kind for layer in architecture.decoder_layers),
        "decoder_layer_attention_heads": _joined(layer.attention_heads for layer in architecture.decoder_layers),
        "decoder_layer_ffn_embed_dims": _joined(layer.ffn_embed_dim for layer in architecture.decoder_layers),
        "decoder_layer_attention_head_dims": _joined_head_dims(layer.attention_head_dim for layer in architecture.decoder_layers),
    }
    if not architecture.decoder_only:
        options.update({
            "encoder_embed_dim": architecture.encoder_embed_dim,
            "encoder_layers": len(architecture.encoder_layers),
            "encoder_attention_kinds": _joined(layer.attention_kind for layer in architecture.encoder_layers),
            "encoder_layer_attention_heads": _joined(layer.attention_heads for layer in architecture.encoder_layers),
            "encoder_layer_ffn_embed_dims": _joined(layer.ffn_embed_dim for layer in architecture.encoder_layers),
            "encoder_layer_attention_head_dims": _joined_head_dims(layer.attention_head_dim for layer in architecture.encoder_layers),
            "no_cross_attention": not architecture.has_cross_attention,
        })
        if architecture.has_cross_attention:
            options["cross_attention_kinds"] = _joined(layer.cross_attention_kind for layer in architecture.decoder_layers)
            options["cross_attention_heads"] = _joined(layer.cross_attention_heads for layer in architecture.decoder_layers)
            options["encoder_decoder_connect"] = _joined(layer.encoder_decoder_connect for layer in architecture.decoder_layers)
            options["cross_attention_head_dims"] = _joined_head_dims(layer.cross_attention_head_dim for layer in architecture.decoder_layers)
    return options


# Options whose value the architecture (a file) gives: any of them on the command line conflicts with
# --architecture-file (the widths and head counts of whole sides are only the per-layer defaults).
STRUCTURE_OPTIONS = (
    "encoder_embed_dim", "encoder_layers", "encoder_attention_heads", "encoder_ffn_embed_dim",
    "encoder_attention_kinds", "encoder_layer_attention_heads", "encoder_layer_ffn_embed_dims",
    "decoder_embed_dim", "decoder_layers", "decoder_attention_heads", "decoder_ffn_embed_dim",
    "decoder_attention_kinds", "decoder_layer_attention_heads", "decoder_layer_ffn_embed_dims",
    "cross_attention_kinds", "cross_attention_heads", "no_cross_attention", "encoder_decoder_connect",
    "encoder_layer_attention_head_dims", "decoder_layer_attention_head_dims", "cross_attention_head_dims",
)


def apply_architecture_file(args, decoder_only: bool) -> None:
    """``--architecture-file``: write the file's architecture into the model options, which then
    describe the model as per-layer options always did (so a checkpoint does not need the file), and
    consume the option. Run before any preset default is filled in: an option already set was given
    on the command line and conflicts with the file."""
    path = getattr(args, "architecture_file", None)
    if not path:
        return
    architecture = Architecture.from_file(path)
    if architecture.decoder_only != decoder_only:
        expected = "a language model (no encoder_*)" if decoder_only else "an encoder-decoder model (with encoder_*)"
        raise AttentionConfigError(f"--architecture-file {path}: this model needs {expected} architecture")
    given = [name for name in STRUCTURE_OPTIONS if getattr(args, name, None) not in (None, False)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise AttentionConfigError(
            f"--architecture-file {path} conflicts with {flags}: the file gives every layer's choices and the "
            f"embedding widths; leave out {flags} or the file")
    for name, value in architecture_options(architecture).items():
        _set_option(args, name, value)
    _set_option(args, "architecture_file", None)
    logger.info(f"architecture from --architecture-file {path}: {architecture.to_json()}")


# arch name -> model name of every preset registered by ``register_preset`` (the hydra config files
# under fairseq_plugins/config/model/ are generated from these: models/hydra_configs.py)
PRESETS = {}


def preset_config_file(arch_name: str) -> str:
    """The hydra config file of a preset, shipped inside the package: fairseq_plugins/config/model/<preset>.yaml."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(package, "config", "model", f"{arch_name}.yaml")


def refuse_hydra_defaults(args, model_name: str, arch_name: str) -> None:
    """fairseq-hydra-train fills every model option from the model's dataclass defaults before the preset
    runs (a preset only fills options that are unset), so ``model: {_name: <preset>}`` alone would build
    the dataclass's model, not the preset's. The preset's config file holds its values and
    ``preset: <preset>``; options without the field at all (checkpoints saved before it existed, encoder-
    decoder models, whose hydra options are only the file's keys) hold no dataclass defaults."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(args) or "preset" not in args or args.preset == arch_name:
        return
    path = preset_config_file(arch_name)
    config_dir = os.path.dirname(os.path.dirname(path))
    held = (f"the values of the preset {args.preset}" if args.preset is not None
            else f"{model_name}'s defaults (fairseq-hydra-train fills them in before the preset runs)")
    raise AttentionConfigError(
        f"model._name {arch_name}: the model options hold {held}, so this would build another model than "
        f"--arch {arch_name}; use the preset's config file {path} (fairseq-hydra-train --config-dir "
        f"{config_dir} --config-name config model={arch_name} common.user_dir=... ; options given after it override it)")


def register_preset(model_name: str, arch_name: str):
    """``register_model_architecture`` for this package's presets: the preset runs after
    ``--architecture-file`` (if given) has been applied, so the file's values win over the preset's defaults;
    it records its name in the ``preset`` option, and refuses hydra options that hold another preset's or
    the model's defaults (see ``refuse_hydra_defaults``)."""
    from fairseq.models import register_model_architecture

    decoder_only = model_name == "mixed_transformer_lm"

    def decorator(preset: Callable):
        def with_architecture_file(args):
            refuse_hydra_defaults(args, model_name, arch_name)
            apply_architecture_file(args, decoder_only)
            preset(args)
            _set_option(args, "preset", arch_name)

        with_architecture_file.__doc__ = preset.__doc__
        register_model_architecture(model_name, arch_name)(with_architecture_file)
        PRESETS[arch_name] = model_name
        return preset

    return decorator


def record_architecture(args, architecture: Architecture) -> None:
    """Write the built architecture's JSON into the model options as ``architecture`` (a record the
    checkpoint keeps; ``model_architecture`` never reads it)."""
    _set_option(args, "architecture", architecture.to_json())


def describe_architecture(args, architecture: Architecture) -> None:
    """Make the model options describe ``architecture`` (after fairseq's ``prune_state_dict`` has
    renumbered the kept layers and cleared ``*_layers_to_keep``, the options must describe the pruned
    model, as fairseq's own ``--encoder-layers`` then does)."""
    for name, value in architecture_options(architecture).items():
        _set_option(args, name, value)
    record_architecture(args, architecture)


def architecture_of_checkpoint(path: str) -> Architecture:
    """The architecture of the model a checkpoint holds: the recorded JSON, or for checkpoints saved
    before it was recorded, resolved from the saved model options."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(path, load_on_all_ranks=True)
    args = state["cfg"]["model"] if state.get("cfg") is not None else state["args"]
    recorded = getattr(args, "architecture", None)
    if recorded:
        return Architecture.from_json(recorded)
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    name = getattr(args, "_name", None) or getattr(args, "arch", None)
    decoder_only = ARCH_MODEL_NAME_REGISTRY.get(name, name) == "mixed_transformer_lm"
    if decoder_only:
        from .mixed_transformer_lm import mixed_transformer_lm_base as fill_defaults
    else:
        from .mixed_transformer import mixed_transformer_base as fill_defaults
    from omegaconf import OmegaConf, open_dict

    with open_dict(args) if OmegaConf.is_config(args) else contextlib.nullcontext():
        fill_defaults(args)
        return model_architecture(args, decoder_only=decoder_only)


# -------------------------------------------------------------- helpers ---
def parse_per_layer(value, num_layers: int, option: str, cast: Callable, default=None) -> List:
    """'a,b,c' -> [a, b, c]; one value broadcasts; None -> [default] * num_layers."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if default is None:
            raise AttentionConfigError(f"--{option.replace('_', '-')} is not set")
        return [default] * num_layers
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    items = [str(v).strip() for v in items]
    if len(items) == 1:
        items = items * num_layers
    if len(items) != num_layers:
        flag = f"--{option.replace('_', '-')}"
        raise AttentionConfigError(
            f"{flag} has {len(items)} values ({','.join(items)}) but the model has {num_layers} layers "
            f"({_layer_count_option(option)} {num_layers}): give one value per layer or a single value for all, "
            f"e.g. {flag} {pattern_for_depth(items, num_layers)} (the values repeated or cut to {num_layers} layers)"
        )
    try:
        return [cast(v) for v in items]
    except ValueError:
        raise AttentionConfigError(f"--{option.replace('_', '-')}: cannot read {value!r} as a list of {cast.__name__}") from None


def pattern_for_depth(pattern, layers: int) -> str:
    """A per-layer pattern ('a,b,c' or a list) for ``layers`` layers: layer i takes the pattern's value
    i mod its length, so the pattern repeats from its first layer and is cut after the last layer
    (6-layer mFormer "s,c,s,c,s,s" -> 4 layers "s,c,s,c", 8 layers "s,c,s,c,s,s,s,c")."""
    values = pattern if isinstance(pattern, (list, tuple)) else str(pattern).split(",")
    values = [str(v).strip() for v in values]
    return ",".join(values[i % len(values)] for i in range(layers))


def default_per_layer(args, option: str, pattern: str, preset_layers: int) -> None:
    """A preset's per-layer default that follows the depth: unless ``option`` is given, it gets
    ``pattern`` (written for the preset's ``preset_layers`` layers) repeated or cut to the side's
    --encoder-layers/--decoder-layers (``pattern_for_depth``), so that a preset shrunk or deepened on the
    command line keeps its layout instead of failing on a list of the wrong length."""
    if getattr(args, option, None):
        return
    layers_option = _layer_count_option(option)[2:].replace("-", "_")
    layers = getattr(args, layers_option, None) or preset_layers
    setattr(args, option, pattern_for_depth(pattern, int(layers)))


def _layer_count_option(option: str) -> str:
    """The layer-count flag a per-layer option follows: encoder_* -> --encoder-layers, the rest (decoder
    layers' self- and encoder-decoder attention, En-De Connect) -> --decoder-layers."""
    side = "encoder" if option.startswith("encoder_") and not option.startswith("encoder_decoder") else "decoder"
    return f"--{side}-layers"


def parse_head_dims(value, num_layers: int, option: str) -> List[Optional[int]]:
    """A per-layer head-dimension option: unset -> None for every layer (width / heads); else as
    ``parse_per_layer``, where "auto" is None for that layer."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return [None] * num_layers
    return parse_per_layer(value, num_layers, option, _head_dim)


def _head_dim(text: str) -> Optional[int]:
    return None if text == "auto" else _positive_int(text)


_head_dim.__name__ = "positive integers or auto"


def _joined_head_dims(values: Iterable[Optional[int]]) -> Optional[str]:
    """The option of per-layer head dimensions: None when every layer has width / heads."""
    values = list(values)
    return None if all(v is None for v in values) else ",".join("auto" if v is None else str(v) for v in values)


def parse_layers_to_keep(value, option: str) -> Optional[List[int]]:
    """'0,2' -> [0, 2]; unset -> None (every layer)."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        return [int(str(item).strip()) for item in items]
    except ValueError:
        raise AttentionConfigError(f"{option}: cannot read {value!r} as a list of layer indices") from None


def _kept(layers: tuple, keep: Optional[Sequence[int]], option: str, side: str) -> tuple:
    if keep is None:
        return layers
    indices = sorted(keep)  # (fairseq's prune_state_dict sorts them too)
    bad = [i for i in indices if not 0 <= i < len(layers)]
    if bad or len(set(indices)) != len(indices) or not indices:
        raise AttentionConfigError(
            f"{option} {','.join(map(str, keep))}: give distinct indices of the {len(layers)} {side} layers "
            f"(0 to {len(layers) - 1})")
    return tuple(layers[i] for i in indices)


def _positive_int(text: str) -> int:
    number = int(text)
    if number < 1:
        raise ValueError(text)
    return number


_positive_int.__name__ = "positive integers"


def _check_encoder_layers(layers: Sequence[EncoderLayer], embed_dim: int) -> None:
    for i, layer in enumerate(layers):
        check_kind(layer.attention_kind, ENCODER_SELF, f"--encoder-attention-kinds (encoder layer {i})")
        _check_heads(embed_dim, layer.attention_heads, layer.attention_head_dim, layer.attention_kind,
                     f"--encoder-layer-attention-heads (encoder layer {i})", f"--encoder-layer-attention-head-dims (encoder layer {i})")


def _check_decoder_layers(layers: Sequence[DecoderLayer], embed_dim: int, cross_self_attention: bool) -> None:
    for i, layer in enumerate(layers):
        check_kind(layer.attention_kind, DECODER_SELF, f"--decoder-attention-kinds (decoder layer {i})")
        _check_heads(embed_dim, layer.attention_heads, layer.attention_head_dim, layer.attention_kind,
                     f"--decoder-layer-attention-heads (decoder layer {i})", f"--decoder-layer-attention-head-dims (decoder layer {i})")
        if cross_self_attention and not getattr(ATTENTION_REGISTRY[layer.attention_kind].cls, "supports_cross_self_attention", False):
            able = [k for k in valid_kinds(DECODER_SELF) if getattr(ATTENTION_REGISTRY[k].cls, "supports_cross_self_attention", False)]
            raise AttentionConfigError(
                f"--cross-self-attention needs {' or '.join(able) or 'a'} decoder self-attention (fairseq attends over the "
                f"source and the prefix together), but decoder layer {i} uses {layer.attention_kind!r}"
            )
        if layer.cross_attention_kind is not None:
            check_kind(layer.cross_attention_kind, ENCODER_DECODER, f"--cross-attention-kinds (decoder layer {i})")
            _check_heads(embed_dim, layer.cross_attention_heads, layer.cross_attention_head_dim, layer.cross_attention_kind,
                         f"--cross-attention-heads (decoder layer {i})", f"--cross-attention-head-dims (decoder layer {i})")
        elif layer.cross_attention_head_dim is not None:
            raise AttentionConfigError(f"--cross-attention-head-dims (decoder layer {i}): the layer has no encoder-decoder attention")


def _check_scale_heads(layers: Sequence[DecoderLayer], embed_dim: int) -> None:
    """fairseq's --scale-heads (NormFormer) cuts the self-attention's output, which has the layer's width, into
    one slice of head dimension per head: heads of a dimension of their own do not tile that width."""
    for i, layer in enumerate(layers):
        dim = layer.attention_head_dim
        if dim is not None and dim * layer.attention_heads != embed_dim:
            raise AttentionConfigError(
                f"--scale-heads: fairseq scales the self-attention output of a decoder layer as {layer.attention_heads} "
                f"slices of its width {embed_dim}, but decoder layer {i} has {layer.attention_heads} heads of {dim} "
                f"dimensions (--decoder-layer-attention-head-dims); leave out one of the two")


def _check_connect(layers: Sequence[DecoderLayer], encoder_layers: int, where: str = "") -> None:
    """--encoder-decoder-connect: 1 <= k <= the encoder's layers, and a cross-attention kind that can attend
    to k concatenated encoder layers; a layer without encoder-decoder attention has k = 1."""
    for i, layer in enumerate(layers):
        k = layer.encoder_decoder_connect
        option = f"--encoder-decoder-connect (decoder layer {i})"
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise AttentionConfigError(f"{option}: {k!r} is not a positive number of encoder layers")
        if k == 1:
            continue
        if layer.cross_attention_kind is None:
            raise AttentionConfigError(f"{option}: {k} encoder layers, but the layer has no encoder-decoder attention")
        if k > encoder_layers:
            raise AttentionConfigError(
                f"{option}: {k} encoder layers, but the encoder has {encoder_layers}{where}; "
                f"give 1 to {encoder_layers} (the last k encoder layers)")
        check_key_copies(layer.cross_attention_kind, k, option)


def _check_heads(embed_dim: int, heads: int, head_dim: Optional[int], kind: str, option: str, head_dim_option: str):
    """Without a head dimension of its own the layer's heads split its width; with one, the kind must
    support an attention width other than the layer's (heads x head dimension)."""
    if head_dim is None:
        if embed_dim % heads != 0:
            raise AttentionConfigError(f"{option}: embedding dimension {embed_dim} is not divisible by {heads} heads")
        return
    check_head_dim(kind, head_dim, head_dim_option)


def _option(args, name: str, default=None):
    """Read a plugin option from the raw model args (argparse Namespace or
    omegaconf DictConfig). Never through TransformerConfig: it maps names that
    start with ``encoder_``/``decoder_`` onto its sub-configs and drops keys it
    does not know when converting a DictConfig."""
    value = getattr(args, name, None)
    return default if value is None else value


def _set_option(args, name: str, value) -> None:
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.is_config(args):
        with open_dict(args):
            args[name] = value
    else:
        setattr(args, name, value)


def _joined(values: Iterable) -> str:
    return ",".join(str(value) for value in values)


def _list(value, name: str) -> list:
    if not isinstance(value, list) or not value and name == "decoder_layers":
        raise AttentionConfigError(f"{name} must be a non-empty list of layers, got {value!r}")
    return value


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AttentionConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_keys(data: dict, known: Sequence[str], where: str) -> None:
    unknown = [key for key in data if key not in known]
    if unknown:
        raise AttentionConfigError(f"{where}: unknown keys {unknown}; known: {', '.join(known)}")


def _layer_fields(entry, layer_type: type, where: str) -> dict:
    if not isinstance(entry, dict):
        raise AttentionConfigError(f"{where}: a layer is a JSON object, got {entry!r}")
    fields = {f.name: f for f in dataclasses.fields(layer_type)}
    _check_keys(entry, tuple(fields), where)
    required = [name for name, f in fields.items() if f.default is dataclasses.MISSING and name not in entry]
    if required:
        raise AttentionConfigError(f"{where}: missing {', '.join(required)}")
    values = dict(entry)
    for name in ("attention_kind", "cross_attention_kind"):
        if values.get(name) is not None and not isinstance(values[name], str):
            raise AttentionConfigError(f"{where}: {name} must be a string, got {values[name]!r}")
    for name in ("attention_heads", "ffn_embed_dim", "cross_attention_heads", "encoder_decoder_connect", *HEAD_DIM_FIELDS):
        if values.get(name) is not None:
            values[name] = _positive(values[name], f"{where}: {name}")
    if (values.get("cross_attention_kind") is None) != (values.get("cross_attention_heads") is None):
        raise AttentionConfigError(f"{where}: give both cross_attention_kind and cross_attention_heads, or neither")
    return values

