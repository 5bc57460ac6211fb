"""The costs every attention kind registers (modules/costs.py) and the whole-model
sum of an Architecture (complexity.architecture_cost): decoding state equals the
incremental state the modules keep, parameters equal the built models', forward
FLOPs equal torch.utils.flop_counter.FlopCounterMode's count of small models of
every kind, up to each implementation's stated extra (or saved) products."""
import argparse
from types import SimpleNamespace

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.modules import MultiheadAttention
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import fairseq_plugins  # noqa: F401  (registers kinds, models, presets)
from fairseq_plugins import complexity
from fairseq_plugins.cli import model_costs
from fairseq_plugins.criterions.label_smoothed_cross_entropy_with_pointer import attention_kind, pointer_kinds
from fairseq_plugins.models.architecture import model_architecture
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, build_attention, valid_kinds
from fairseq_plugins.modules.costs import BACKWARD_FLOPS_PER_FORWARD_FLOP, AttentionOptions, lag_terms


def test_every_kind_registers_its_costs():
    for name, spec in ATTENTION_REGISTRY.items():
        costs = spec.costs
        assert costs is not None, name
        assert costs.asymptotic_class.startswith("O(") and costs.decoding_state_growth in ("per token", "constant", "window"), name
        options = AttentionOptions(lags=3)
        for placement in spec.placements:
            forward = costs.forward_flops(placement, 16, 4, 5, 5, 16, options)
            assert forward == 2 * costs.macs(placement, 16, 4, 5, 5, 16, options) > 0
            assert costs.backward_flops(placement, 16, 4, 5, 5, 16, options) == BACKWARD_FLOPS_PER_FORWARD_FLOP * forward
        assert costs.decoding_state_bytes(ENCODER_SELF, 16, 4, 5, 16, options) == 0


def test_pointer_kinds_come_from_the_registry():
    assert pointer_kinds() == sorted(n for n, s in ATTENTION_REGISTRY.items() if s.attention_distribution)
    assert set(pointer_kinds()) == {"bet", "softmax"}  # softmax distributions; cosFormer's ReLU weights can be 0
    # fairseq's own MultiheadAttention is the kind that extends it
    assert attention_kind(MultiheadAttention(16, 4, self_attention=True)) == "softmax"
    assert attention_kind(torch.nn.Linear(2, 2)) == "Linear"


# ------------------------------------------------------------ decoding state ---
def _state_cases():
    for name, spec in sorted(ATTENTION_REGISTRY.items()):
        for placement in (p for p in spec.placements if p != ENCODER_SELF):
            yield name, placement, {}
            for variant in spec.conformance_variants.values():
                if placement in variant.placements:
                    yield name, placement, dict(variant.overrides)


def _floating_bytes(value) -> int:
    """Floating-point tensors of an incremental state, without padding masks (which fairseq's
    MultiheadAttention keeps as floats when it concatenates them; not part of the counted state)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size() if value.is_floating_point() else 0
    if isinstance(value, dict):
        return sum(_floating_bytes(v) for k, v in value.items() if "padding_mask" not in str(k))
    return 0


@pytest.mark.parametrize("kind,placement,overrides", list(_state_cases()), ids=str)
def test_decoding_state_bytes_equal_the_incremental_state(kind, placement, overrides):
    d, heads, lags, source = 16, 4, 3, 7
    cfg = argparse.Namespace(max_target_positions=12, max_source_positions=12, extractor_lags=lags, **overrides)
    torch.manual_seed(0)
    module = build_attention(kind, placement, d, heads, cfg).eval()
    costs = complexity.kind_cost(kind)
    options = model_costs.attention_options(argparse.Namespace(decoder_attention_kinds=kind, **vars(cfg)))
    encoder_out = torch.randn(source, 2, d)
    state = {}
    with torch.no_grad():
        for t in range(1, 6):
            x = torch.randn(1, 2, d)
            if placement == ENCODER_DECODER:
                module(x, encoder_out, encoder_out, incremental_state=state, static_kv=True, need_weights=False)
                length = source
            else:
                module(x, x, x, incremental_state=state, need_weights=False)
                length = t
            # batch of 2: twice one sequence's state
            assert _floating_bytes(state) == 2 * costs.decoding_state_bytes(placement, d, heads, length, d, options), t


# --------------------------------------------------------------- whole models ---
def _task(size: int):
    dictionary = Dictionary()
    for i in range(size - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    return SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)


def implementation_extra_macs(kind: str, placement: str, d: int, heads: int, queries: int, keys: int, options) -> int:
    """Products the implementation runs beyond (negative: short of) the kind's definition, for one
    training-mode forward pass without padding, 2 <= queries <= 64 (cosFormer: one chunk)."""
    if placement != DECODER_SELF:
        return 0  # every pair is visible: the implementations run exactly the defined products
    n, d_h = queries, d // heads
    causal_pairs = n * (n + 1) // 2
    if kind == "softmax":
        # fairseq computes the whole T x T score and value products and masks the future
        return 2 * (n * n - complexity.visible_pairs(placement, n, n, options.softmax_diag_free)) * d
    if kind == "bet":
        # both softmaxes run through scaled_dot_product_attention (math backend: whole T x T products,
        # scores and values); the diagonal-free second one over the n - 1 queries after the first
        # (the first token's output is its own value, no product)
        second = (n - 1) ** 2 if options.bet_diag_free else n * n
        defined_second = complexity.visible_pairs(placement, n, n, options.bet_diag_free)
        return 2 * (n * n - causal_pairs) * d + 2 * second * d - defined_second * d
    if kind == "cosformer":
        # one chunk of n tokens: intra-chunk q k^T and A v (2 n^2 d), the chunk's state k^T v, cos and
        # sin (2 n d d_h), and the prefix sums of the (2, 2) states as a product with a triangular ones
        # matrix (2 x 2^2 x d (d_h + 1)); the definition counts the linear form, 2 (2 n) d (d_h + 1)
        implementation = 2 * n * n * d + 2 * n * d * d_h + 8 * d * (d_h + 1)
        return implementation - 2 * (2 * n) * d * (d_h + 1)
    if kind.startswith("extractor_"):
        # the causal convolution computes min(n, l) taps at every position, the zero-padded ones too
        padded_terms = n * min(n, options.lags) - lag_terms(range(1, n + 1), options.lags)
        return padded_terms * (d * d if kind == "extractor_she" else d)
    raise AssertionError(f"state the implementation's extra products of attention kind {kind!r} here")


def _check_model(arch, extra, vocab, source_length, target_length, language_model):
    args = model_costs.preset_args(arch, extra)
    cost = model_costs.model_cost(args, source_length, target_length)
    torch.manual_seed(0)
    build_args = model_costs.preset_args(arch, extra)
    model = ARCH_MODEL_REGISTRY[arch].build_model(build_args, _task(vocab))
    model.train()
    assert cost.total_parameters(vocab) == sum(p.numel() for p in model.parameters())
    architecture = model_architecture(args, decoder_only=language_model)
    options = model_costs.attention_options(args)
    T, S = target_length, source_length
    extra_macs = 0
    for layer in architecture.encoder_layers:
        extra_macs += implementation_extra_macs(layer.attention_kind, ENCODER_SELF, architecture.encoder_embed_dim, layer.attention_heads, S, S, options)
    d = architecture.decoder_embed_dim
    for layer in architecture.decoder_layers:
        extra_macs += implementation_extra_macs(layer.attention_kind, DECODER_SELF, d, layer.attention_heads, T, T, options)
        if layer.cross_attention_kind is not None:
            extra_macs += implementation_extra_macs(layer.cross_attention_kind, ENCODER_DECODER, d, layer.cross_attention_heads, T,
                                                    layer.encoder_decoder_connect * S, options)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if language_model:
            model(torch.randint(4, vocab, (1, T)))
        else:
            model(torch.randint(4, vocab, (1, S)), torch.tensor([S]), torch.randint(4, vocab, (1, T)))
    assert counter.get_total_flops() == cost.total_flops(vocab) + 2 * extra_macs


SMALL_LM = ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "48", "--decoder-attention-heads", "4",
            "--decoder-layers", "2", "--tokens-per-sample", "16", "--dropout", "0"]


def small_lm(kind):
    """A 2-layer LM of ``kind``; a window of 4 lags where the kind reads one (T = 6 > l: it slides)."""
    lags = ["--extractor-lags", "4"] if "extractor_lags" in ATTENTION_REGISTRY[kind].options else []
    return SMALL_LM + ["--decoder-attention-kinds", kind] + lags


@pytest.mark.parametrize("kind", valid_kinds(DECODER_SELF))
def test_language_model_of_every_decoder_kind_equals_flop_counter_mode_and_its_parameters(kind):
    """T = 6 > l = 4: the Extractors' window slides."""
    _check_model("mixed_transformer_lm_tiny", small_lm(kind), 31, 1, 6, True)


@pytest.mark.parametrize("kind", sorted(set(valid_kinds(ENCODER_SELF)) | set(valid_kinds(ENCODER_DECODER))))
def test_encoder_decoder_of_every_encoder_and_cross_kind_equals_flop_counter_mode_and_its_parameters(kind):
    """The kind in the encoder and in the first decoder layer's encoder-decoder attention. The last
    decoder layer's cross-attention is softmax: fairseq asks the last layer for its attention weights
    even in training, which cosFormer computes separately from its output."""
    encoder = kind if kind in valid_kinds(ENCODER_SELF) else "softmax"
    cross = kind if kind in valid_kinds(ENCODER_DECODER) else "softmax"
    extra = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
             "--decoder-ffn-embed-dim", "40", "--encoder-layers", "1", "--decoder-layers", "2",
             "--encoder-attention-heads", "4", "--decoder-attention-heads", "2", "--encoder-attention-kinds", encoder,
             "--decoder-attention-kinds", "softmax", "--cross-attention-kinds", f"{cross},softmax", "--dropout", "0"]
    _check_model("mixed_transformer_iwslt_de_en", extra, 29, 9, 5, False)


COPY_KINDS = [k for k in valid_kinds(ENCODER_DECODER) if getattr(ATTENTION_REGISTRY[k].cls, "supports_key_copies", False)]


def connected(cross, connect):
    """A 2-layer encoder and 2-layer decoder whose encoder-decoder attentions (``cross`` in the first decoder
    layer, softmax in the last) attend to the last ``connect`` encoder layers (k*S keys)."""
    return ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
            "--decoder-ffn-embed-dim", "40", "--encoder-layers", "2", "--decoder-layers", "2",
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "2", "--decoder-attention-kinds", "softmax",
            "--cross-attention-kinds", f"{cross},softmax", "--encoder-decoder-connect", connect, "--dropout", "0"]


@pytest.mark.parametrize("connect", ["2", "2,1"])
@pytest.mark.parametrize("kind", COPY_KINDS)
def test_encoder_decoder_connect_equals_flop_counter_mode_and_its_parameters(kind, connect):
    """--encoder-decoder-connect k: the encoder-decoder attention over k*S keys."""
    _check_model("mixed_transformer_iwslt_de_en", connected(kind, connect), 29, 9, 5, False)


def _decoded_state_bytes(arch, extra, vocab, source_length, target_length, language_model):
    """The floating-point bytes of the decoder's incremental state after target_length steps (batch 1)."""
    args = model_costs.preset_args(arch, extra)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, _task(vocab)).eval()
    state = {}
    tokens = torch.randint(4, vocab, (1, target_length))
    with torch.no_grad():
        encoder_out = None if language_model else model.encoder(torch.randint(4, vocab, (1, source_length)), torch.tensor([source_length]))
        for t in range(1, target_length + 1):
            model.decoder(tokens[:, :t], encoder_out=encoder_out, incremental_state=state)
    options = model_costs.attention_options(args)
    expected = complexity.architecture_decoding_state_bytes(model_architecture(args, decoder_only=language_model),
                                                            source_length, target_length, options)
    return _floating_bytes(state), expected


@pytest.mark.parametrize("kind", valid_kinds(DECODER_SELF))
def test_decoding_state_of_a_language_model_of_every_decoder_kind(kind):
    measured, expected = _decoded_state_bytes("mixed_transformer_lm_tiny", small_lm(kind), 31, 1, 6, True)
    assert measured == expected


@pytest.mark.parametrize("kind", valid_kinds(ENCODER_DECODER))
def test_decoding_state_of_an_encoder_decoder_of_every_cross_kind(kind):
    extra = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
             "--decoder-ffn-embed-dim", "40", "--encoder-layers", "1", "--decoder-layers", "2", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "2", "--cross-attention-kinds", kind, "--decoder-attention-kinds", f"{kind},softmax",
             "--dropout", "0"]
    measured, expected = _decoded_state_bytes("mixed_transformer_iwslt_de_en", extra, 29, 9, 5, False)
    assert measured == expected


@pytest.mark.parametrize("connect", ["2", "1,2"])
@pytest.mark.parametrize("kind", COPY_KINDS)
def test_decoding_state_of_an_encoder_decoder_connect(kind, connect):
    """--encoder-decoder-connect k: the encoder-decoder attention's state over k*S keys (cosFormer: its
    running sums and the k*S keys it keeps for attention weights)."""
    extra = connected(kind, connect)
    extra[extra.index("--cross-attention-kinds") + 1] = kind
    measured, expected = _decoded_state_bytes("mixed_transformer_iwslt_de_en", extra, 29, 9, 5, False)
    assert measured == expected


def test_architecture_cost_of_a_json_architecture():
    """The search's use: an Architecture value alone (default layout: sinusoidal positions, no final norms)."""
    from fairseq_plugins.models.architecture import Architecture

    architecture = Architecture.from_dict({"decoder_embed_dim": 16, "decoder_layers": [
        {"attention_kind": "softmax", "attention_heads": 2, "ffn_embed_dim": 24}]})
    cost = complexity.architecture_cost(architecture, target_length=3)
    softmax = complexity.kind_cost("softmax")
    options = AttentionOptions()
    assert cost.parameters == softmax.parameters(DECODER_SELF, 16, 2, 16, options) + 2 * 16 + complexity.ffn_parameters(16, 24) + 2 * 16
    assert cost.flops == softmax.forward_flops(DECODER_SELF, 16, 2, 3, 3, 16, options) + 2 * 2 * 3 * 16 * 24
    assert cost.parameters_per_entry == 2 * 16 and cost.flops_per_entry == 2 * 3 * 16
    assert cost.total_backward_flops(10) == BACKWARD_FLOPS_PER_FORWARD_FLOP * cost.total_flops(10)


@pytest.mark.parametrize("kind", ["softmax", "bet", "extractor_she"])
def test_backward_is_twice_the_forward_where_every_product_is_autograds(kind):
    """BACKWARD_FLOPS_PER_FORWARD_FLOP, on FlopCounterMode's counts of an LM whose products all go through
    autograd (cosFormer's causal form has a hand-written backward, counted product by product in
    benchmarks/attention_speed.py; the other Extractors' depthwise convolutions are counted differently
    by FlopCounterMode in the backward)."""
    args = model_costs.preset_args("mixed_transformer_lm_tiny", small_lm(kind))
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY["mixed_transformer_lm_tiny"].build_model(args, _task(31)).train()
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            out = model(torch.randint(4, 31, (1, 6)))[0]
        with FlopCounterMode(display=False) as backward:
            out.sum().backward()
    assert backward.get_total_flops() == BACKWARD_FLOPS_PER_FORWARD_FLOP * forward.get_total_flops()


def test_attention_options_survive_pickle_and_deepcopy():
    """Options go to worker processes (pickle) and into copied structures (deepcopy)."""
    import copy
    import pickle

    from fairseq_plugins.modules.costs import AttentionOptions, registered_option_defaults

    name = sorted(registered_option_defaults())[0]
    options = AttentionOptions(**{name: registered_option_defaults()[name]})
    for restored in (pickle.loads(pickle.dumps(options)), copy.deepcopy(options)):
        assert restored == options and restored.as_dict() == options.as_dict()
