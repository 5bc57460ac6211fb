"""Kinds own their options (issue 13, item 2): each kind registers a ``KindOptions``
dataclass next to its code; the models' configurations and command lines are composed
from the registry; ``from_config`` receives the typed options and the model-wide
``AttentionContext``; fairseq's quantisation noise is read once, for every kind with
linear maps, and refused for a kind without."""
import argparse
import dataclasses
from dataclasses import dataclass, field

import pytest
import torch
from fairseq import options as fairseq_options

import fairseq_plugins  # noqa: F401  (registers kinds and models)
from fairseq_plugins.models.layout import KindOptionsConfig
from fairseq_plugins.models.mixed_transformer_lm import MixedTransformerLanguageModelConfig
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, AttentionConfigError, BaseAttention, build_attention
from fairseq_plugins.modules.options import (
    AttentionContext,
    KindOptions,
    ModelKindOptions,
    compose_option_classes,
    option_fields,
    registered_option_classes,
)
from fairseq_plugins.modules.registry import register_attention, unregister_attention

KINDS = list(ATTENTION_REGISTRY)


def test_every_kind_registers_an_options_dataclass_declared_next_to_its_code():
    for name, spec in ATTENTION_REGISTRY.items():
        assert issubclass(spec.options_class, KindOptions), name
        assert spec.options_class.__module__.startswith(spec.cls.__module__.rsplit(".", 1)[0]), (
            f"{name}: options declared in {spec.options_class.__module__}, not in the kind's package")
        for f in option_fields(spec.options_class):
            assert f.metadata.get("help"), f"{name}: option {f.name} has no help"
            assert set(spec.options[f.name]) <= set(spec.placements)


def test_the_model_configurations_are_composed_from_the_registry():
    declared = {f.name: f.default for c in registered_option_classes() for f in option_fields(c)}
    assert {"cosformer_max_positions", "extractor_lags", "bet_score_weights", "softmax_diag_scale"} <= set(declared)
    lm_fields = {f.name: f.default for f in dataclasses.fields(MixedTransformerLanguageModelConfig)}
    composed = {f.name: f.default for f in dataclasses.fields(KindOptionsConfig) if f.name != "_name"}
    assert composed == declared
    assert all(lm_fields[name] == default for name, default in declared.items())


@pytest.mark.parametrize("arch", ["mixed_transformer_iwslt_de_en", "mixed_transformer_lm_tiny"])
def test_every_kind_option_is_on_the_command_line_with_its_help(arch):
    parser = fairseq_options.get_training_parser()
    task = "language_modeling" if arch.endswith("_lm_tiny") else "translation"
    args = fairseq_options.parse_args_and_arch(parser, input_args=["data", "--task", task, "--arch", arch])
    assert all(hasattr(args, f.name) for c in registered_option_classes() for f in option_fields(c))
    help_text = " ".join(parser.format_help().split())
    for options_class in registered_option_classes():
        for f in option_fields(options_class):
            flag = "--" + f.name.replace("_", "-")
            assert flag in help_text, flag
            assert " ".join(f.metadata["help"].split())[:60] in help_text, flag


def test_from_config_receives_the_typed_options_and_the_context(monkeypatch):
    received = {}
    for name, spec in ATTENTION_REGISTRY.items():
        original = spec.cls.from_config.__func__

        def spy(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options, context, _name=name, _original=original):
            received[_name] = (options, context)
            return _original(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options, context)

        monkeypatch.setattr(spec.cls, "from_config", classmethod(spy))
    cfg = argparse.Namespace(max_target_positions=32, max_source_positions=24, extractor_lags="5",
                             bet_score_weights="shared", cosformer_max_positions="40")
    for name, spec in ATTENTION_REGISTRY.items():
        build_attention(name, spec.placements[-1], 16, 4, cfg)
        options, context = received[name]
        assert type(options) is spec.options_class, name
        assert context == AttentionContext(max_target_positions=32, max_source_positions=24), name
    assert received["extractor_he"][0].extractor_lags == 5  # converted to its type
    assert received["cosformer"][0].cosformer_max_positions == 40
    assert received["bet"][0].bet_score_weights == "shared"


@pytest.mark.parametrize("option, value, message", [
    ("bet_score_weights", "both", "--bet-score-weights must be one of per-head, shared, got 'both'"),
    ("extractor_conv_impl", "cuda", "--extractor-conv-impl must be one of auto, direct, fft, got 'cuda'"),
    ("extractor_lags", 0, "--extractor-lags must be >= 1, got 0"),
    ("cosformer_max_positions", 0, "--cosformer-max-positions must be >= 1, got 0"),
    ("softmax_diag_scale", float("inf"), "--softmax-diag-scale must be a finite number, got inf"),
])
def test_bad_values_are_refused_naming_the_option(option, value, message):
    with pytest.raises(AttentionConfigError) as error:
        ModelKindOptions.from_args(argparse.Namespace(**{option: value}))
    assert str(error.value) == message


# ------------------------------------------------------- quantisation noise ---
QUANT_NOISE = argparse.Namespace(max_target_positions=16, max_source_positions=16, quant_noise_pq=0.25,
                                 quant_noise_pq_block_size=4)


def _linear_maps(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.parametrize("kind", KINDS)
def test_quant_noise_is_read_once_for_every_kind_with_linear_maps(kind):
    spec = ATTENTION_REGISTRY[kind]
    for placement in spec.placements:
        if not spec.cls.supports_quant_noise:
            with pytest.raises(AttentionConfigError, match=rf"--quant-noise-pq 0.25: attention kind '{kind}'"):
                build_attention(kind, placement, 16, 4, QUANT_NOISE)
            assert not _linear_maps(build_attention(kind, placement, 16, 4, argparse.Namespace(max_target_positions=16)))
            continue
        module = build_attention(kind, placement, 16, 4, QUANT_NOISE)
        maps = _linear_maps(module)
        assert maps, f"{kind} declares supports_quant_noise but has no linear map"
        # fairseq's quant_noise registers one forward pre-hook that drops weight blocks in training
        assert all(len(m._forward_pre_hooks) == 1 for m in maps), (kind, placement)
        plain = build_attention(kind, placement, 16, 4, argparse.Namespace(max_target_positions=16, max_source_positions=16))
        assert all(len(m._forward_pre_hooks) == 0 for m in _linear_maps(plain)), (kind, placement)


def test_quant_noise_acts_in_training_only():
    module = build_attention("cosformer", DECODER_SELF, 16, 4, QUANT_NOISE)
    x = torch.randn(5, 2, 16)
    module.eval()
    first, _ = module(x, x, x)
    again, _ = module(x, x, x)
    assert torch.equal(first, again)
    module.train()
    torch.manual_seed(0)
    noisy, _ = module(x, x, x)
    assert not torch.allclose(noisy, first)


# ------------------------------------------------------------- registration ---
@dataclass
class _ClashingOptions(KindOptions):
    extractor_lags: int = field(default=3, metadata={"help": "clashes with the Extractors' option"})


def test_an_option_name_means_one_thing():
    with pytest.raises(ValueError, match="declares options \\['extractor_lags'\\], which kind 'extractor_she' declares too"):
        register_attention("clashing_kind", [DECODER_SELF], naive_reference=None, description="", options=_ClashingOptions)(
            type("ClashingKind", (BaseAttention,), {}))
    assert "clashing_kind" not in ATTENTION_REGISTRY
    with pytest.raises(ValueError, match="declared by both"):
        compose_option_classes(registered_option_classes() + [_ClashingOptions])


def test_options_must_be_a_kind_options_dataclass():
    with pytest.raises(TypeError, match="must be a KindOptions dataclass"):
        register_attention("untyped_kind", [DECODER_SELF], naive_reference=None, description="",
                           options={"untyped_option": None})(type("UntypedKind", (BaseAttention,), {}))
    assert "untyped_kind" not in ATTENTION_REGISTRY


def test_a_kind_registered_later_joins_the_command_line():
    @dataclass
    class LateOptions(KindOptions):
        late_kind_width: int = field(default=2, metadata={"help": "late_kind: a width"})

    register_attention("late_kind", [DECODER_SELF], naive_reference=None, description="", options=LateOptions)(
        type("LateKind", (BaseAttention,), {}))
    try:
        for arch, task in (("mixed_transformer_iwslt_de_en", "translation"), ("mixed_transformer_lm_tiny", "language_modeling")):
            parser = fairseq_options.get_training_parser()
            args = fairseq_options.parse_args_and_arch(parser, input_args=[
                "data", "--task", task, "--arch", arch, "--late-kind-width", "7"])
            assert args.late_kind_width == 7
            assert ModelKindOptions.from_args(args).of(LateOptions).late_kind_width == 7
    finally:
        unregister_attention("late_kind")


def test_layers_whose_kind_is_not_named_take_the_kind_registered_as_the_default():
    from fairseq_plugins.models.architecture import Architecture
    from fairseq_plugins.modules import PLACEMENTS, default_kind

    defaults = [spec.name for spec in ATTENTION_REGISTRY.values() if spec.default]
    assert defaults == [default_kind()] and set(ATTENTION_REGISTRY[default_kind()].placements) == set(PLACEMENTS)
    args = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), input_args=[
        "data", "--task", "translation", "--arch", "transformer_iwslt_de_en", "--user-dir", "fairseq_plugins"])
    args.arch = "mixed_transformer"
    architecture = Architecture.from_args(args)
    kinds = {layer.attention_kind for layer in architecture.encoder_layers + architecture.decoder_layers}
    kinds |= {layer.cross_attention_kind for layer in architecture.decoder_layers}
    assert kinds == {default_kind()}
    # one default, valid everywhere
    with pytest.raises(ValueError, match=f"declares itself the default kind, which '{default_kind()}' is"):
        register_attention("second_default", PLACEMENTS, naive_reference=None, description="", default=True)(
            type("SecondDefault", (BaseAttention,), {}))
    assert "second_default" not in ATTENTION_REGISTRY
    with pytest.raises(ValueError, match="the default attention kind 'partial_default' must support every placement"):
        register_attention("partial_default", [DECODER_SELF], naive_reference=None, description="", default=True)(
            type("PartialDefault", (BaseAttention,), {}))
    assert "partial_default" not in ATTENTION_REGISTRY
