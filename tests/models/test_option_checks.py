"""Options checked when the model is built, not hours into training:
``--cosformer-max-positions`` below the positions the model is built for is an
error naming both options, and a kind option that no layer of the model uses,
set to a value other than its default, is a warning naming it."""
import logging
import os

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.modules import AttentionConfigError

TINY = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
        "--encoder-layers", "2", "--decoder-layers", "2"]
TINY_LM = ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4",
           "--decoder-layers", "2"]
LAYOUT_LOGGER = "fairseq_plugins.models.layout"


def build(data_dir, arch, *extra):
    """The model fairseq-train would build for these options (a language model for *_lm* presets)."""
    lm = "_lm" in arch
    argv = [data_dir, "--arch", arch, "--user-dir", os.path.dirname(fairseq_plugins.__file__),
            *(["--task", "language_modeling", *TINY_LM] if lm else ["--task", "translation", "-s", "src", "-t", "tgt", *TINY]),
            *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    torch.manual_seed(0)
    return tasks.setup_task(args).build_model(args)


def unused_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LAYOUT_LOGGER and r.levelno == logging.WARNING]


# ------------------------------------------------------ cosFormer horizon ---
@pytest.mark.parametrize("arch, extra, message", [
    ("cosformer_iwslt_de_en", ["--cosformer-max-positions", "64"],
     "--cosformer-max-positions 64 is smaller than --max-target-positions 1024, the positions the model is built for: "
     "cosformer decoder self-attention (decoder layer 0) would fail at the first longer sequence; raise "
     "--cosformer-max-positions to at least 1024 or lower --max-target-positions (a checkpoint trained before this "
     "check loads with --model-overrides \"{'max_target_positions': 64}\")"),
    ("mixed_transformer_iwslt_de_en", ["--cross-attention-kinds", "softmax,cosformer", "--max-source-positions", "300",
                                       "--max-target-positions", "200", "--cosformer-max-positions", "250"],
     "--cosformer-max-positions 250 is smaller than --max-source-positions 300, the positions the model is built for: "
     "cosformer encoder-decoder attention (decoder layer 1) would fail at the first longer sequence; raise "
     "--cosformer-max-positions to at least 300 or lower --max-source-positions (a checkpoint trained before this "
     "check loads with --model-overrides \"{'max_source_positions': 250}\")"),
    ("cosformer_lm_tiny", ["--tokens-per-sample", "512", "--cosformer-max-positions", "256"],
     "--cosformer-max-positions 256 is smaller than --tokens-per-sample 512, the positions the model is built for: "
     "cosformer decoder self-attention (decoder layer 0) would fail at the first longer sequence; raise "
     "--cosformer-max-positions to at least 512 or lower --tokens-per-sample (a checkpoint trained before this "
     "check loads with --model-overrides \"{'tokens_per_sample': 256}\")"),
    ("cosformer_lm_tiny", ["--tokens-per-sample", "128", "--max-target-positions", "512", "--cosformer-max-positions", "256"],
     "--cosformer-max-positions 256 is smaller than --max-target-positions 512, the positions the model is built for: "
     "cosformer decoder self-attention (decoder layer 0) would fail at the first longer sequence; raise "
     "--cosformer-max-positions to at least 512 or lower --max-target-positions (a checkpoint trained before this "
     "check loads with --model-overrides \"{'max_target_positions': 256}\")"),
], ids=["decoder self", "encoder-decoder", "lm tokens per sample", "lm max target positions"])
def test_cosformer_horizon_below_the_model_positions_fails_at_build_time(data_dir, arch, extra, message):
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, arch, *extra)
    assert str(error.value) == message


@pytest.mark.parametrize("arch, extra", [
    ("cosformer_iwslt_de_en", ["--max-source-positions", "100", "--max-target-positions", "100", "--cosformer-max-positions", "100"]),
    ("cosformer_iwslt_de_en", ["--max-source-positions", "100", "--max-target-positions", "90", "--cosformer-max-positions", "120"]),
    ("cosformer_lm_tiny", ["--tokens-per-sample", "128", "--cosformer-max-positions", "128"]),
    ("cosformer_lm_tiny", ["--tokens-per-sample", "128"]),  # the default horizon: the model's positions
])
def test_a_horizon_that_covers_the_positions_builds(data_dir, arch, extra):
    build(data_dir, arch, *extra)


def test_a_horizon_only_encoder_self_attention_would_read_is_not_checked_but_warned_about(data_dir, caplog):
    """cosFormer encoder self-attention takes M from each sequence: --cosformer-max-positions is unused there."""
    build(data_dir, "mixed_transformer_iwslt_de_en", "--encoder-attention-kinds", "cosformer", "--cosformer-max-positions", "8")
    assert unused_warnings(caplog) == [
        "--cosformer-max-positions 8 is set, but no layer of this model uses it: it acts on cosformer decoder "
        "self-attention and encoder-decoder attention (this model: encoder self-attention cosformer; decoder "
        "self-attention softmax; encoder-decoder attention softmax)"]


# ----------------------------------------------------- unused kind options ---
@pytest.mark.parametrize("arch, extra, expected", [
    ("mixed_transformer_iwslt_de_en", ["--bet-score-weights", "shared"],
     ["--bet-score-weights shared is set, but no layer of this model uses it: it acts on bet decoder self-attention "
      "(this model: encoder self-attention softmax; decoder self-attention softmax; encoder-decoder attention softmax)"]),
    ("bet_sf_iwslt_de_en", ["--softmax-diag-free", "--extractor-lags", "16", "--extractor-conv-impl", "fft"],
     ["--extractor-lags 16 is set, but no layer of this model uses it: it acts on extractor_she, extractor_he, "
      "extractor_we, extractor_me decoder self-attention (this model: encoder self-attention softmax; decoder "
      "self-attention bet; encoder-decoder attention softmax)",
      "--extractor-conv-impl fft is set, but no layer of this model uses it: it acts on extractor_she, extractor_he, "
      "extractor_we, extractor_me decoder self-attention (this model: encoder self-attention softmax; decoder "
      "self-attention bet; encoder-decoder attention softmax)",
      "--softmax-diag-free is set, but no layer of this model uses it: it acts on softmax decoder self-attention "
      "(this model: encoder self-attention softmax; decoder self-attention bet; encoder-decoder attention softmax)"]),
    ("extractor_me_lm", ["--extractor-no-output-projection", "--bet-no-diag-free", "--softmax-diag-scale", "0.2"],
     ["--bet-no-diag-free is set, but no layer of this model uses it: it acts on bet decoder self-attention "
      "(this model: decoder self-attention extractor_me)",
      "--extractor-no-output-projection is set, but no layer of this model uses it: it acts on extractor_she, "
      "extractor_he, extractor_we decoder self-attention (this model: decoder self-attention extractor_me)",
      "--softmax-diag-scale 0.2 is set, but no layer of this model uses it: it acts on softmax decoder self-attention "
      "(this model: decoder self-attention extractor_me)"]),
], ids=["bet option, softmax model", "three options on a bet decoder", "lm"])
def test_an_option_no_layer_uses_is_named_in_a_warning(data_dir, caplog, arch, extra, expected):
    """One warning per unused option, in the order the kinds registered their options (kind packages by name)."""
    build(data_dir, arch, *extra)
    assert unused_warnings(caplog) == expected


@pytest.mark.parametrize("arch, extra", [
    ("mixed_transformer_iwslt_de_en", []),  # every option at its default
    ("mixed_transformer_iwslt_de_en", ["--bet-score-weights", "per-head", "--softmax-diag-scale", "1.0"]),  # defaults, typed out
    ("bet_sf_iwslt_de_en_no_diag_free", ["--bet-score-weights", "shared"]),  # the preset's --bet-no-diag-free is used
    ("extractor_she_iwslt_de_en", ["--extractor-conv-impl", "direct"]),  # the preset's lags are used
    ("mformer_lm_tiny", ["--decoder-layers", "4", "--cosformer-max-positions", "2048", "--softmax-diag-free"]),  # one layer each is enough
    ("reduced_diag_iwslt_de_en", []),
])
def test_options_some_layer_uses_give_no_warning(data_dir, caplog, arch, extra):
    build(data_dir, arch, *extra)
    assert unused_warnings(caplog) == []


# ------------------------------------- adaptive input / softmax, character embeddings ---
LM_KINDS = ["--decoder-layers", "3", "--decoder-attention-kinds", "softmax,cosformer,extractor_we", "--tokens-per-sample", "16"]
ADAPTIVE_INPUT = ["--adaptive-input", "--adaptive-input-cutoff", "4,8"]


@pytest.mark.parametrize("extra, message", [
    (ADAPTIVE_INPUT,
     "--adaptive-input with --share-decoder-input-output-embed (on in this package's language-model presets): the output "
     "projection would share the input's embedding matrix, which --adaptive-input does not have; add an adaptive softmax "
     "(--adaptive-softmax-cutoff; with --adaptive-input the same cutoffs and --tie-adaptive-weights tie the two), or use "
     "--arch mixed_transformer_lm, which shares nothing"),
    (["--character-embeddings"],
     "--character-embeddings with --share-decoder-input-output-embed (on in this package's language-model presets): the "
     "output projection would share the input's embedding matrix, which --character-embeddings does not have; add an "
     "adaptive softmax (--adaptive-softmax-cutoff; with --adaptive-input the same cutoffs and --tie-adaptive-weights tie "
     "the two), or use --arch mixed_transformer_lm, which shares nothing"),
    (["--adaptive-input"], "--adaptive-input needs --adaptive-input-cutoff (comma-separated cutoffs of the dictionary)"),
    (["--adaptive-softmax-cutoff", "4,8", "--tie-adaptive-weights"],
     "--tie-adaptive-weights ties an adaptive softmax to an adaptive input: it needs --adaptive-input and "
     "--adaptive-softmax-cutoff"),
    (ADAPTIVE_INPUT + ["--adaptive-softmax-cutoff", "4,10", "--tie-adaptive-weights"],
     "--tie-adaptive-weights: the adaptive softmax (--adaptive-softmax-cutoff 4,10, --adaptive-softmax-factor 4) and the "
     "adaptive input (--adaptive-input-cutoff 4,8, --adaptive-input-factor 4) must have the same cutoffs and factor"),
    (ADAPTIVE_INPUT + ["--adaptive-softmax-cutoff", "4,8", "--tie-adaptive-weights", "--decoder-output-dim", "16"],
     "--tie-adaptive-weights: --decoder-input-dim 32 and --decoder-output-dim 16 must be equal"),
    (["--adaptive-softmax-cutoff", "8,4"],
     "--adaptive-softmax-cutoff 8,4: expected increasing whole numbers separated by commas, from 1 up to the dictionary's "
     "16 entries, e.g. 4,8"),
], ids=["adaptive input shared", "character embeddings shared", "no input cutoffs", "tie without adaptive input",
        "tie with other cutoffs", "tie with other widths", "decreasing cutoffs"])
def test_adaptive_embedding_options_fairseq_fails_on_are_refused_at_build_time(data_dir, extra, message):
    """fairseq's transformer_lm fails on these with an AttributeError or a bare assert (or, the cutoffs, an
    assert in AdaptiveSoftmax); the presets share input and output embeddings by default."""
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, "mixed_transformer_lm_tiny", *LM_KINDS, *extra)
    assert str(error.value) == message


def test_adaptive_input_tied_to_an_adaptive_softmax_builds_on_a_preset(data_dir, caplog):
    """What the refusals propose: the preset's sharing gives way to the adaptive softmax, said in a warning."""
    model = build(data_dir, "mixed_transformer_lm_tiny", *LM_KINDS, *ADAPTIVE_INPUT, "--adaptive-softmax-cutoff", "4,8",
                  "--tie-adaptive-weights")
    softmax = model.decoder.adaptive_softmax
    assert softmax is not None and softmax.tail[0][-1].weight is model.decoder.embed_tokens.embeddings[1][0].weight
    tokens = torch.randint(4, 16, (2, 10))
    assert model.get_normalized_probs(model(tokens), log_probs=True).exp().sum(-1).allclose(torch.ones(2, 10))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "--share-decoder-input-output-embed (on in this package's language-model presets) has no effect with "
        "--adaptive-softmax-cutoff: the adaptive softmax has its own output embeddings (tied to an adaptive input with "
        "--adaptive-input --tie-adaptive-weights); built and saved without it"]


def test_tie_adaptive_weights_without_adaptive_embeddings_is_named_in_a_warning(data_dir, caplog):
    """Nothing to tie: fairseq's transformer_lm asserts; ours built such models, whose checkpoints still load."""
    model = build(data_dir, "mixed_transformer_lm_tiny", *LM_KINDS, "--tie-adaptive-weights")
    assert model.decoder.adaptive_softmax is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "--tie-adaptive-weights has no effect without --adaptive-input and --adaptive-softmax-cutoff, which it ties together"]
