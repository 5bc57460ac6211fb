"""The language-model supernet (``mixed_supertransformer_lm``, issue 14): a sub-network inside the
supernet computes exactly what its exported ``mixed_transformer_lm`` computes (float64, every kind of
the space), decodes step by step as in full; then the real CLIs: fairseq-train with fairseq's
``language_modeling`` task, ``evaluate`` and ``export``, and fairseq-eval-lm on the exported checkpoint,
which reports the loss ``evaluate`` computed inside the supernet."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.cli.pipeline import PLUGIN_DIR, EVALUATE_ALL, fairseq_command, run
from fairseq_plugins.cli.synthetic import binarize_lm, write_lm_corpus
from fairseq_plugins.modules import AttentionConfigError

ROOT = Path(__file__).resolve().parents[2]
SPACE = """
decoder:
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 12]
  attention_heads: [2, 4]
  attention_kinds: [softmax, cosformer, extractor_me, bet]
"""


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("supernet_lm")
    write_lm_corpus(str(root / "raw"), splits={"train": 200, "valid": 20, "test": 20})
    (root / "space.yaml").write_text(SPACE)
    return str(root), binarize_lm(str(root / "raw"), str(root / "bin")), str(root / "space.yaml")


def build(data, space, *extra):
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
        data, "--task", "language_modeling", "--arch", "mixed_supertransformer_lm", "--search-space", space,
        "--tokens-per-sample", "16", "--dropout", "0", *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task, task.build_model(args)


def test_a_sub_network_inside_the_lm_supernet_computes_its_standalone_model(lm_data):
    _, data, space = lm_data
    task, model = build(data, space)
    model.double().eval()
    tokens = torch.randint(4, 20, (3, 9), generator=torch.Generator().manual_seed(1))
    architectures = [model.space.extreme(True), model.space.extreme(False)] + [model.sample(u) for u in range(8)]
    assert {layer.attention_kind for a in architectures for layer in a.decoder_layers} == {"softmax", "cosformer", "extractor_me", "bet"}
    for architecture in architectures:
        model.set_active(architecture)
        inside, _ = model(tokens)
        sub = model.subnetwork(architecture).double().eval()
        assert type(sub).__name__ == "MixedTransformerLanguageModel" and sub.decoder.architecture == architecture
        full, _ = sub(tokens)
        assert torch.equal(inside, full), architecture
        # step by step, as fairseq's generators decode
        state, steps = {}, []
        for t in range(tokens.size(1)):
            out, _ = sub.decoder(tokens[:, : t + 1], incremental_state=state)
            steps.append(out[:, -1])
        # (float64, but fairseq's MultiheadAttention takes its softmax in float32 when decoding: utils.softmax)
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-6, atol=1e-6, msg=str(architecture))


def test_the_space_must_fit_the_supernet(lm_data, tmp_path):
    root, data, space = lm_data
    with pytest.raises(AttentionConfigError, match=r"mixed_supertransformer needs an encoder-decoder space .*use mixed_supertransformer_lm"):
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
            data, "--task", "language_modeling", "--arch", "mixed_supertransformer", "--search-space", space])
        tasks.setup_task(args).build_model(args)
    (tmp_path / "translation.yaml").write_text(
        "encoder: {embed_dim: [8], layers: [1], ffn_embed_dim: [8], attention_heads: [2], attention_kinds: [softmax]}\n"
        "decoder: {embed_dim: [8], layers: [1], ffn_embed_dim: [8], attention_heads: [2], attention_kinds: [softmax],"
        " cross_attention_heads: [2], cross_attention_kinds: [softmax], encoder_decoder_connect: [1]}\n")
    with pytest.raises(AttentionConfigError, match=r"mixed_supertransformer_lm needs a language-model space .*use mixed_supertransformer$"):
        build(data, str(tmp_path / "translation.yaml"))
    with pytest.raises(AttentionConfigError, match=r"--task supernet_language_modeling trains a supernet: use --arch "
                       r"mixed_supertransformer_lm \(got MixedTransformerLanguageModel\); other models train with --task language_modeling"):
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
            data, "--task", "supernet_language_modeling", "--arch", "mixed_transformer_lm_tiny", "--tokens-per-sample", "16"])
        tasks.setup_task(args).build_model(args)


def search(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_plugins.search", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def test_train_evaluate_export_and_eval_lm(lm_data, tmp_path):
    root, data, space = lm_data
    log = run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--task", "supernet_language_modeling", "--supernet-sampling", "sandwich",
        "--arch", "mixed_supertransformer_lm", "--search-space", space, "--tokens-per-sample", "16", "--optimizer", "adam", "--lr", "3e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-tokens", "400", "--max-update", "8", "--cpu",
        "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3",
        "--criterion", "cross_entropy", *EVALUATE_ALL])
    assert "valid on 'valid' subset" in log
    # validation: the largest sub-network's loss, and the smallest's
    assert re.search(r"valid on 'valid' subset \| loss [0-9.]+ .*\| smallest_loss [0-9.]+", log), log[-2000:]
    checkpoint = str(tmp_path / "ck" / "checkpoint_last.pt")
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    architecture = next(a for a in (model.sample(u) for u in range(100))
                        if len(a.decoder_layers) == 2 and a.decoder_layers[0].attention_kind != a.decoder_layers[1].attention_kind)
    (tmp_path / "a.json").write_text(architecture.to_json())

    evaluated = search("evaluate", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--subset", "test")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    inherited = json.loads(evaluated.stdout.strip().splitlines()[-1])
    exported = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--output", str(tmp_path / "sub.pt"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    (sub,), _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "sub.pt")])
    assert type(sub).__name__ == "MixedTransformerLanguageModel" and sub.decoder.architecture == architecture
    count = int(re.search(r"([\d,]+) parameters", exported.stdout).group(1).replace(",", ""))
    assert count == sum(p.numel() for p in sub.parameters())
    counted = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"))
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert json.loads(counted.stdout.strip().splitlines()[-1])["parameters"] == count

    # fairseq-eval-lm on the export: the loss evaluate computed inside the supernet (eval-lm prints 4 decimals)
    evaluation = run(fairseq_command("eval_lm") + [
        data, "--user-dir", PLUGIN_DIR, "--path", str(tmp_path / "sub.pt"), "--cpu", "--gen-subset", "test",
        "--tokens-per-sample", "16",
        "--max-tokens", "4096", "--num-workers", "0", *EVALUATE_ALL])
    loss = float(re.search(r"Loss \(base 2\): ([0-9.]+)", evaluation).group(1))
    assert abs(loss - inherited["loss"]) < 1e-4, (loss, inherited)

    bad = search("evaluate", "--checkpoint", checkpoint, "--bleu")
    assert bad.returncode == 2 and "--bleu: " in bad.stderr and "is a language-model supernet (BLEU scores translations)" in bad.stderr
    # a language model's latency: tokens per second of scoring and of sampling a stated context, beside the reference
    measured = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--latency",
                      "--target-length", "6", "--warmup", "0", "--repeats", "1", "--rounds", "2", "--processes", "1")
    assert measured.returncode == 0, measured.stderr[-3000:]
    latency = json.loads(measured.stdout.strip().splitlines()[-1])["latency"]
    assert latency["reference"] == model.space.extreme(largest=True).to_dict() and latency["decoder_calls"] == 7
    assert latency["scoring"]["context"] == latency["sampling"]["context"] == 6
    assert latency["scoring"]["tokens_per_second"] > 0 and latency["sampling"]["tokens_per_second"] > 0
