"""BET and diagonal-ablation presets, built the way fairseq-train builds them."""
import os

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.modules.bet import BetAttention
from fairseq_plugins.modules.softmax import SoftmaxAttention

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))
SMALL_LM = ["--decoder-layers", "2"]
SMALL_MT = ["--encoder-layers", "1", "--decoder-layers", "2"]


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.txt", "dict.src.txt", "dict.tgt.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(20)))
    return str(path)


def build(dicts, arch, *extra, lm):
    task = ["--task", "language_modeling", "--tokens-per-sample", "64"] if lm else ["--task", "translation", "-s", "src", "-t", "tgt"]
    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[dicts, "--arch", arch, "--user-dir", PLUGIN_DIR, *task, *extra]
    )
    torch.manual_seed(0)
    return args, tasks.setup_task(args).build_model(args)


@pytest.mark.parametrize("name,lm,sizes", [
    ("bet_sf_iwslt_de_en", False, (512, 4)),
    ("bet_sg_iwslt_de_en", False, (512, 4)),
    ("bet_sf_wmt_en_de", False, (512, 8)),
    ("bet_sg_wmt_en_de", False, (512, 8)),
    ("bet_sf_lm_wikitext", True, (300, 6)),
    ("bet_sf_lm_enwik8", True, (512, 8)),
])
@pytest.mark.parametrize("diag_free", [True, False], ids=["diag_free", "no_diag_free"])
def test_bet_presets(dicts, name, lm, sizes, diag_free):
    arch = name if diag_free else f"{name}_no_diag_free"
    args, model = build(dicts, arch, *(SMALL_LM if lm else SMALL_MT), lm=lm)
    attentions = [layer.self_attn for layer in model.decoder.layers]
    assert len(attentions) == 2 and all(isinstance(a, BetAttention) for a in attentions)
    assert all(a.hides_diagonal == diag_free for a in attentions)
    assert (args.decoder_embed_dim, args.decoder_attention_heads) == sizes
    if not lm:  # the encoder keeps softmax attention
        assert all(isinstance(layer.self_attn, SoftmaxAttention) for layer in model.encoder.layers)


def test_lm_baselines_have_the_bet_sizes_with_softmax(dicts):
    for arch, sizes in (("bet_baseline_lm_wikitext", (300, 6, 1200)), ("bet_baseline_lm_enwik8", (512, 8, 2048))):
        args, model = build(dicts, arch, *SMALL_LM, lm=True)
        assert (args.decoder_embed_dim, args.decoder_attention_heads, args.decoder_ffn_embed_dim) == sizes
        assert all(isinstance(layer.self_attn, SoftmaxAttention) for layer in model.decoder.layers)


@pytest.mark.parametrize("arch,diag_free,scale", [
    ("diag_free_iwslt_de_en", True, 1.0),
    ("reduced_diag_iwslt_de_en", False, 0.2),
    ("magnified_diag_iwslt_de_en", False, 2.0),
])
def test_diagonal_ablation_presets(dicts, arch, diag_free, scale):
    _, model = build(dicts, arch, *SMALL_MT, lm=False)
    for layer in model.decoder.layers:
        attn = layer.self_attn
        assert isinstance(attn, SoftmaxAttention) and attn.hides_diagonal == diag_free
        assert attn.diag_scale == scale
    # encoder and cross attention are untouched
    assert not any(layer.self_attn.hides_diagonal for layer in model.encoder.layers)


def test_preset_values_are_defaults_that_options_override(dicts):
    _, model = build(dicts, "reduced_diag_iwslt_de_en", *SMALL_MT, "--softmax-diag-scale", "0.5", lm=False)
    assert {layer.self_attn.diag_scale for layer in model.decoder.layers} == {0.5}
    _, model = build(dicts, "bet_sf_iwslt_de_en", *SMALL_MT, "--decoder-attention-kinds", "softmax,bet", lm=False)
    assert [type(layer.self_attn) for layer in model.decoder.layers] == [SoftmaxAttention, BetAttention]
