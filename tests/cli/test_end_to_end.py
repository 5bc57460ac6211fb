"""End to end through fairseq's real CLIs on data the test generates: every
translation preset (shrunk) learns the synthetic task and beam-decodes it;
the checkpoint loads with weights-only torch.load, in fairseq-interactive and
through the hub interface; the LM presets train and fairseq-eval-lm reports a
perplexity."""
import os

import pytest
import torch

import fairseq_plugins  # noqa: F401  (safe globals)
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
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, translation_pair, write_lm_corpus, write_translation_task

# Each preset at its own layout, shrunk in width (and in depth where the layout
# allows it without changing which layers use which kind).
PRESETS = {
    "mixed_transformer_iwslt_de_en": ["--encoder-layers", "2", "--decoder-layers", "2"],
    "cosformer_iwslt_de_en": ["--encoder-layers", "2", "--decoder-layers", "2"],
    "mformer_iwslt_de_en": ["--decoder-layers", "2"],  # 6 encoder layers, cosFormer in 2 and 4
    "mformer_wmt_en_de": ["--encoder-layer-ffn-embed-dims", "128", "--decoder-layer-ffn-embed-dims", "128"],
}
MAX_UPDATE = 500
_trained = {}


@pytest.fixture(scope="module")
def translation_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("translation")
    write_translation_task(str(root / "raw"))
    return binarize_translation(str(root / "raw"), str(root / "bin"))


@pytest.fixture(scope="module")
def save_root(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


def trained(preset, data_bin, save_root):
    if preset not in _trained:
        _trained[preset] = train(
            data_bin, str(save_root / preset), preset, TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + PRESETS[preset], max_update=MAX_UPDATE
        )
    return _trained[preset]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_learns_synthetic_translation_and_beam_decodes(preset, translation_data, save_root):
    result = trained(preset, translation_data, save_root)
    decoded = generate(translation_data, result.checkpoint, beam=5)
    assert len(decoded.hypotheses) == 100
    assert decoded.bleu >= 90, f"{preset}: BLEU {decoded.bleu}\n{decoded.log[-1500:]}"


def test_checkpoint_needs_only_the_registered_safe_globals(translation_data, save_root):
    from fairseq_plugins.checkpoint_compat import CHECKPOINT_GLOBALS

    checkpoint = trained("cosformer_iwslt_de_en", translation_data, save_root).checkpoint
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        needed = torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint)
        with pytest.raises(Exception, match="weights_only|Unsupported global"):
            torch.load(checkpoint, map_location="cpu")
    finally:
        torch.serialization.add_safe_globals(registered)
    # what fairseq-train wrote needs exactly the classes the plugin allows for checkpoint files
    assert sorted(needed) == sorted(f"{c.__module__}.{c.__qualname__}" for c in CHECKPOINT_GLOBALS)
    state = torch.load(checkpoint, map_location="cpu")  # weights_only=True, the torch >= 2.6 default
    assert "model" in state


def expected_translation(source: str) -> str:
    # the synthetic task's bijection (see fairseq_plugins/cli/synthetic.py)
    return " ".join(f"T{(7 * int(w[1:]) + 3) % 24}" for w in source.split())


def test_interactive_translates_with_cosformer_decoder(translation_data, save_root):
    checkpoint = trained("cosformer_iwslt_de_en", translation_data, save_root).checkpoint
    sources = ["s1 s2 s3 s4", "s20 s5 s5 s0 s11"]
    output = run(
        fairseq_command("interactive")
        + [translation_data, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--beam", "5", "--cpu", "-s", "src", "-t", "tgt", *EVALUATE_ALL],
        input_text="\n".join(sources) + "\n",
    )
    hypotheses = [line.split("\t")[2] for line in output.splitlines() if line.startswith("H-")]
    assert hypotheses == [expected_translation(s) for s in sources]


def test_hub_from_pretrained(translation_data, save_root):
    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    result = trained("cosformer_iwslt_de_en", translation_data, save_root)
    hub = MixedTransformerModel.from_pretrained(
        os.path.dirname(result.checkpoint), checkpoint_file=os.path.basename(result.checkpoint), data_name_or_path=translation_data,
        user_dir=PLUGIN_DIR,
    )
    hub.eval()
    import random

    rng = random.Random(123)
    sources = [translation_pair(rng)[0] for _ in range(10)]
    translations = hub.translate(sources, beam=5)
    correct = sum(t == expected_translation(s) for s, t in zip(sources, translations))
    assert correct >= 8, list(zip(sources, translations))


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
