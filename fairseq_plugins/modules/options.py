"""Typed options of attention kinds, and the model-wide values kinds read.

A kind declares its options as a dataclass next to its code (``modules/<kind>/options.py``):
a subclass of ``KindOptions`` whose fields are the model options (names, help, defaults; the
``placements`` metadata of a field names the placements where the kind reads it, default all of
the kind's), registered with the kind (``register_attention(options=...)``). The model
configurations and ``add_args`` compose the registered classes (``registered_option_classes``),
and ``build_attention`` hands a kind's ``from_config`` an instance of its class read from the raw
model options (``KindOptions.from_args``, which validates every field and names the option in its
errors) with the ``AttentionContext``: what every kind may read of the model (positions,
quantisation noise), read from the options in one place.
"""
import dataclasses
import typing
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Type

from fairseq.dataclass import FairseqDataclass


def flag(name: str) -> str:
    """The command-line flag of option ``name``: extractor_lags -> --extractor-lags."""
    return "--" + name.replace("_", "-")


@dataclass
class KindOptions(FairseqDataclass):
    """Base of a kind's option dataclass. Fields are model options; ``validate`` checks the values
    of one instance (errors: ``AttentionConfigError`` naming the option), ``check_model`` what
    depends on the model the kind is used in."""

    @classmethod
    def from_args(cls, args) -> "KindOptions":
        """The options as the raw model options (argparse Namespace, DictConfig, or None) hold them;
        unset (None) values take the field's default. Validated."""
        values = {}
        for f in option_fields(cls):
            value = getattr(args, f.name, None) if args is not None else None
            values[f.name] = f.default if value is None else value
        options = cls(**values)
        options.validate()
        return options

    def validate(self) -> None:
        """Check the values (override; call super)."""

    def check_model(self, context: "AttentionContext", layers: Sequence[Tuple[str, int]]) -> None:
        """Check the values against the model the kind is used in, before any module is built:
        ``layers`` are the (placement, layer index) of the sub-layers of this kind (override)."""

    def non_default(self) -> Dict[str, object]:
        """option -> value, for the fields whose value is not the default."""
        return {f.name: getattr(self, f.name) for f in option_fields(type(self)) if getattr(self, f.name) != f.default}


def option_fields(cls: Type[KindOptions]) -> List[dataclasses.Field]:
    """The option fields of a ``KindOptions`` class (fairseq's ``_name`` is not an option)."""
    return [f for f in dataclasses.fields(cls) if f.name != "_name"]


@dataclass
class NoOptions(KindOptions):
    """The options of a kind that has none."""


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


@dataclass(frozen=True)
class AttentionContext:
    """What an attention kind may read of the model besides its own options, read once from the model
    options (``from_args``).

    ``max_target_positions`` / ``max_source_positions``: the positions the model is built for
    (``--max-target-positions``, for language models ``--tokens-per-sample`` (+1 with ``--add-bos-token``);
    ``--max-source-positions``), None where unknown. ``target_positions`` / ``source_positions``: the same
    as the options that set them (``Positions``, for error messages), filled by the models' build checks.
    ``quant_noise_pq`` / ``quant_noise_pq_block_size``: fairseq's ``--quant-noise-pq`` and
    ``--quant-noise-pq-block-size`` (Fan et al. 2020), for the kinds' linear maps."""

    max_target_positions: Optional[int] = None
    max_source_positions: Optional[int] = None
    quant_noise_pq: float = 0.0
    quant_noise_pq_block_size: int = 8
    target_positions: Tuple[Positions, ...] = ()
    source_positions: Tuple[Positions, ...] = ()

    @classmethod
    def from_args(cls, args, target_positions: Sequence = (), source_positions: Sequence = ()) -> "AttentionContext":
        def read(name, default=None):
            value = getattr(args, name, None) if args is not None else None
            return default if value is None else value

        target, source = read("max_target_positions"), read("max_source_positions")
        return cls(
            max_target_positions=None if target is None else int(target),
            max_source_positions=None if source is None else int(source),
            quant_noise_pq=float(read("quant_noise_pq", 0.0)),
            quant_noise_pq_block_size=int(read("quant_noise_pq_block_size", 8)),
            target_positions=tuple(Positions(*p) for p in target_positions),
            source_positions=tuple(Positions(*p) for p in source_positions),
        )


@dataclass(frozen=True)
class ModelKindOptions:
    """Every registered kind's options and the ``AttentionContext``, read once from a model's options
    (``from_args``); what the models hand ``build_attention`` for every sub-layer."""

    context: AttentionContext
    by_class: Tuple[Tuple[type, KindOptions], ...]

    @classmethod
    def from_args(cls, args, target_positions: Sequence = (), source_positions: Sequence = ()) -> "ModelKindOptions":
        return cls(AttentionContext.from_args(args, target_positions, source_positions),
                   tuple((c, c.from_args(args)) for c in registered_option_classes()))

    def of(self, options_class: Type[KindOptions]) -> KindOptions:
        for known, options in self.by_class:
            if known is options_class:
                return options
        raise KeyError(f"{options_class.__name__}: no options of this class were read (kind registered after the model "
                       f"options were read?)")


def registered_option_classes() -> List[Type[KindOptions]]:
    """The option classes of the registered kinds, in registration order, each once (kinds may share one)."""
    from .registry import ATTENTION_REGISTRY

    return list(dict.fromkeys(spec.options_class for spec in ATTENTION_REGISTRY.values()))


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_option(text: str) -> Tuple[str, object]:
    """``NAME=VALUE``, an option of a registered kind, with VALUE read as the type of its ``KindOptions``
    field (``Optional[X]``: X, or ``none``; bool: true / false, yes / no, on / off, 1 / 0). Errors
    (ValueError) name the option and what it expects; an unknown name's lists the registered options."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_").lstrip("_")
    fields = {f.name: (c, f) for c in registered_option_classes() for f in option_fields(c)}
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    if name not in fields:
        raise ValueError(f"unknown option {name!r}; the registered kinds' options: {', '.join(sorted(fields)) or '(none)'}")
    options_class, f = fields[name]
    kind = typing.get_type_hints(options_class)[name]
    optional = type(None) in typing.get_args(kind)
    if optional:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if optional and value.strip().lower() == "none":
        return name, None
    if kind is bool:
        if value.strip().lower() not in _TRUE + _FALSE:
            raise ValueError(f"{name} is true or false, got {value!r}")
        return name, value.strip().lower() in _TRUE
    try:
        return name, kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} is {'an optional ' if optional else 'a '}{kind.__name__}, got {value!r}") from None


def compose_option_classes(classes: Sequence[Type[KindOptions]], name: str = "KindOptionsConfig") -> type:
    """One dataclass with the fields of every class of ``classes`` (the options part of a model's
    configuration); two classes declaring the same option name is an error."""
    # a class that another one extends adds nothing (and would break the method resolution order)
    classes = [c for c in classes if not any(other is not c and issubclass(other, c) for other in classes)]
    seen: Dict[str, type] = {}
    for options_class in classes:
        for f in option_fields(options_class):
            if f.name in seen:
                raise ValueError(f"option {f.name!r} is declared by both {seen[f.name].__name__} and {options_class.__name__}")
            seen[f.name] = options_class
    bases = tuple(reversed(classes)) or (FairseqDataclass,)  # reversed: the fields in registration order
    return dataclasses.make_dataclass(name, [], bases=bases)
