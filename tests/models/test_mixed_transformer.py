"""Mixed models built the fairseq way: per-layer layouts, presets, errors,
and checkpoints saved and loaded through fairseq for every attention kind."""
import os

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

import fairseq_plugins  # noqa: F401
from fairseq_plugins.modules import (
    ATTENTION_REGISTRY,
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    AttentionConfigError,
    BaseAttention,
    register_attention,
)
from fairseq_plugins.modules.cosformer import CosformerAttention
from fairseq_plugins.modules.softmax import SoftmaxAttention

TINY = [
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
    "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--dropout", "0.0",
]
WORDS = [f"w{i}" for i in range(20)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        with open(path / name, "w") as f:
            f.writelines(f"{w} 10\n" for w in WORDS)
    return str(path)


def build(data_dir, arch, *extra, task="translation"):
    parser = options.get_training_parser()
    argv = [data_dir, "--task", task, "--arch", arch, "--user-dir", os.path.dirname(fairseq_plugins.__file__)]
    sizes = TINY
    if task == "translation":
        argv += ["-s", "src", "-t", "tgt"]
    else:  # decoder-only: drop the encoder sizes
        sizes = [a for i, a in enumerate(TINY) if "encoder" not in a and (i == 0 or "encoder" not in TINY[i - 1])]
    args = options.parse_args_and_arch(parser, input_args=argv + sizes + list(extra))
    task_obj = tasks.setup_task(args)
    torch.manual_seed(0)
    return args, task_obj, task_obj.build_model(args)


def batch(bsz=3, src_len=7, tgt_len=6, vocab_offset=4):
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(vocab_offset, vocab_offset + len(WORDS), (bsz, src_len), generator=gen)
    src[1, :2] = 1  # left padding (pad index 1)
    prev = torch.randint(vocab_offset, vocab_offset + len(WORDS), (bsz, tgt_len), generator=gen)
    prev[:, 0] = 2
    prev[2, -2:] = 1  # right padding
    lengths = (src != 1).sum(1)
    return src, lengths, prev


def test_per_layer_kinds_heads_and_ffn(data_dir):
    _, _, model = build(
        data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "3", "--decoder-layers", "2",
        "--encoder-attention-kinds", "softmax,cosformer,softmax", "--encoder-layer-attention-heads", "2,4,8",
        "--encoder-layer-ffn-embed-dims", "16,32,48", "--decoder-attention-kinds", "cosformer",
        "--cross-attention-kinds", "softmax,cosformer", "--cross-attention-heads", "1,2", "--decoder-layer-ffn-embed-dims", "40",
    )
    enc, dec = model.encoder.layers, model.decoder.layers
    assert [type(l.self_attn) for l in enc] == [SoftmaxAttention, CosformerAttention, SoftmaxAttention]
    assert [l.self_attn.num_heads for l in enc] == [2, 4, 8]
    assert [l.fc1.out_features for l in enc] == [16, 32, 48]
    assert all(isinstance(l.self_attn, CosformerAttention) and l.self_attn.causal for l in dec)
    assert [type(l.encoder_attn) for l in dec] == [SoftmaxAttention, CosformerAttention]
    assert [l.encoder_attn.num_heads for l in dec] == [1, 2]
    assert [l.fc1.out_features for l in dec] == [40, 40]
    assert [l.self_attn.num_heads for l in dec] == [4, 4]


def test_presets(data_dir):
    _, _, model = build(data_dir, "mformer_iwslt_de_en")
    kinds = [l.self_attn.kind_name for l in model.encoder.layers]
    assert kinds == ["softmax", "cosformer", "softmax", "cosformer", "softmax", "softmax"]
    _, _, model = build(data_dir, "cosformer_iwslt_de_en", "--encoder-layers", "2", "--decoder-layers", "2")
    for layer in model.decoder.layers:
        assert layer.self_attn.kind_name == "cosformer" and layer.encoder_attn.kind_name == "cosformer"
    assert all(l.self_attn.kind_name == "cosformer" for l in model.encoder.layers)
    # mformer_wmt_en_de: 6 encoder layers with cosFormer in 2 and 4, 2 decoder layers, 4 cross heads
    args, _, model = build(data_dir, "mformer_wmt_en_de", "--encoder-attention-heads", "16", "--decoder-attention-heads", "16")
    assert len(model.encoder.layers) == 6 and len(model.decoder.layers) == 2
    assert [l.self_attn.kind_name for l in model.encoder.layers][1::2] == ["cosformer", "cosformer", "softmax"]
    assert [l.encoder_attn.num_heads for l in model.decoder.layers] == [4, 4]
    assert [l.self_attn.num_heads for l in model.decoder.layers] == [16, 16]
    assert model.decoder.layers[0].fc1.out_features == 64  # TINY overrides the 3584 default
    # full-size defaults of the preset (no overrides) without building the model
    parser = options.get_training_parser()
    full = options.parse_args_and_arch(parser, input_args=[data_dir, "--arch", "mformer_wmt_en_de", "--user-dir", os.path.dirname(fairseq_plugins.__file__)])
    from fairseq_plugins.models.mixed_transformer import mformer_wmt_en_de

    mformer_wmt_en_de(full)
    assert (full.encoder_embed_dim, full.encoder_ffn_embed_dim, full.decoder_ffn_embed_dim, full.decoder_attention_heads) == (1024, 3072, 3584, 16)
    assert (full.encoder_layers, full.decoder_layers, full.cross_attention_heads) == (6, 2, "4")


@pytest.mark.parametrize("layers,expected", [
    ("4", "softmax,cosformer,softmax,cosformer"),  # cut after the 4th layer
    ("8", "softmax,cosformer,softmax,cosformer,softmax,softmax,softmax,cosformer"),  # repeats from layer 1
    ("1", "softmax"),
])
def test_mformer_preset_pattern_follows_encoder_layers(data_dir, layers, expected):
    for arch in ("mformer_iwslt_de_en", "mformer_wmt_en_de"):
        args, _, model = build(data_dir, arch, "--encoder-layers", layers, "--decoder-layers", "1",
                               "--encoder-attention-heads", "4", "--decoder-attention-heads", "4")
        assert ",".join(l.self_attn.kind_name for l in model.encoder.layers) == expected
        assert args.encoder_attention_kinds == expected  # the options (so the checkpoint) describe the model


def test_lm_preset_pattern_follows_decoder_layers(data_dir):
    _, _, model = build(data_dir, "mformer_lm_tiny", "--decoder-layers", "3", "--tokens-per-sample", "16", task="language_modeling")
    assert [l.self_attn.kind_name for l in model.decoder.layers] == ["cosformer", "softmax", "cosformer"]


def test_per_layer_list_of_wrong_length_names_option_and_value_to_give(data_dir):
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "4", "--decoder-layers", "1",
              "--encoder-attention-kinds", "softmax,cosformer,softmax,cosformer,softmax,softmax")
    assert str(error.value) == (
        "--encoder-attention-kinds has 6 values (softmax,cosformer,softmax,cosformer,softmax,softmax) but the model "
        "has 4 layers (--encoder-layers 4): give one value per layer or a single value for all, e.g. "
        "--encoder-attention-kinds softmax,cosformer,softmax,cosformer (the values repeated or cut to 4 layers)")
    with pytest.raises(AttentionConfigError, match=r"\(--decoder-layers 2\).* e\.g\. --cross-attention-heads 4,2 "):
        build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "1", "--decoder-layers", "2",
              "--cross-attention-heads", "4,2,1")


def test_decoder_skips_dense_future_mask_for_linear_kinds(data_dir):
    _, _, linear = build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "1", "--decoder-layers", "2", "--decoder-attention-kinds", "cosformer")
    assert linear.decoder.buffered_future_mask(torch.zeros(5, 1, 32)) is None
    _, _, mixed = build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "1", "--decoder-layers", "2", "--decoder-attention-kinds", "cosformer,softmax")
    assert mixed.decoder.buffered_future_mask(torch.zeros(5, 1, 32)).shape == (5, 5)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--encoder-attention-kinds", "nosuchkind"], "unknown attention kind 'nosuchkind'"),
        (["--encoder-layers", "2", "--encoder-attention-kinds", "softmax,cosformer,softmax"], "has 3 values"),
        (["--decoder-layer-attention-heads", "3"], "not divisible by 3 heads"),
        (["--encoder-layer-ffn-embed-dims", "a,b"], "--encoder-layer-ffn-embed-dims"),
        (["--cross-attention-heads", "0"], "--cross-attention-heads"),
    ],
)
def test_bad_layouts_fail_at_build_with_clear_errors(data_dir, extra, message):
    with pytest.raises(AttentionConfigError, match=message):
        build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "2", "--decoder-layers", "1", *extra)


def test_unknown_kind_error_lists_valid_choices(data_dir):
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, "mixed_transformer_iwslt_de_en", "--decoder-attention-kinds", "cosformr")
    for kind in ATTENTION_REGISTRY:
        assert kind in str(error.value)


@pytest.fixture
def causal_only_kind():
    """A kind that supports only decoder self-attention, registered for one test."""

    def naive(module, query, key, value, key_padding_mask=None):
        return query

    @register_attention("test_causal_only", placements=[DECODER_SELF], naive_reference=naive, description="test")
    class CausalOnly(BaseAttention):
        def forward(self, query, key, value, **kwargs):
            return query, None

    yield "test_causal_only"
    del ATTENTION_REGISTRY["test_causal_only"]


def test_kind_in_unsupported_placement_fails(data_dir, causal_only_kind):
    with pytest.raises(AttentionConfigError, match="cannot be used for encoder_self.*valid for encoder_self: .*softmax"):
        build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-attention-kinds", causal_only_kind)
    with pytest.raises(AttentionConfigError, match="cannot be used for encoder_decoder"):
        build(data_dir, "mixed_transformer_iwslt_de_en", "--cross-attention-kinds", causal_only_kind)


def test_cross_self_attention_needs_softmax(data_dir):
    with pytest.raises(AttentionConfigError, match="--cross-self-attention"):
        build(data_dir, "mixed_transformer_iwslt_de_en", "--decoder-attention-kinds", "cosformer", "--cross-self-attention")


def test_sequence_longer_than_cosformer_horizon_fails_clearly(data_dir):
    # A model built for 4 positions (a smaller horizon than the model's positions fails when it is built:
    # tests/models/test_option_checks.py) given longer sequences.
    _, _, model = build(data_dir, "cosformer_iwslt_de_en", "--encoder-layers", "1", "--decoder-layers", "1", "--cosformer-max-positions", "4",
                        "--max-source-positions", "4", "--max-target-positions", "4")
    src, lengths, prev = batch()
    with pytest.raises(ValueError, match="--cosformer-max-positions"):
        model(src, lengths, prev)


def save_fairseq_checkpoint(args, model, path):
    """What fairseq's trainer writes: the config as a container, the weights."""
    cfg = convert_namespace_to_omegaconf(args)
    state = {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "model": model.state_dict(),
             "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                                   "lr_scheduler_state": {"best": None}, "num_updates": 0}],
             "extra_state": {}, "last_optimizer_state": None}
    checkpoint_utils.torch_persistent_save(state, path)


def kind_everywhere(kind):
    placements = ATTENTION_REGISTRY[kind].placements
    return [
        "--encoder-attention-kinds", kind if ENCODER_SELF in placements else "softmax",
        "--decoder-attention-kinds", kind if DECODER_SELF in placements else "softmax",
        "--cross-attention-kinds", kind if ENCODER_DECODER in placements else "softmax",
    ]


@pytest.mark.parametrize("kind", sorted(ATTENTION_REGISTRY))
def test_checkpoint_roundtrip_gives_identical_outputs(data_dir, tmp_path, kind):
    args, _, model = build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "2", "--decoder-layers", "2", *kind_everywhere(kind))
    model.eval()
    path = str(tmp_path / "checkpoint.pt")
    save_fairseq_checkpoint(args, model, path)
    # Loading goes through torch.load(weights_only=True), the torch >= 2.6 default.
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_dir})
    loaded = models[0].eval()
    src, lengths, prev = batch()
    with torch.no_grad():
        expected, _ = model(src, lengths, prev)
        actual, _ = loaded(src, lengths, prev)
    assert torch.equal(expected, actual)


def test_checkpoint_with_unregistered_kind_fails_clearly(data_dir, tmp_path, causal_only_kind):
    args, _, model = build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-layers", "1", "--decoder-layers", "1", "--decoder-attention-kinds", causal_only_kind)
    path = str(tmp_path / "checkpoint.pt")
    save_fairseq_checkpoint(args, model, path)
    del ATTENTION_REGISTRY[causal_only_kind]  # e.g. trained with a plugin version that had it
    try:
        with pytest.raises(AttentionConfigError, match=f"unknown attention kind '{causal_only_kind}'.*registered kinds: .*cosformer"):
            checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_dir})
    finally:
        ATTENTION_REGISTRY[causal_only_kind] = None  # the fixture deletes it again


def test_language_model_layout(data_dir):
    _, _, model = build(
        data_dir, "mformer_lm_tiny", "--decoder-layer-attention-heads", "2,4,4,8", "--tokens-per-sample", "16", task="language_modeling"
    )
    layers = model.decoder.layers
    assert [l.self_attn.kind_name for l in layers] == ["cosformer", "softmax", "cosformer", "softmax"]
    assert [l.self_attn.num_heads for l in layers] == [2, 4, 4, 8]
    assert layers[0].self_attn.horizon == 16  # default horizon: --tokens-per-sample
    tokens = torch.randint(4, 20, (2, 10))
    out, _ = model(tokens)
    assert out.shape == (2, 10, len(model.decoder.dictionary))


def test_plain_lm_architecture_builds_from_fairseq_train_structured_config(data_dir):
    """fairseq-train builds dataclass models from a struct DictConfig, which has
    no encoder/cross-attention keys for a language model."""
    args, task, _ = build(data_dir, "mixed_transformer_lm", "--tokens-per-sample", "16", "--decoder-layers", "2", task="language_modeling")
    cfg = convert_namespace_to_omegaconf(args)
    assert OmegaConf.is_struct(cfg.model)
    model = task.build_model(cfg.model)
    assert [l.self_attn.kind_name for l in model.decoder.layers] == ["softmax", "softmax"]


# ------------------------------------------------ generation options (prepare_for_inference_) ---
def generation_config(data_dir, *extra):
    """The configuration fairseq-generate hands every model's prepare_for_inference_."""
    args = options.parse_args_and_arch(options.get_generation_parser(), input_args=[data_dir, "-s", "src", "-t", "tgt", *extra])
    return convert_namespace_to_omegaconf(args)


MIXED_DECODER = ["--encoder-layers", "2", "--decoder-layers", "3", "--encoder-attention-kinds", "softmax,cosformer",
                 "--decoder-attention-kinds", "softmax,cosformer,extractor_he"]


@pytest.mark.parametrize("dropout, extra, message", [
    ("0.1", ["--retain-dropout", "--retain-dropout-modules", "TransformerDecoderLayerBase,MixedTransformerDecoderLayer"],
     "--retain-dropout-modules TransformerDecoderLayerBase: no module of the model of that class applies dropout; the "
     "model's modules that do: MixedTransformerDecoder, MixedTransformerDecoderLayer, MixedTransformerEncoder, "
     "MixedTransformerEncoderLayer (class names)"),
    ("0.0", ["--retain-dropout"],
     "--retain-dropout: the model applies no dropout (every dropout probability it was trained with is 0), so its "
     "outputs would be those without the option; give probabilities with --model-overrides, e.g. \"{'dropout': 0.1}\""),
], ids=["fairseq's layer name", "no dropout"])
def test_retain_dropout_that_would_change_nothing_is_refused(data_dir, dropout, extra, message):
    """fairseq ignores a module name that matches none (its own layers' names are not ours) and a model without
    dropout keeps none: refused before decoding."""
    _, _, model = build(data_dir, "mixed_transformer_iwslt_de_en", *MIXED_DECODER, "--dropout", dropout)
    with pytest.raises(AttentionConfigError) as error:
        model.prepare_for_inference_(generation_config(data_dir, *extra))
    assert str(error.value) == message


def test_retain_dropout_modules_keep_dropout_in_the_named_layers_only(data_dir):
    """The names the refusal lists work: the decoder layers (softmax, cosFormer, Extractor) keep their dropout
    when decoding, the encoder does not."""
    _, _, model = build(data_dir, "mixed_transformer_iwslt_de_en", *MIXED_DECODER, "--dropout", "0.3")
    model.eval()
    model.prepare_for_inference_(generation_config(data_dir, "--retain-dropout", "--retain-dropout-modules", "MixedTransformerDecoderLayer"))
    src, lengths, prev = batch()
    with torch.no_grad():
        encoded = [model.encoder(src, lengths)["encoder_out"][0] for _ in range(2)]
        decoded = [model(src, lengths, prev)[0] for _ in range(2)]
    assert torch.equal(*encoded) and not torch.equal(*decoded)


def test_language_model_with_checkpointed_activations_computes_the_same_gradients(data_dir):
    """--checkpoint-activations (and --offload-activations, which implies it) recompute every layer in the
    backward pass, dropout included (fairseq restores the random state): softmax, cosFormer and Extractor layers
    give the gradients of the plain model."""
    gradients = []
    for extra in ([], ["--checkpoint-activations"], ["--offload-activations"]):
        _, _, model = build(data_dir, "mixed_transformer_lm_tiny", "--tokens-per-sample", "16", "--decoder-layers", "3",
                            "--decoder-attention-kinds", "softmax,cosformer,extractor_we", "--dropout", "0.3",
                            "--attention-dropout", "0.3", "--activation-dropout", "0.3", *extra, task="language_modeling")
        assert all(hasattr(layer, "precheckpoint_forward") for layer in model.decoder.layers) == bool(extra)
        model.train()
        torch.manual_seed(1)
        tokens = torch.randint(4, 20, (2, 12))
        model(tokens)[0].float().logsumexp(-1).sum().backward()
        gradients.append({name: p.grad for name, p in model.named_parameters()})
    for other in gradients[1:]:
        assert other.keys() == gradients[0].keys()
        assert all(torch.allclose(other[name], gradients[0][name], atol=1e-6) for name in other)


def test_adaptive_softmax_language_model_checkpoint_loads(data_dir, tmp_path):
    """The presets share input and output embeddings, which an adaptive softmax ignores (it has its own): the
    option is built and saved off, and a checkpoint saved with it on (before this was done) loads too; fairseq's
    upgrade_state_dict added the shared output matrix the model does not have, and the checkpoint did not load."""
    args, _, model = build(data_dir, "mixed_transformer_lm_tiny", "--tokens-per-sample", "16", "--decoder-layers", "3",
                           "--decoder-attention-kinds", "softmax,cosformer,extractor_we", "--adaptive-softmax-cutoff", "8,16",
                           task="language_modeling")
    assert model.decoder.adaptive_softmax is not None and not args.share_decoder_input_output_embed
    args.share_decoder_input_output_embed = True  # as saved before
    path = str(tmp_path / "checkpoint.pt")
    save_fairseq_checkpoint(args, model.eval(), path)
    loaded = checkpoint_utils.load_model_ensemble([path], arg_overrides={"data": data_dir})[0][0].eval()
    tokens = torch.randint(4, 20, (2, 10))
    with torch.no_grad():
        assert torch.equal(model.get_normalized_probs(model(tokens), log_probs=True),
                           loaded.get_normalized_probs(loaded(tokens), log_probs=True))
