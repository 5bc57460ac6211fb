"""End to end through fairseq's real CLIs: the cosFormer and mFormer LM
presets train on counting sentences the test generates, and fairseq-eval-lm
reports a perplexity."""
import pytest

from fairseq_plugins.cli.pipeline import eval_lm, train
from fairseq_plugins.cli.synthetic import binarize_lm, write_lm_corpus


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    write_lm_corpus(str(root / "raw"))
    return binarize_lm(str(root / "raw"), str(root / "bin"))


LM_TRAINING = [
    "--task", "language_modeling", "--tokens-per-sample", "64", "--sample-break-mode", "eos", "--optimizer", "adam",
    "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50", "--max-tokens", "2048", "--dropout", "0.0",
]


@pytest.mark.parametrize("preset", ["cosformer_lm_tiny", "mformer_lm_tiny"])
def test_language_model_trains_and_eval_lm_reports_perplexity(preset, lm_data, tmp_path):
    result = train(lm_data, str(tmp_path / preset), preset, LM_TRAINING, max_update=150)
    perplexity = eval_lm(lm_data, result.checkpoint, extra=["--tokens-per-sample", "64", "--sample-break-mode", "eos"])
    # Counting sentences over a 32-word cycle: only each sentence's first word
    # and its length are unpredictable; uniform guessing would give ~40.
    assert 1.0 <= perplexity < 4.0, perplexity
