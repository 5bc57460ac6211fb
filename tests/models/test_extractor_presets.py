"""Extractor presets built the way fairseq-train builds them; the options'
errors at build time; decoding through fairseq's decoder past the window."""
import os

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.modules import AttentionConfigError
from fairseq_plugins.modules.extractors import Extractor

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))
KINDS = ["she", "he", "we", "me"]


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.txt", "dict.src.txt", "dict.tgt.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(20)))
    return str(path)


def parse(dicts, arch, *extra, lm=True):
    task = ["--task", "language_modeling"] if lm else ["--task", "translation", "-s", "src", "-t", "tgt"]
    return options.parse_args_and_arch(
        options.get_training_parser(), input_args=[dicts, "--arch", arch, "--user-dir", PLUGIN_DIR, *task, *extra]
    )


def build(dicts, arch, *extra, lm=True):
    args = parse(dicts, arch, *extra, lm=lm)
    torch.manual_seed(0)
    return args, tasks.setup_task(args).build_model(args)


@pytest.mark.parametrize("kind", KINDS)
def test_lm_presets_in_the_papers_setting(dicts, kind):
    args, model = build(dicts, f"extractor_{kind}_lm", "--tokens-per-sample", "128")
    layers = model.decoder.layers
    assert len(layers) == 4 and all(isinstance(l.self_attn, Extractor) for l in layers)
    assert {l.self_attn.kind_name for l in layers} == {f"extractor_{kind}"}
    assert {l.self_attn.lags for l in layers} == {128}
    assert all(l.self_attn.output_projection == (kind != "me") for l in layers)
    assert (args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.activation_fn) == (128, 512, "relu")
    assert args.decoder_learned_pos and args.decoder_normalize_before
    assert model.decoder.buffered_future_mask(torch.zeros(5, 1, 128)) is None


@pytest.mark.parametrize("arch,heads", [("softmax_1head_lm", 1), ("softmax_32head_lm", 32)])
def test_softmax_baselines(dicts, arch, heads):
    args, model = build(dicts, arch, "--tokens-per-sample", "128")
    assert [l.self_attn.kind_name for l in model.decoder.layers] == ["softmax"] * 4
    assert [l.self_attn.num_heads for l in model.decoder.layers] == [heads] * 4
    assert args.decoder_embed_dim == 128


def test_lm_lags_follow_fewer_positions_and_options_override(dicts):
    _, model = build(dicts, "extractor_we_lm", "--tokens-per-sample", "32")
    assert model.decoder.layers[0].self_attn.lags == 32
    _, model = build(
        dicts, "extractor_she_lm", "--tokens-per-sample", "64", "--extractor-lags", "5", "--decoder-layers", "2",
        "--extractor-no-output-projection", "--extractor-conv-impl", "fft", "--decoder-attention-kinds", "extractor_she,softmax",
    )
    first, second = (l.self_attn for l in model.decoder.layers)
    assert (first.lags, first.output_projection, first.conv_impl, second.kind_name) == (5, False, "fft", "softmax")


@pytest.mark.parametrize("kind", KINDS)
def test_translation_presets_replace_decoder_self_attention(dicts, kind):
    args, model = build(dicts, f"extractor_{kind}_iwslt_de_en", "--decoder-embed-dim", "32", "--encoder-embed-dim", "32", lm=False)
    assert all(l.self_attn.kind_name == f"extractor_{kind}" and l.self_attn.lags == 128 for l in model.decoder.layers)
    assert all(l.encoder_attn.kind_name == "softmax" for l in model.decoder.layers)
    assert all(l.self_attn.kind_name == "softmax" for l in model.encoder.layers)
    args = parse(dicts, f"extractor_{kind}_iwslt_de_en", "--max-target-positions", "50", lm=False)
    assert args.extractor_lags == 50


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--extractor-lags", "200"], "--extractor-lags 200 is larger than the 128 target positions"),
        (["--extractor-lags", "0"], "--extractor-lags must be >= 1"),
        (["--extractor-conv-impl", "winograd"], "--extractor-conv-impl"),
    ],
)
def test_bad_options_fail_when_the_model_is_built(dicts, extra, message):
    with pytest.raises(AttentionConfigError, match=message):
        build(dicts, "extractor_he_lm", "--tokens-per-sample", "128", "--decoder-layers", "1", *extra)


@pytest.mark.parametrize("kind", KINDS)
def test_fairseq_decoder_steps_equal_the_full_pass_beyond_the_window(dicts, kind):
    _, model = build(
        dicts, f"extractor_{kind}_lm", "--tokens-per-sample", "16", "--extractor-lags", "3", "--decoder-layers", "2",
        "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
    )
    model = model.double().eval()
    tokens = torch.randint(4, 24, (2, 12), generator=torch.Generator().manual_seed(0))
    full, _ = model(tokens)
    state = {}
    steps = [model.decoder(tokens[:, : t + 1], incremental_state=state)[0] for t in range(tokens.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-9, rtol=0)
