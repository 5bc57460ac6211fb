"""Extractors end to end through fairseq's real CLIs on generated data: an
Extractor LM trains (fairseq-train), reports a perplexity (fairseq-eval-lm) and
samples with top-p 0.6 (fairseq-interactive, the paper's qualitative check); an
Extractor-decoder translation preset learns the synthetic task and
beam-decodes it (fairseq-generate)."""
import os
import re

import pytest
import sentencepiece as spm

from fairseq_plugins.cli.pipeline import (
    EVALUATE_ALL,
    PLUGIN_DIR,
    TINY_TRANSLATION_SIZES,
    TRANSLATION_TRAINING,
    eval_lm,
    fairseq_command,
    generate,
    run,
    train,
)
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task

SMALL_SPLITS = {"train": 2000, "valid": 20, "test": 100}
# The paper's LM preset shrunk for a CPU test: 2 layers of d = 64; the window
# follows --tokens-per-sample (l = 64). Perplexity ~2.1 from 80 updates on.
LM_ARCH = "extractor_he_lm"
LM_OPTIONS = [
    "--task", "language_modeling", "--tokens-per-sample", "64", "--sample-break-mode", "eos",
    "--decoder-layers", "2", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "128", "--dropout", "0.0",
    "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "30", "--max-tokens", "2048",
    "--save-interval", "100000",
]
TRANSLATION_ARCH = "extractor_she_iwslt_de_en"
# Half the usual batch (and warm-up): BLEU 100 after 200 updates, 86 after 120.
TRANSLATION_OPTIONS = TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + [
    "--encoder-layers", "2", "--decoder-layers", "2", "--max-tokens", "1000", "--warmup-updates", "50",
    "--save-interval", "100000",  # one checkpoint, at the end (fairseq saves one every epoch otherwise)
]


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("extractor_lm")
    data_bin = binarize_lm(write_lm_corpus(str(root / "raw"), splits=SMALL_SPLITS), str(root / "bin"))
    return data_bin, train(data_bin, str(root / "checkpoints"), LM_ARCH, LM_OPTIONS, max_update=100).checkpoint


def test_extractor_lm_trains_and_eval_lm_reports_perplexity(lm_checkpoint):
    data_bin, checkpoint = lm_checkpoint
    perplexity = eval_lm(data_bin, checkpoint, extra=["--tokens-per-sample", "64", "--sample-break-mode", "eos"])
    # Counting sentences over a 32-word cycle: only each sentence's first word
    # and its length are unpredictable; uniform guessing would give ~40.
    assert 1.0 <= perplexity < 4.0, perplexity


def test_extractor_lm_samples_with_top_p(lm_checkpoint):
    data_bin, checkpoint = lm_checkpoint
    output = run(
        fairseq_command("interactive") + [
            data_bin, "--task", "language_modeling", "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--cpu",
            "--sampling", "--sampling-topp", "0.6", "--beam", "1", "--nbest", "1", "--seed", "1", *EVALUATE_ALL,
        ],
        input_text="w3 w4 w5\nw30 w31\n",
    )
    hypotheses = [line.split("\t")[2].split() for line in output.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 2, output[-2000:]
    for prompt, hypothesis in zip((["w3", "w4", "w5"], ["w30", "w31"]), hypotheses):
        assert hypothesis[: len(prompt)] == prompt
        continuation = hypothesis[len(prompt):]
        assert continuation and all(re.fullmatch(r"w\d+", w) for w in continuation), hypothesis
    # the sentences count upward: the nucleus of a trained model holds the next word
    assert hypotheses[0][3] == "w6" and hypotheses[1][2] == "w0", hypotheses


def test_extractor_decoder_translation_preset_learns_and_beam_decodes(tmp_path):
    data_bin = binarize_translation(write_translation_task(str(tmp_path / "raw"), splits=SMALL_SPLITS), str(tmp_path / "bin"))
    result = train(data_bin, str(tmp_path / "checkpoints"), TRANSLATION_ARCH, TRANSLATION_OPTIONS, max_update=200)
    decoded = generate(data_bin, result.checkpoint, beam=5)
    assert len(decoded.hypotheses) == SMALL_SPLITS["test"]
    assert decoded.bleu >= 90, f"BLEU {decoded.bleu}\n{decoded.log[-1500:]}"


def test_readme_sampling_line_with_sentencepiece(tmp_path):
    """The README's qualitative check, option for option: an Extractor LM trained
    on sentencepiece BPE pieces samples from a raw-text prompt through
    fairseq-interactive --bpe sentencepiece (top-p 0.6) and prints detokenised text."""
    raw = write_lm_corpus(str(tmp_path / "raw"), splits=SMALL_SPLITS)
    spm.SentencePieceTrainer.train(
        input=os.path.join(raw, "train.txt"), model_prefix=str(tmp_path / "spm"), vocab_size=24, model_type="bpe",
        character_coverage=1.0, minloglevel=2,
    )
    model_path = str(tmp_path / "spm.model")
    processor = spm.SentencePieceProcessor(model_file=model_path)
    encoded = tmp_path / "encoded"
    encoded.mkdir()
    for split in SMALL_SPLITS:
        with open(os.path.join(raw, f"{split}.txt")) as src, open(encoded / f"{split}.txt", "w") as dst:
            for line in src:
                dst.write(" ".join(processor.encode(line.strip(), out_type=str)) + "\n")
    data_bin = binarize_lm(str(encoded), str(tmp_path / "bin"))
    checkpoint = train(data_bin, str(tmp_path / "checkpoints"), LM_ARCH, LM_OPTIONS, max_update=100).checkpoint
    output = run(
        fairseq_command("interactive") + [
            data_bin, "--task", "language_modeling", "--user-dir", PLUGIN_DIR, "--path", checkpoint,
            "--bpe", "sentencepiece", "--sentencepiece-model", model_path,
            "--sampling", "--sampling-topp", "0.6", "--beam", "1", "--nbest", "1", "--cpu", "--seed", "1",
        ],
        input_text="w3 w4 w5\n",
    )
    detokenised = [line.split("\t")[2] for line in output.splitlines() if line.startswith("D-")]
    assert len(detokenised) == 1, output[-2000:]
    words = detokenised[0].split()
    # raw words come back (no pieces, no "▁"), the prompt first, then the counting continues
    assert words[:3] == ["w3", "w4", "w5"] and len(words) > 3, detokenised
    assert all(re.fullmatch(r"w\d+", w) for w in words), detokenised
    assert words[3] == "w6", detokenised
