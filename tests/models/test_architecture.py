"""The architecture value: JSON round trip, every preset as a file, --architecture-file
conflicts, seeded initialisation through either route, and LayerDrop pruning
(*_layers_to_keep) of models whose layers differ in kind (issue 13 item 1,
issue 19 item 1)."""
import json
import os

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

import fairseq_plugins
from fairseq_plugins.models.architecture import (
    Architecture,
    DecoderLayer,
    EncoderLayer,
    architecture_of_checkpoint,
    model_architecture,
)
from fairseq_plugins.modules import AttentionConfigError

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES_DIR = os.path.join(os.path.dirname(HERE), "fixtures", "legacy_checkpoints")
PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
MODELS = ("mixed_transformer", "mixed_transformer_lm")
PRESETS = sorted(arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model in MODELS)
TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]

TRANSLATION = Architecture(
    encoder_embed_dim=16,
    encoder_layers=(EncoderLayer("softmax", 2, 32), EncoderLayer("cosformer", 4, 24)),
    decoder_embed_dim=16,
    decoder_layers=(DecoderLayer("bet", 2, 24, "cosformer", 4), DecoderLayer("softmax", 4, 16, "softmax", 2)),
)


def parse(data_dir, arch, *extra):
    lm = ARCH_MODEL_NAME_REGISTRY[arch] == "mixed_transformer_lm"
    argv = [data_dir, "--arch", arch, "--user-dir", PLUGIN_DIR,
            *(["--task", "language_modeling"] if lm else ["--task", "translation", "-s", "src", "-t", "tgt"]), *extra]
    return options.parse_args_and_arch(options.get_training_parser(), input_args=argv)


def build(data_dir, arch, *extra, device=None, seed=0):
    args = parse(data_dir, arch, *extra)
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    if device is None:
        return task.build_model(args)
    with torch.device(device):  # meta: shapes without memory or initialisation time
        return task.build_model(args)


def write(tmp_path, architecture, name="architecture.json"):
    path = tmp_path / name
    path.write_text(architecture.to_json(indent=2))
    return str(path)


# ------------------------------------------------------------------ value ---
def test_head_dimensions_round_trip_and_are_left_out_of_the_json_when_unset():
    own = Architecture(encoder_embed_dim=16, encoder_layers=(EncoderLayer("softmax", 3, 32, attention_head_dim=8),),
                       decoder_embed_dim=16, decoder_layers=(DecoderLayer("cosformer", 2, 24, "softmax", 5, cross_attention_head_dim=4),))
    again = Architecture.from_json(own.to_json())
    assert again == own and again.decoder_layers[0].attention_head_dim is None
    data = json.loads(own.to_json())
    assert data["encoder_layers"][0]["attention_head_dim"] == 8 and "attention_head_dim" not in data["decoder_layers"][0]
    assert "head_dim" not in TRANSLATION.to_json()  # an architecture without them writes the JSON it always wrote
    lm = Architecture(decoder_embed_dim=8, decoder_layers=(DecoderLayer("bet", 3, 16, attention_head_dim=4),))
    assert Architecture.from_json(lm.to_json()) == lm and "cross_attention_head_dim" not in lm.to_json()


@pytest.mark.parametrize("layer, message", [
    (DecoderLayer("extractor_we", 2, 16, "softmax", 2, attention_head_dim=4),
     "--decoder-layer-attention-head-dims (decoder layer 0): attention kind 'extractor_we' computes in the layer's width "
     "and takes no head dimension of its own (kinds that do: bet, cosformer, softmax"),
    (DecoderLayer("softmax", 2, 16, "softmax", 2, cross_attention_head_dim=0),
     "--cross-attention-head-dims (decoder layer 0): 0 is not a positive head dimension"),
])
def test_head_dimensions_are_checked_naming_the_option(layer, message):
    with pytest.raises(AttentionConfigError) as error:
        Architecture(16, (layer,), 16, (EncoderLayer("softmax", 2, 16),)).check()
    assert str(error.value).startswith(message)
    with pytest.raises(AttentionConfigError, match="--cross-attention-head-dims .decoder layer 0.: the layer has no encoder-decoder attention"):
        Architecture(16, (DecoderLayer("softmax", 2, 16, cross_attention_head_dim=4),)).check()


def test_json_round_trip_equality_and_hash():
    again = Architecture.from_json(TRANSLATION.to_json())
    assert again == TRANSLATION and hash(again) == hash(TRANSLATION) and again is not TRANSLATION
    lm = Architecture(decoder_embed_dim=8, decoder_layers=(DecoderLayer("cosformer", 2, 16),) * 2)
    assert Architecture.from_json(lm.to_json()) == lm
    assert "encoder_layers" not in json.loads(lm.to_json()) and "cross_attention_kind" not in lm.to_json()
    assert len({TRANSLATION, again, lm}) == 2


def test_keep_layers_follows_the_listed_layers_in_order():
    kept = TRANSLATION.keep_layers(encoder=[1], decoder=[1, 0])
    assert kept.encoder_layers == TRANSLATION.encoder_layers[1:]
    assert kept.decoder_layers == TRANSLATION.decoder_layers  # sorted, as fairseq's prune_state_dict renumbers
    with pytest.raises(AttentionConfigError, match="--encoder-layers-to-keep 2: give distinct indices of the 2 encoder layers"):
        TRANSLATION.keep_layers(encoder=[2])


@pytest.mark.parametrize("change, message", [
    ({"encoder_decoder_connect": 3}, "--encoder-decoder-connect (decoder layer 0): 3 encoder layers, but the encoder has 2; "
                                     "give 1 to 2 (the last k encoder layers)"),
    ({"attention_kind": "nosuchkind"}, "--decoder-attention-kinds (decoder layer 0): unknown attention kind 'nosuchkind'"),
    ({"cross_attention_heads": 3}, "--cross-attention-heads (decoder layer 0): embedding dimension 16 is not divisible by 3 heads"),
    ({"ffn_embed_dim": 0}, "decoder layer 0: ffn_embed_dim must be a positive integer, got 0"),
    ({"heads": 2}, "decoder layer 0: unknown keys ['heads']"),
])
def test_a_file_is_checked_as_the_options_are(tmp_path, change, message):
    data = TRANSLATION.to_dict()
    data["decoder_layers"][0].update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AttentionConfigError) as error:
        Architecture.from_file(str(path))
    assert str(error.value).startswith(f"--architecture-file {path}: {message}")


@pytest.mark.parametrize("change, message", [
    ({"encoder_layers": []}, "encoder_embed_dim is given but encoder_layers is empty"),
    ({"decoder_layers": []}, "decoder_layers is empty"),
])
def test_a_file_without_layers_is_refused_naming_the_key(tmp_path, change, message):
    data = {**TRANSLATION.to_dict(), **change}
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AttentionConfigError) as error:
        Architecture.from_file(str(path))
    assert str(error.value).startswith(f"--architecture-file {path}: {message}")


# ---------------------------------------------------- presets as files ---
@pytest.mark.parametrize("arch", PRESETS)
def test_every_preset_is_an_architecture_whose_file_builds_the_same_model(data_dir, tmp_path, arch):
    via_arch = build(data_dir, arch, device="meta")
    architecture = via_arch.architecture
    args = parse(data_dir, arch)  # resolving from the options alone gives the same value
    lm = ARCH_MODEL_NAME_REGISTRY[arch] == "mixed_transformer_lm"
    from fairseq_plugins.models.mixed_transformer import mixed_transformer_base
    from fairseq_plugins.models.mixed_transformer_lm import resolve_lm_sizes

    resolve_lm_sizes(args) if lm else mixed_transformer_base(args)
    assert model_architecture(args, decoder_only=lm) == architecture
    assert Architecture.from_json(architecture.to_json()) == architecture
    if arch == "mixed_transformer_lm":
        # fairseq registers this architecture itself (a dataclass model's no-op) and builds the model from a
        # copy of the options: nothing the file says could reach the checkpoint, so it is refused
        with pytest.raises(AttentionConfigError, match="--architecture-file needs an --arch preset of mixed_transformer_lm"):
            build(data_dir, arch, "--architecture-file", write(tmp_path, architecture), device="meta")
        return
    via_file = build(data_dir, arch, "--architecture-file", write(tmp_path, architecture), device="meta")
    assert via_file.architecture == architecture
    assert sum(p.numel() for p in via_file.parameters()) == sum(p.numel() for p in via_arch.parameters())
    assert [(name, tuple(p.shape)) for name, p in via_file.named_parameters()] == \
        [(name, tuple(p.shape)) for name, p in via_arch.named_parameters()]
    assert [type(m).__name__ for m in via_file.modules()] == [type(m).__name__ for m in via_arch.modules()]


def test_a_file_replaces_the_preset_layout(data_dir, tmp_path):
    model = build(data_dir, "mformer_iwslt_de_en", "--architecture-file", write(tmp_path, TRANSLATION), device="meta")
    assert model.architecture == TRANSLATION
    assert [layer.self_attn.kind_name for layer in model.encoder.layers] == ["softmax", "cosformer"]
    assert [layer.encoder_attn.num_heads for layer in model.decoder.layers] == [4, 2]
    assert [layer.fc1.out_features for layer in model.decoder.layers] == [24, 16]


@pytest.mark.parametrize("extra, flags", [
    (["--encoder-attention-kinds", "softmax"], "--encoder-attention-kinds"),
    (["--decoder-layers", "3", "--cross-attention-heads", "2"], "--decoder-layers, --cross-attention-heads"),
])
def test_per_layer_options_conflict_with_a_file(data_dir, tmp_path, extra, flags):
    path = write(tmp_path, TRANSLATION)
    with pytest.raises(AttentionConfigError) as error:
        parse(data_dir, "mixed_transformer_iwslt_de_en", "--architecture-file", path, *extra)
    assert str(error.value) == (
        f"--architecture-file {path} conflicts with {flags}: the file gives every layer's choices and the embedding "
        f"widths; leave out {flags} or the file")


def test_an_lm_file_for_a_translation_model_is_refused(data_dir, tmp_path):
    lm = Architecture(decoder_embed_dim=16, decoder_layers=(DecoderLayer("softmax", 2, 32),))
    with pytest.raises(AttentionConfigError, match="this model needs an encoder-decoder model"):
        parse(data_dir, "mixed_transformer_iwslt_de_en", "--architecture-file", write(tmp_path, lm))


@pytest.mark.parametrize("arch, file_options, architecture", [
    ("mixed_transformer_iwslt_de_en",
     ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-attention-kinds", "softmax,cosformer",
      "--encoder-layer-attention-heads", "2,4", "--encoder-layer-ffn-embed-dims", "32,24",
      "--decoder-attention-kinds", "bet,softmax", "--decoder-layer-attention-heads", "2,4",
      "--decoder-layer-ffn-embed-dims", "24,16", "--cross-attention-kinds", "cosformer,softmax", "--cross-attention-heads", "4,2"],
     TRANSLATION),
    ("mixed_transformer_lm_tiny",
     ["--decoder-layers", "3", "--decoder-attention-kinds", "extractor_she,cosformer,bet", "--decoder-layer-attention-heads", "2,4,2",
      "--decoder-layer-ffn-embed-dims", "32,16,24", "--tokens-per-sample", "8", "--extractor-lags", "4"],
     Architecture(decoder_embed_dim=16, decoder_layers=(DecoderLayer("extractor_she", 2, 32), DecoderLayer("cosformer", 4, 16),
                                                      DecoderLayer("bet", 2, 24)))),
    ("mixed_transformer_iwslt_de_en",  # heads of their own dimension ("auto": width / heads)
     ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-attention-kinds", "softmax,cosformer",
      "--encoder-layer-attention-heads", "3,4", "--encoder-layer-attention-head-dims", "8,auto", "--encoder-layer-ffn-embed-dims", "32",
      "--decoder-attention-kinds", "bet,softmax", "--decoder-layer-attention-heads", "2", "--decoder-layer-attention-head-dims", "12",
      "--decoder-layer-ffn-embed-dims", "24", "--cross-attention-kinds", "cosformer,softmax", "--cross-attention-heads", "4",
      "--cross-attention-head-dims", "auto,2"],
     Architecture(encoder_embed_dim=16, encoder_layers=(EncoderLayer("softmax", 3, 32, 8), EncoderLayer("cosformer", 4, 32, None)),
                  decoder_embed_dim=16, decoder_layers=(
                      DecoderLayer("bet", 2, 24, "cosformer", 4, attention_head_dim=12),
                      DecoderLayer("softmax", 2, 24, "softmax", 4, attention_head_dim=12, cross_attention_head_dim=2)))),
])
def test_seeded_models_from_options_and_from_a_file_are_identical(data_dir, tmp_path, arch, file_options, architecture):
    """Same seed, same parameters: the file route initialises as the option route (and as before the
    architecture value: checked once against ee582b8 for every legacy fixture's options)."""
    lm = "lm" in arch
    sizes = ["--decoder-embed-dim", "16"] if lm else TINY
    common = ["--tokens-per-sample", "8", "--extractor-lags", "4"] if lm else []
    from_options = build(data_dir, arch, *sizes, *file_options)
    from_file = build(data_dir, arch, *common, "--architecture-file", write(tmp_path, architecture))
    assert from_options.architecture == from_file.architecture == architecture
    expected = from_options.state_dict()
    got = from_file.state_dict()
    assert list(got) == list(expected)
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


# --------------------------------------------------- LayerDrop pruning ---
def _load(folder, overrides=None):
    """A legacy fixture's model loaded as fairseq-generate loads it (``--model-overrides``: ``overrides``)."""
    path = os.path.join(folder, "checkpoint.pt")
    task_cfg = checkpoint_utils.load_checkpoint_to_cpu(path)["cfg"].task
    task_cfg.data = folder
    if "source_lang" in task_cfg and task_cfg.source_lang is None:
        task_cfg.source_lang, task_cfg.target_lang = "src", "tgt"
    task = tasks.setup_task(task_cfg)
    models, _ = checkpoint_utils.load_model_ensemble([path], arg_overrides={"data": folder, **(overrides or {})}, task=task)
    return models[0].eval(), task


def _skip_layers(model, encoder=None, decoder=None):
    """The unpruned model with the other layers skipped."""
    if encoder is not None:
        model.encoder.layers = torch.nn.ModuleList([model.encoder.layers[i] for i in encoder])
    if decoder is not None:
        model.decoder.layers = torch.nn.ModuleList([model.decoder.layers[i] for i in decoder])
    return model


@pytest.mark.parametrize("name, encoder, decoder", [
    ("translation_mixed", [1], [0, 2]),  # encoder softmax,cosformer; decoder softmax,cosformer,bet
    ("translation_mixed", [0, 1], [2]),  # (fairseq's prune_state_dict drops the layers of a side given no list)
    ("lm_all_kinds", None, [1, 3, 6]),   # every decoder-self kind, per-layer heads
])
def test_a_pruned_model_computes_as_the_unpruned_one_without_the_dropped_layers(name, encoder, decoder):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_legacy_checkpoints", os.path.join(FIXTURES_DIR, "make_legacy_checkpoints.py"))
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    folder = os.path.join(FIXTURES_DIR, name)
    net_input = torch.load(os.path.join(folder, "expected.pt"))["net_input"]
    overrides = {}
    if encoder is not None:
        overrides["encoder_layers_to_keep"] = ",".join(map(str, encoder))
    overrides["decoder_layers_to_keep"] = ",".join(map(str, decoder))
    pruned, task = _load(folder, overrides)
    full, _ = _load(folder)
    assert pruned.architecture == full.architecture.keep_layers(encoder=encoder, decoder=decoder)
    assert [layer.self_attn.kind_name for layer in pruned.decoder.layers] == \
        [full.decoder.layers[i].self_attn.kind_name for i in decoder]
    expected = make.compute_outputs(_skip_layers(full, encoder, decoder), task, net_input)
    got = make.compute_outputs(pruned, task, net_input)
    assert sorted(got) == sorted(expected)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0)


def test_layerdrop_training_pruned_by_fairseq_generate_and_read_back(tmp_path):
    """The issue's run: train with LayerDrop and different kinds per layer, then prune at inference with
    fairseq-generate --model-overrides (beam search); the checkpoint's architecture reads back as JSON."""
    from fairseq_plugins.cli.pipeline import fairseq_command, run
    from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

    data_bin = binarize_translation(write_translation_task(str(tmp_path / "raw"), splits={"train": 60, "valid": 4, "test": 4}),
                                    str(tmp_path / "bin"))
    save = tmp_path / "save"
    run(fairseq_command("train") + [
        data_bin, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer_iwslt_de_en", "--cpu", "--seed", "1",
        "--max-update", "4", "--save-dir", str(save), "--no-epoch-checkpoints", "--no-save-optimizer-state",
        "--disable-validation", "--no-progress-bar", "--num-workers", "0", *TINY,
        "--encoder-layers", "2", "--encoder-attention-kinds", "softmax,cosformer", "--decoder-layers", "2",
        "--decoder-attention-kinds", "cosformer,softmax", "--cross-attention-kinds", "softmax,cosformer",
        "--encoder-layerdrop", "0.5", "--decoder-layerdrop", "0.5",
        "--optimizer", "adam", "--lr", "1e-3", "--criterion", "cross_entropy", "--max-tokens", "200",
    ], env={"OMP_NUM_THREADS": "1"})
    checkpoint = str(save / "checkpoint_last.pt")
    full = architecture_of_checkpoint(checkpoint)
    assert [layer.attention_kind for layer in full.encoder_layers] == ["softmax", "cosformer"]
    assert [(layer.attention_kind, layer.cross_attention_kind) for layer in full.decoder_layers] == \
        [("cosformer", "softmax"), ("softmax", "cosformer")]
    saved = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"]["model"]
    assert Architecture.from_json(saved.architecture) == full  # stored readably, as JSON

    def hypotheses(overrides):
        log = run(fairseq_command("generate") + [
            data_bin, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--beam", "2", "--cpu", "--batch-size", "4",
            "--num-workers", "0", "--required-batch-size-multiple", "1", "--max-len-b", "6", "--model-overrides", overrides], env={"OMP_NUM_THREADS": "1"})
        return sorted(line for line in log.splitlines() if line.startswith(("H-", "P-")))

    pruned = hypotheses("{'encoder_layers_to_keep': '1', 'decoder_layers_to_keep': '0'}")
    # the same beam search, in process, on the unpruned model with the dropped layers skipped
    from argparse import Namespace

    task_args = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"].task
    task_args.data = data_bin
    task = tasks.setup_task(task_args)
    (model,), _ = checkpoint_utils.load_model_ensemble([checkpoint], task=task)
    model = _skip_layers(model.eval(), encoder=[1], decoder=[0])
    task.load_dataset("test")
    dataset = task.dataset("test")
    generator = task.build_generator([model], Namespace(beam=2, max_len_b=6))
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    with torch.no_grad():
        hypos = task.inference_step(generator, [model], sample)
    assert len([line for line in pruned if line.startswith("H-")]) == len(dataset)
    got = {line.split("\t")[0]: line.split("\t")[2] for line in pruned if line.startswith("H-")}
    assert got == {f"H-{i}": task.target_dictionary.string(beams[0]["tokens"].int().cpu(), None)
                   for i, beams in zip(sample["id"].tolist(), hypos)}


def test_head_dimensions_with_fairseq_options_that_assume_the_layer_width(data_dir):
    """--scale-heads slices the layer's width per head, quantisation noise needs whole blocks of the attention width:
    both refused naming the option; an 'auto' head dimension is no head dimension at all."""
    with pytest.raises(AttentionConfigError, match=r"--scale-heads: fairseq scales the self-attention output of a decoder "
                                                   r"layer as 4 slices of its width 16, but decoder layer 0 has 4 heads of 6"):
        build(data_dir, "mixed_transformer_lm_tiny", "--decoder-embed-dim", "16", "--decoder-attention-heads", "4",
              "--decoder-layer-attention-head-dims", "6", "--scale-heads", "--tokens-per-sample", "8", device="meta")
    build(data_dir, "mixed_transformer_lm_tiny", "--decoder-embed-dim", "16", "--decoder-attention-heads", "4",
          "--decoder-layer-attention-head-dims", "4", "--scale-heads", "--tokens-per-sample", "8", device="meta")  # 4 x 4 = 16
    with pytest.raises(AttentionConfigError, match=r"--quant-noise-pq-block-size 8: .* attends in 3 heads x 5 = 15 dimensions"):
        build(data_dir, "mixed_transformer_iwslt_de_en", *TINY, "--encoder-layer-attention-heads", "3",
              "--encoder-layer-attention-head-dims", "5", "--quant-noise-pq", "0.1", device="meta")
    model = build(data_dir, "mixed_transformer_iwslt_de_en", *TINY, "--no-cross-attention", "--cross-attention-head-dims", "auto",
                  device="meta")
    assert not model.architecture.has_cross_attention
    with pytest.raises(AttentionConfigError, match="--cross-attention-head-dims: this model has no encoder-decoder attention"):
        build(data_dir, "mixed_transformer_iwslt_de_en", *TINY, "--no-cross-attention", "--cross-attention-head-dims", "4",
              device="meta")


def test_the_architecture_is_resolved_once_and_passed_to_the_encoder_and_decoder(data_dir, tmp_path, monkeypatch):
    """build_model resolves the architecture from the options once; fairseq's build_encoder/build_decoder hooks
    get that value (not a JSON copy in the options parsed again), and refuse to run outside a build."""
    from fairseq_plugins.models import mixed_transformer

    resolved, parsed = [], []
    real_from_args, real_from_json = Architecture.from_args.__func__, Architecture.from_json.__func__
    monkeypatch.setattr(Architecture, "from_args", classmethod(lambda cls, *a, **k: resolved.append(1) or real_from_args(cls, *a, **k)))
    monkeypatch.setattr(Architecture, "from_json", classmethod(lambda cls, *a, **k: parsed.append(1) or real_from_json(cls, *a, **k)))
    model = build(data_dir, "mixed_transformer", "--architecture-file", write(tmp_path, TRANSLATION))
    assert model.architecture == TRANSLATION and model.encoder.architecture is model.decoder.architecture
    assert len(resolved) == 1 and len(parsed) == 1  # the file's JSON; no JSON of the options
    with pytest.raises(AttentionConfigError, match="build_encoder: called outside MixedTransformerModel.build_model"):
        mixed_transformer.MixedTransformerModel.build_encoder(parse(data_dir, "mixed_transformer"), None, None)
