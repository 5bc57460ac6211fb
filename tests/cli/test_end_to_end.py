"""End to end through fairseq's real CLIs on data the test generates: the
softmax and cosFormer translation presets (shrunk) learn the synthetic task
and beam-decode it; the checkpoint loads with weights-only torch.load, in
fairseq-interactive and through the hub interface. The mFormer presets:
test_mformer_end_to_end.py; the language models: test_lm_end_to_end.py."""
import os

import pytest
import torch

import fairseq_plugins  # noqa: F401  (safe globals)
from fairseq_plugins.cli.pipeline import (
    EVALUATE_ALL,
    PLUGIN_DIR,
    TINY_TRANSLATION_SIZES,
    TRANSLATION_TRAINING,
    CommandFailed,
    fairseq_command,
    generate,
    run,
    train,
)
from fairseq_plugins.cli.synthetic import translation_pair
from translation_presets import PRESETS, save_root, trained, translation_data  # noqa: F401  (fixtures)


@pytest.mark.parametrize("preset", [p for p in PRESETS if not p.startswith("mformer_")])
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


def held_out_sources(count=10):
    import random

    rng = random.Random(123)
    return [translation_pair(rng)[0] for _ in range(count)]


def assert_mostly_correct(sources, translations):
    # The shrunk presets reach BLEU ~98 after their short training, not 100 on every machine: one
    # wrong token in ten sentences is the model, not the decoding route under test.
    assert len(translations) == len(sources)
    correct = sum(t == expected_translation(s) for s, t in zip(sources, translations))
    assert correct >= 8, list(zip(sources, translations))


def test_interactive_translates_with_cosformer_decoder(translation_data, save_root):
    checkpoint = trained("cosformer_iwslt_de_en", translation_data, save_root).checkpoint
    sources = held_out_sources()
    output = run(
        fairseq_command("interactive")
        + [translation_data, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--beam", "5", "--cpu", "-s", "src", "-t", "tgt", *EVALUATE_ALL],
        input_text="\n".join(sources) + "\n",
    )
    hypotheses = [line.split("\t")[2] for line in output.splitlines() if line.startswith("H-")]
    assert_mostly_correct(sources, hypotheses)


def test_hub_from_pretrained(translation_data, save_root):
    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    result = trained("cosformer_iwslt_de_en", translation_data, save_root)
    hub = MixedTransformerModel.from_pretrained(
        os.path.dirname(result.checkpoint), checkpoint_file=os.path.basename(result.checkpoint), data_name_or_path=translation_data,
        user_dir=PLUGIN_DIR,
    )
    hub.eval()
    sources = held_out_sources()
    assert_mostly_correct(sources, hub.translate(sources, beam=5))


# ------------------------------------------- fairseq's other generation routes ---
# One small model with softmax, cosFormer and an Extractor in the decoder (30 updates: the routes below check
# invariants, not quality) and a language model of the target side with the same three kinds.
ROUTES_TRANSLATION = TINY_TRANSLATION_SIZES + [
    "--encoder-layers", "2", "--decoder-layers", "3", "--encoder-attention-kinds", "softmax,cosformer",
    "--decoder-attention-kinds", "softmax,cosformer,extractor_he", "--cross-attention-kinds", "softmax,cosformer,softmax",
]
EMA = ["--store-ema", "--ema-decay", "0.9", "--ema-start-update", "10"]  # fairseq's exponential moving average
LM_TOKENS = 16  # the language model's positions (--tokens-per-sample): cosFormer's horizon
ROUTES_LM = [
    "--task", "language_modeling", "--arch", "mixed_transformer_lm_tiny", "--decoder-layers", "3",
    "--decoder-attention-kinds", "softmax,cosformer,extractor_we", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
    "--tokens-per-sample", str(LM_TOKENS), "--sample-break-mode", "eos", "--max-tokens", "512",
]


@pytest.fixture(scope="module")
def routes(translation_data, tmp_path_factory):
    import shutil


    root = tmp_path_factory.mktemp("routes")
    translation = train(translation_data, str(root / "translation"), "mixed_transformer_iwslt_de_en",
                        TRANSLATION_TRAINING + ROUTES_TRANSLATION + EMA, max_update=30).checkpoint
    # the language model reads the target side with the target dictionary; fairseq-generate --lm-path loads its
    # dictionary as dict.txt from the translation data
    data = str(root / "data")
    shutil.copytree(translation_data, data)
    shutil.copy(os.path.join(data, "dict.tgt.txt"), os.path.join(data, "dict.txt"))
    raw = os.path.join(os.path.dirname(translation_data), "raw")
    lm_data = str(root / "lm_data")
    run(fairseq_command("preprocess") + [
        "--only-source", "--srcdict", os.path.join(data, "dict.txt"), "--destdir", lm_data, "--workers", "1",
        *[argument for split in ("train", "valid") for argument in (f"--{split}pref", os.path.join(raw, f"{split}.tgt"))]])
    log = run(fairseq_command("train") + [
        lm_data, "--user-dir", PLUGIN_DIR, *ROUTES_LM, "--optimizer", "adam", "--lr", "3e-3", "--max-update", "20", "--cpu",
        "--seed", "1", "--save-dir", str(root / "lm"), "--no-epoch-checkpoints", "--no-progress-bar", "--num-workers", "0",
        "--validate-interval-updates", "20", "--dropout", "0.1"])
    return {"translation": translation, "data": data, "lm": str(root / "lm" / "checkpoint_last.pt"), "lm_data": lm_data,
            "lm_log": log}


def teacher_forced_scores(checkpoint, data, source, hypothesis):
    """Base-2 log-probabilities of ``hypothesis`` and its end of sentence given ``source``, in one full pass."""
    import math

    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    model = models[0].eval()
    src = task.source_dictionary.encode_line(source, add_if_not_exist=False).long()[None]
    tgt = task.target_dictionary.encode_line(hypothesis, add_if_not_exist=False).long()[None]
    previous = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)  # the end of sentence first, as fairseq's decoder input
    with torch.no_grad():
        logits = model(src, torch.tensor([src.size(1)]), previous)
        lprobs = model.get_normalized_probs(logits, log_probs=True)[0]
    return (lprobs.gather(-1, tgt[0][:, None])[:, 0] / math.log(2)).tolist()


def test_interactive_constraints_with_linear_and_extractor_decoder_layers(routes):
    """Lexically constrained beam search (Hu et al. 2019; fairseq's LexicallyConstrainedBeamSearch) reorders the
    decoder's incremental state by its banks, not by the beams' scores: every hypothesis holds its constraints,
    and every token's score is the one a full pass over the hypothesis gives (cosFormer's running sums and the
    Extractor's window followed the reordering)."""
    sources = held_out_sources(4)
    constraints = [["T5 T9"], ["T1", "T2 T3"], ["T0"], []]
    lines = ["\t".join([source] + wanted) for source, wanted in zip(sources, constraints)]
    output = run(fairseq_command("interactive") + [
        routes["data"], "--user-dir", PLUGIN_DIR, "--path", routes["translation"], "--cpu", "-s", "src", "-t", "tgt",
        "--beam", "4", "--constraints", "--batch-size", "4", "--buffer-size", "4", *EVALUATE_ALL], input_text="\n".join(lines) + "\n")
    hypotheses = {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in output.splitlines() if l.startswith("H-")}
    scores = {int(l.split("\t")[0][2:]): [float(s) for s in l.split("\t")[1].split()] for l in output.splitlines() if l.startswith("P-")}
    assert sorted(hypotheses) == [0, 1, 2, 3], output[-2000:]
    for i, (source, wanted) in enumerate(zip(sources, constraints)):
        for phrase in wanted:
            assert f" {phrase} " in f" {hypotheses[i]} ", (phrase, hypotheses[i])
        expected = teacher_forced_scores(routes["translation"], routes["data"], source, hypotheses[i])
        assert scores[i] == pytest.approx(expected, abs=1e-3), (i, hypotheses[i])  # printed to 4 decimals


def generate_with_lm(routes, *extra):
    return run(fairseq_command("generate") + [
        routes["data"], "--user-dir", PLUGIN_DIR, "--path", routes["translation"], "--cpu", "--gen-subset", "test",
        "--batch-size", "50", "--num-workers", "0", *EVALUATE_ALL, "--beam", "2", "--lm-path", routes["lm"],
        "--lm-weight", "0.3", *extra])


def test_lm_fusion_refuses_hypotheses_longer_than_the_language_model_positions(routes):
    """fairseq-generate --lm-path scores every prefix of a hypothesis with the language model in a full pass and
    bounds hypotheses by the translation model's positions only (--max-len-b 200 by default): refused before
    decoding, with the bound that fits (a hypothesis past cosFormer's horizon failed mid-run with a traceback)."""

    with pytest.raises(CommandFailed) as failure:
        generate_with_lm(routes)
    lines = str(failure.value).splitlines()
    assert "exit code 2" in lines[0] and not any(line.startswith("H-") for line in lines)
    assert lines[-1] == (
        f"error: --lm-path {routes['lm']}: the language model has {LM_TOKENS} positions (what it was built for) and fairseq "
        "scores every prefix of a hypothesis with it, the end of sentence included: hypotheses of up to 200 tokens "
        f"(--max-len-b 200) need 201; give --max-len-a 0 --max-len-b {LM_TOKENS - 1} or less")


def test_lm_fusion_decodes_up_to_the_language_model_positions(routes):
    """At the bound the refusal gives, hypotheses forced to its length (--min-len) decode: the language model
    scores prefixes of all its positions."""
    bound = str(LM_TOKENS - 1)
    log = generate_with_lm(routes, "--max-len-b", bound, "--min-len", bound)
    hypotheses = [line.split("\t")[2] for line in log.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 100 and all(len(h.split()) == LM_TOKENS - 1 for h in hypotheses), log[-2000:]


def test_fairseq_validate_reproduces_the_training_validation_loss(routes):
    """fairseq-validate rebuilds the language model from its checkpoint (kinds, cosFormer's horizon, the
    Extractor's lags from the saved options) and computes the validation loss the training logged."""
    import re

    logged = re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", routes["lm_log"])
    assert logged, routes["lm_log"][-2000:]
    log = run(fairseq_command("validate") + [
        routes["lm_data"], "--user-dir", PLUGIN_DIR, "--path", routes["lm"], "--cpu", "--task", "language_modeling",
        "--tokens-per-sample", str(LM_TOKENS), "--sample-break-mode", "eos", "--max-tokens", "512", "--num-workers", "0"])
    assert re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log) == logged[-1:], log[-2000:]


def test_ema_weights_load_as_a_checkpoint(routes, tmp_path):
    """fairseq-train --store-ema keeps a moving average of a deep copy of the model; fairseq's
    save_ema_as_checkpoint makes it a checkpoint, which loads (the kinds checked, weights-only) with its weights."""
    from fairseq import checkpoint_utils

    ema = str(tmp_path / "ema.pt")
    checkpoint_utils.save_ema_as_checkpoint(routes["translation"], ema)
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([ema], arg_overrides={"data": routes["data"]})
    loaded = models[0].state_dict()
    state = torch.load(routes["translation"], map_location="cpu")
    averaged = state["extra_state"]["ema"]
    assert set(averaged) == set(state["model"]) and all(torch.equal(loaded[name], averaged[name]) for name in averaged)
    assert not all(torch.equal(state["model"][name], averaged[name]) for name in averaged)  # an average, not the model
