"""Search spaces of the architecture search: the choices of a weight-sharing supernet, read from a
YAML file (``search_spaces/*.yaml``), validated with errors naming the field, sampled reproducibly
into ``Architecture`` values (``models/architecture.py``), and checked against architectures.

The space of the mixed-attention paper (Liu et al., "Neural Architecture Search on Efficient
Transformers and Beyond", Table 1) is the classic Transformer space of Hardware-Aware Transformers
(embedding widths, layer counts, per-layer FFN widths and head counts, the encoder-decoder connect)
plus the attention kind of every sub-layer. A file::

    # every list holds the choices; a single value may be written without brackets
    head_dim: sliced            # a layer's head dimension = its width / its heads; fixed, or a number: see HEAD_DIM_MODES
    shared_embed_dim: true      # encoder and decoder sample one width (--share-all-embeddings)
    encoder:
      embed_dim: [768, 1024]
      layers: [6]
      ffn_embed_dim: [2048, 3072, 4096, 5120]   # per layer
      attention_heads: [4, 8, 16]               # per layer
      attention_kinds: [softmax, cosformer]     # per layer, encoder self-attention
    decoder:
      embed_dim: [768, 1024]
      layers: [1, 2, 3, 4, 5, 6]
      ffn_embed_dim: [2048, 3072, 4096, 5120]
      attention_heads: [4, 8, 16]
      attention_kinds: [softmax, cosformer]     # decoder self-attention
      cross_attention_heads: [4, 8, 16]
      cross_attention_kinds: [softmax, cosformer]
      encoder_decoder_connect: [1, 2, 3]        # last encoder layers each decoder layer attends to

A language-model space has no ``encoder`` section and no cross-attention or connect choices.

Sampling (HAT's rule, ``sample``): the widths and layer counts first, then every layer's choices
independently and uniformly; a decoder layer's connect among the choices that do not exceed the
sampled encoder depth.
"""
import dataclasses
import itertools
import random
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ..files import TextFileError, read_text
from ..models.architecture import Architecture, DecoderLayer, EncoderLayer
from ..modules import (
    ATTENTION_REGISTRY,
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    AttentionConfigError,
    valid_kinds,
)
from ..modules.registry import head_dim_kinds

# How a sub-network's head count divides its attention width. "sliced": the head dimension is the
# layer's width divided by its heads (a sub-network of width e and h heads uses the leading e x e
# block of every projection, split into h heads of e / h): what the paper's Table 1 implies, whose
# widths 768/1024 and heads 4/8/16 give head dimensions from 48 to 256 (attention width = embedding
# width, fairseq's rule). "fixed": every head keeps one dimension, the space's largest width over its
# most heads (or the number given as head_dim), so a layer with h heads has an attention width of h x
# that dimension (its architecture's attention_head_dim; kinds that support a head dimension of their
# own only), and a sub-network with h heads uses the first h heads of every projection.
HEAD_DIM_MODES = ("sliced", "fixed")

ENCODER_FIELDS = ("embed_dim", "layers", "ffn_embed_dim", "attention_heads", "attention_kinds")
DECODER_FIELDS = ENCODER_FIELDS + ("cross_attention_heads", "cross_attention_kinds", "encoder_decoder_connect")
LM_DECODER_FIELDS = ENCODER_FIELDS
TOP_FIELDS = ("head_dim", "shared_embed_dim", "encoder", "decoder")


class SearchSpaceError(AttentionConfigError):
    """A search space file, or an architecture against a space, that is not valid; the message names
    the field and what is allowed."""


@dataclass(frozen=True)
class SideChoices:
    """The choices of one side (``encoder`` or ``decoder``); the cross-attention fields are empty for
    encoders and language models."""

    embed_dim: Tuple[int, ...]
    layers: Tuple[int, ...]
    ffn_embed_dim: Tuple[int, ...]
    attention_heads: Tuple[int, ...]
    attention_kinds: Tuple[str, ...]
    cross_attention_heads: Tuple[int, ...] = ()
    cross_attention_kinds: Tuple[str, ...] = ()
    encoder_decoder_connect: Tuple[int, ...] = ()


@dataclass(frozen=True)
class SearchSpace:
    decoder: SideChoices
    encoder: Optional[SideChoices] = None  # None: a language-model space
    head_dim: str = "sliced"
    shared_embed_dim: bool = False
    # head_dim "fixed": every head's dimension (the file's number, or for "fixed" the largest width over the
    # most heads of the whole space, resolved when read); None for "sliced"
    fixed_dim: Optional[int] = None

    @property
    def language_model(self) -> bool:
        return self.encoder is None

    # ------------------------------------------------------------ reading ---
    @classmethod
    def from_dict(cls, data, source: str = "the search space") -> "SearchSpace":
        if not isinstance(data, dict):
            raise SearchSpaceError(f"{source}: a search space is a mapping of fields, got {type(data).__name__}")
        _known(data, TOP_FIELDS, source, "")
        if "decoder" not in data:
            raise SearchSpaceError(f"{source}: decoder: missing (every space has decoder choices)")
        head_dim, fixed_dim = data.get("head_dim", "sliced"), None
        if isinstance(head_dim, int) and not isinstance(head_dim, bool) and head_dim >= 1:
            head_dim, fixed_dim = "fixed", head_dim
        elif str(head_dim) not in HEAD_DIM_MODES:
            raise SearchSpaceError(f"{source}: head_dim: {head_dim!r} is not one of {', '.join(HEAD_DIM_MODES)}, "
                                   "or a positive head dimension (fixed at that number)")
        shared = data.get("shared_embed_dim", False)
        if not isinstance(shared, bool):
            raise SearchSpaceError(f"{source}: shared_embed_dim: expected true or false, got {shared!r}")
        language_model = data.get("encoder") is None
        encoder = None if language_model else _side(data["encoder"], "encoder", ENCODER_FIELDS, ENCODER_SELF, source)
        decoder = _side(data["decoder"], "decoder", LM_DECODER_FIELDS if language_model else DECODER_FIELDS, DECODER_SELF, source)
        if head_dim == "fixed" and fixed_dim is None:
            sides = [decoder] + ([] if encoder is None else [encoder])
            fixed_dim = (max(w for side in sides for w in side.embed_dim)
                         // max(h for side in sides for h in side.attention_heads + side.cross_attention_heads))
        space = cls(decoder=decoder, encoder=encoder, head_dim=str(head_dim), shared_embed_dim=shared, fixed_dim=fixed_dim)
        space._check(source)
        return space

    @classmethod
    def from_yaml(cls, text: str, source: str = "the search space") -> "SearchSpace":
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise SearchSpaceError(f"{source}: not YAML: {error}") from None
        return cls.from_dict(data, source)

    @classmethod
    def from_file(cls, path: str) -> "SearchSpace":
        try:
            text = read_text(path)
        except TextFileError as error:
            raise SearchSpaceError(f"{path}: the search space: {error}") from None
        return cls.from_yaml(text, path)

    def to_dict(self) -> dict:
        # (fixed: the number, so that a space derived from this one, e.g. a pruned one, keeps the heads' dimension)
        data = {"head_dim": self.fixed_dim if self.head_dim == "fixed" else self.head_dim, "shared_embed_dim": self.shared_embed_dim}
        if self.encoder is not None:
            data["encoder"] = {f: list(getattr(self.encoder, f)) for f in ENCODER_FIELDS}
        fields = LM_DECODER_FIELDS if self.language_model else DECODER_FIELDS
        data["decoder"] = {f: list(getattr(self.decoder, f)) for f in fields}
        return data

    # ------------------------------------------------------------- checks ---
    def _check(self, source: str):
        sides = [("decoder", self.decoder)] + ([] if self.encoder is None else [("encoder", self.encoder)])
        for name, side in sides:
            for heads_field in ("attention_heads", "cross_attention_heads") if self.head_dim == "sliced" else ():
                for heads, width in itertools.product(getattr(side, heads_field), side.embed_dim):
                    if width % heads:
                        raise SearchSpaceError(f"{source}: {name}.{heads_field}: {heads} heads do not divide "
                                               f"{name}.embed_dim {width}")
            if self.head_dim == "fixed":
                head_dim = self.fixed_dim
                for kinds_field in ("attention_kinds", "cross_attention_kinds"):
                    for kind in getattr(side, kinds_field):
                        if kind not in head_dim_kinds():
                            raise SearchSpaceError(
                                f"{source}: {name}.{kinds_field}: attention kind {kind!r} takes no head dimension of its "
                                f"own, which head_dim {self.to_dict()['head_dim']} gives every head (kinds that do: "
                                f"{', '.join(head_dim_kinds()) or 'none'}); use head_dim: sliced or leave {kind!r} out")
        if self.shared_embed_dim and self.encoder is not None and set(self.encoder.embed_dim) != set(self.decoder.embed_dim):
            raise SearchSpaceError(f"{source}: shared_embed_dim: encoder.embed_dim {list(self.encoder.embed_dim)} and "
                                   f"decoder.embed_dim {list(self.decoder.embed_dim)} must hold the same widths")
        if self.encoder is not None:
            smallest_encoder = min(self.encoder.layers)
            if min(self.decoder.encoder_decoder_connect) > smallest_encoder:
                raise SearchSpaceError(
                    f"{source}: decoder.encoder_decoder_connect: the smallest choice {min(self.decoder.encoder_decoder_connect)} "
                    f"exceeds the smallest encoder.layers {smallest_encoder}: no choice fits a {smallest_encoder}-layer encoder")

    # --------------------------------------------------- head dimensions ---
    def with_head_dims(self, architecture: Architecture) -> Architecture:
        """``architecture`` with the head dimension this space gives every sub-layer (``fixed_dim``; None,
        width / heads, with ``head_dim: sliced``): a choice the sampling leaves to the space."""
        dim = self.fixed_dim
        return dataclasses.replace(
            architecture,
            encoder_layers=tuple(dataclasses.replace(layer, attention_head_dim=dim) for layer in architecture.encoder_layers),
            decoder_layers=tuple(dataclasses.replace(
                layer, attention_head_dim=dim, cross_attention_head_dim=dim if layer.cross_attention_kind is not None else None)
                for layer in architecture.decoder_layers),
        )

    def check_contains(self, architecture: Architecture, source: str = "the architecture"):
        """Fail, naming the field and the allowed values, unless the space holds ``architecture``."""
        if architecture.decoder_only != self.language_model:
            raise SearchSpaceError(f"{source}: a {'language model' if architecture.decoder_only else 'translation'} "
                                   f"architecture, but the space is for {'language models' if self.language_model else 'translation'}")
        checks = [("decoder", self.decoder, architecture.decoder_embed_dim, architecture.decoder_layers)]
        if self.encoder is not None:
            checks.insert(0, ("encoder", self.encoder, architecture.encoder_embed_dim, architecture.encoder_layers))
        for name, side, width, layers in checks:
            _allowed(width, side.embed_dim, f"{name}.embed_dim", source)
            _allowed(len(layers), side.layers, f"{name}.layers", source)
            for i, layer in enumerate(layers):
                where = f" (layer {i})"
                _allowed(layer.ffn_embed_dim, side.ffn_embed_dim, f"{name}.ffn_embed_dim", source, where)
                _allowed(layer.attention_heads, side.attention_heads, f"{name}.attention_heads", source, where)
                _allowed(layer.attention_kind, side.attention_kinds, f"{name}.attention_kinds", source, where)
                _allowed(layer.attention_head_dim, [self.fixed_dim], "head_dim", source,
                         f" ({name} layer {i}'s attention_head_dim, head_dim: {self.head_dim})")
                if isinstance(layer, DecoderLayer) and not self.language_model:
                    _allowed(layer.cross_attention_head_dim, [self.fixed_dim], "head_dim", source,
                             f" ({name} layer {i}'s cross_attention_head_dim, head_dim: {self.head_dim})")
                    _allowed(layer.cross_attention_heads, side.cross_attention_heads, f"{name}.cross_attention_heads", source, where)
                    _allowed(layer.cross_attention_kind, side.cross_attention_kinds, f"{name}.cross_attention_kinds", source, where)
                    fitting = [k for k in side.encoder_decoder_connect if k <= len(architecture.encoder_layers)]
                    _allowed(layer.encoder_decoder_connect, fitting, f"{name}.encoder_decoder_connect", source,
                             f"{where}, with {len(architecture.encoder_layers)} encoder layers")
        if self.shared_embed_dim and not self.language_model and architecture.encoder_embed_dim != architecture.decoder_embed_dim:
            raise SearchSpaceError(f"{source}: shared_embed_dim: encoder and decoder widths must be equal, got "
                                   f"{architecture.encoder_embed_dim} and {architecture.decoder_embed_dim}")

    def check_within(self, other: "SearchSpace", source: str, other_source: str):
        """Fail unless every architecture of this space is one of ``other``'s: the same kind of space and, field by
        field, no choice ``other`` lacks (the message names the field and the choices missing)."""
        mine, theirs = self.to_dict(), other.to_dict()
        if self.language_model != other.language_model or mine["head_dim"] != theirs["head_dim"]:
            raise SearchSpaceError(f"{source}: a {'language-model' if self.language_model else 'translation'} space with "
                                   f"head_dim {mine['head_dim']}, but {other_source} is a "
                                   f"{'language-model' if other.language_model else 'translation'} space with head_dim {theirs['head_dim']}")
        for side in ("encoder", "decoder"):
            for field, choices in mine.get(side, {}).items():
                missing = [c for c in choices if c not in theirs[side][field]]
                if missing:
                    raise SearchSpaceError(f"{source}: {side}.{field}: {', '.join(map(str, missing))} not among the choices of "
                                           f"{other_source} ({', '.join(map(str, theirs[side][field]))})")
        if other.shared_embed_dim and not self.shared_embed_dim and self.encoder is not None:
            raise SearchSpaceError(f"{source}: shared_embed_dim: false, but {other_source} shares one width")

    # ----------------------------------------------------------- sampling ---
    def sample(self, rng: random.Random) -> Architecture:
        """One architecture, every choice uniform (module docstring)."""
        encoder_width = encoder_layers = None
        if self.encoder is not None:
            encoder_width = rng.choice(self.encoder.embed_dim)
            encoder_layers = tuple(
                EncoderLayer(rng.choice(self.encoder.attention_kinds), rng.choice(self.encoder.attention_heads),
                             rng.choice(self.encoder.ffn_embed_dim))
                for _ in range(rng.choice(self.encoder.layers)))
        decoder_width = encoder_width if self.shared_embed_dim and encoder_width is not None else rng.choice(self.decoder.embed_dim)
        decoder_layers = []
        for _ in range(rng.choice(self.decoder.layers)):
            kind, heads, ffn = (rng.choice(self.decoder.attention_kinds), rng.choice(self.decoder.attention_heads),
                                rng.choice(self.decoder.ffn_embed_dim))
            if self.language_model:
                decoder_layers.append(DecoderLayer(kind, heads, ffn))
                continue
            fitting = [k for k in self.decoder.encoder_decoder_connect if k <= len(encoder_layers)]
            decoder_layers.append(DecoderLayer(kind, heads, ffn, rng.choice(self.decoder.cross_attention_kinds),
                                               rng.choice(self.decoder.cross_attention_heads), rng.choice(fitting)))
        return self.with_head_dims(Architecture(decoder_embed_dim=decoder_width, decoder_layers=tuple(decoder_layers),
                                                encoder_embed_dim=encoder_width, encoder_layers=encoder_layers or ())).check()

    def samples(self, n: int, seed: int) -> List[Architecture]:
        """``n`` architectures drawn with ``random.Random(seed)``: the same list on every machine."""
        rng = random.Random(seed)
        return [self.sample(rng) for _ in range(n)]

    @property
    def kind_choices(self) -> int:
        """The most attention kinds any placement offers: ``extreme(largest, i)`` for i in
        ``range(kind_choices)`` together put every kind of every placement in every layer."""
        sides = [self.decoder] + ([] if self.encoder is None else [self.encoder])
        return max(len(kinds) for side in sides for kinds in (side.attention_kinds, side.cross_attention_kinds) if kinds)

    def extreme(self, largest: bool, kind_index: int = 0) -> Architecture:
        """The largest (or smallest) architecture: the widest widths, the most layers, the widest FFNs,
        the most heads and the deepest connect (or the opposite); every sub-layer takes the
        ``kind_index``-th kind its placement's list names (cyclically: a shorter list repeats its kinds)."""
        pick = max if largest else min

        def kind(kinds):
            return kinds[kind_index % len(kinds)]

        encoder_width, encoder_layers = None, ()
        if self.encoder is not None:
            encoder_width = pick(self.encoder.embed_dim)
            layer = EncoderLayer(kind(self.encoder.attention_kinds), pick(self.encoder.attention_heads), pick(self.encoder.ffn_embed_dim))
            encoder_layers = (layer,) * pick(self.encoder.layers)
        decoder_width = pick(self.decoder.embed_dim) if not self.shared_embed_dim or encoder_width is None else encoder_width
        if self.language_model:
            layer = DecoderLayer(kind(self.decoder.attention_kinds), pick(self.decoder.attention_heads), pick(self.decoder.ffn_embed_dim))
        else:
            fitting = [k for k in self.decoder.encoder_decoder_connect if k <= len(encoder_layers)]
            layer = DecoderLayer(kind(self.decoder.attention_kinds), pick(self.decoder.attention_heads), pick(self.decoder.ffn_embed_dim),
                                 kind(self.decoder.cross_attention_kinds), pick(self.decoder.cross_attention_heads), pick(fitting))
        return self.with_head_dims(Architecture(decoder_embed_dim=decoder_width, decoder_layers=(layer,) * pick(self.decoder.layers),
                                                encoder_embed_dim=encoder_width, encoder_layers=encoder_layers)).check()

    def extremes_per_kind(self) -> List[Architecture]:
        """The largest and the smallest architecture with each kind in every sub-layer (``extreme`` for every
        ``kind_index``): largest, smallest with the first kinds, then with the second ones, ..."""
        return [self.extreme(largest, i) for i in range(self.kind_choices) for largest in (True, False)]

    def size(self) -> int:
        """The number of distinct architectures in the space."""
        encoder_counts: Dict[int, int] = {0: 1}
        if self.encoder is not None:
            per_layer = len(self.encoder.ffn_embed_dim) * len(self.encoder.attention_heads) * len(self.encoder.attention_kinds)
            encoder_counts = {n: per_layer ** n for n in self.encoder.layers}
        decoder_per_layer = len(self.decoder.ffn_embed_dim) * len(self.decoder.attention_heads) * len(self.decoder.attention_kinds)
        if not self.language_model:
            decoder_per_layer *= len(self.decoder.cross_attention_heads) * len(self.decoder.cross_attention_kinds)
        widths = (len(self.decoder.embed_dim) if self.shared_embed_dim or self.encoder is None
                  else len(self.encoder.embed_dim) * len(self.decoder.embed_dim))
        total = 0
        for encoder_depth, encoder_count in encoder_counts.items():
            connects = len([k for k in self.decoder.encoder_decoder_connect if k <= encoder_depth]) or 1
            total += encoder_count * sum((decoder_per_layer * connects) ** n for n in self.decoder.layers)
        return widths * total


# ----------------------------------------------------------------- parsing ---
def _known(data: dict, fields: Sequence[str], source: str, prefix: str):
    unknown = [key for key in data if key not in fields]
    if unknown:
        raise SearchSpaceError(f"{source}: {prefix}{unknown[0]}: unknown field (fields{' of ' + prefix[:-1] if prefix else ''}: "
                               f"{', '.join(fields)})")


def _side(data, name: str, fields: Sequence[str], placement: str, source: str) -> SideChoices:
    if not isinstance(data, dict):
        raise SearchSpaceError(f"{source}: {name}: expected a mapping of fields ({', '.join(fields)}), got {data!r}")
    _known(data, fields, source, f"{name}.")
    values = {}
    for field in fields:
        if field not in data:
            raise SearchSpaceError(f"{source}: {name}.{field}: missing (fields of {name}: {', '.join(fields)})")
        choices = data[field] if isinstance(data[field], list) else [data[field]]
        if not choices:
            raise SearchSpaceError(f"{source}: {name}.{field}: empty: give at least one choice")
        if len(set(map(str, choices))) != len(choices):
            raise SearchSpaceError(f"{source}: {name}.{field}: {choices} holds a choice twice")
        if field.endswith("_kinds"):
            kind_placement = ENCODER_DECODER if field.startswith("cross_") else placement
            for kind in choices:
                spec = ATTENTION_REGISTRY.get(str(kind))
                if spec is None or kind_placement not in spec.placements:
                    why = "unknown attention kind" if spec is None else f"attention kind that cannot be used for {kind_placement}"
                    raise SearchSpaceError(f"{source}: {name}.{field}: {kind!r} is an {why} (valid for {kind_placement}: "
                                           f"{', '.join(valid_kinds(kind_placement))})")
            values[field] = tuple(str(kind) for kind in choices)
        else:
            for value in choices:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise SearchSpaceError(f"{source}: {name}.{field}: {value!r} is not a positive integer")
            values[field] = tuple(choices)
    return SideChoices(**values)


def _allowed(value, choices: Sequence, field: str, source: str, where: str = ""):
    if value not in choices:
        raise SearchSpaceError(f"{source}: {field}{where}: {value!r} is outside the space (allowed: "
                               f"{', '.join(map(str, choices)) or 'none'})")


def architectures_of_lines(lines: Iterator[str], source: str) -> Iterator[Architecture]:
    """The architectures of a JSON-lines file (as ``sample`` prints them); errors name the line."""
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield Architecture.from_json(line)
            except AttentionConfigError as error:
                raise SearchSpaceError(f"{source}:{number}: {error}") from None


__all__ = ["HEAD_DIM_MODES", "SearchSpace", "SearchSpaceError", "SideChoices", "architectures_of_lines"]
