"""``--task language_modeling --add-bos-token``: a sample holds --tokens-per-sample + 1 positions (fairseq's
MonolingualDataset prepends the BOS token to a full block), and every LM preset is built for them: the
cosFormer horizon and the learned position tables count the BOS position (fairseq's own
``transformer_lm --decoder-learned-pos`` fails there with an IndexError), and so does the check of an
explicit --cosformer-max-positions (issue 19, item 2).

Each CLI start costs ~5 s, so every LM preset (from fairseq's registry) is built and run in process on a
full block with its BOS token, with shrunk widths (the layer counts and per-layer layouts are the
preset's); the real CLIs run end to end (fairseq-train a few updates, fairseq-eval-lm with and without
--context-window, sampling with fairseq-generate) for a representative subset: one cosFormer preset, one
learned-position Extractor preset and one learned-position softmax preset."""
import os

import pytest
import torch
from fairseq import options, tasks
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

import fairseq_plugins
from fairseq_plugins.modules import AttentionConfigError

PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
LM_PRESETS = sorted(arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model == "mixed_transformer_lm")
TOKENS = 8
# 96 is divisible by every preset's head count (1, 4, 6, 8, 32)
SMALL = ["--decoder-embed-dim", "96", "--decoder-ffn-embed-dim", "32", "--tokens-per-sample", str(TOKENS)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dict")
    (path / "dict.txt").write_text("".join(f"w{i} 10\n" for i in range(12)))
    return str(path)


def build(data_dir, arch, *extra):
    argv = [data_dir, "--arch", arch, "--user-dir", PLUGIN_DIR, "--task", "language_modeling", *SMALL, *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args), task


@pytest.mark.parametrize("arch", LM_PRESETS)
def test_every_lm_preset_takes_a_full_block_after_its_bos_token(data_dir, arch):
    model, task = build(data_dir, arch, "--add-bos-token")
    assert model.max_positions() == TOKENS + 1
    dictionary = task.source_dictionary
    torch.manual_seed(1)
    block = torch.randint(dictionary.nspecial, len(dictionary), (2, TOKENS))
    tokens = torch.cat([torch.full((2, 1), dictionary.bos()), block], dim=1)
    model.eval()
    with torch.no_grad():
        full, _ = model(tokens)
        # step by step, as sampling decodes: the same outputs at every position, the last one included
        state = {}
        steps = [model.decoder(tokens[:, : t + 1], incremental_state=state)[0][:, -1] for t in range(TOKENS + 1)]
    assert full.shape[:2] == (2, TOKENS + 1) and torch.isfinite(full).all()
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_without_bos_the_positions_stay_the_block():
    """No --add-bos-token: the model is built for --tokens-per-sample positions, as before."""
    from argparse import Namespace

    from fairseq_plugins.models.mixed_transformer_lm import resolve_lm_sizes

    args = Namespace(arch="cosformer_lm_tiny", tokens_per_sample=TOKENS, add_bos_token=False, max_target_positions=None)
    resolve_lm_sizes(args)
    assert args.max_target_positions == TOKENS


def test_the_horizon_check_counts_the_bos_position(data_dir):
    build(data_dir, "cosformer_lm_tiny", "--add-bos-token", "--cosformer-max-positions", str(TOKENS + 1))
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, "cosformer_lm_tiny", "--add-bos-token", "--cosformer-max-positions", str(TOKENS))
    assert str(error.value) == (
        f"--cosformer-max-positions {TOKENS} is smaller than --tokens-per-sample {TOKENS} + 1 (the BOS token of "
        f"--add-bos-token) = {TOKENS + 1}, the positions the model is built for: cosformer decoder self-attention "
        f"(decoder layer 0) would fail at the first longer sequence; raise --cosformer-max-positions to at least "
        f"{TOKENS + 1} or lower --tokens-per-sample (a checkpoint trained before this check loads with "
        f"--model-overrides \"{{'tokens_per_sample': {TOKENS - 1}}}\")")


# ------------------------------------------------------- the real CLIs ---
@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    from fairseq_plugins.cli.synthetic import binarize_lm, write_lm_corpus

    root = tmp_path_factory.mktemp("lm")
    write_lm_corpus(str(root / "raw"), splits={"train": 40, "valid": 4, "test": 8})
    return binarize_lm(str(root / "raw"), str(root / "bin"))


CLI_TOKENS = "16"
# --sample-break-mode none: full blocks of --tokens-per-sample tokens, then the BOS token in front
LM_TASK = ["--task", "language_modeling", "--add-bos-token", "--tokens-per-sample", CLI_TOKENS, "--sample-break-mode", "none"]


@pytest.mark.parametrize("arch, sizes", [
    ("cosformer_lm_tiny", ["--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--decoder-layers", "1"]),
    ("extractor_she_lm", ["--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--decoder-layers", "1"]),
    ("softmax_1head_lm", ["--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--decoder-layers", "1"]),
])
def test_train_eval_lm_and_sample_with_add_bos_token(lm_data, tmp_path, arch, sizes):
    from fairseq_plugins.cli.pipeline import EVALUATE_ALL, eval_lm, fairseq_command, run, train

    result = train(lm_data, str(tmp_path / arch), arch, [
        *LM_TASK, *sizes, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "256", "--no-save-optimizer-state",
    ], max_update=3)
    for window in ([], ["--context-window", "8"]):
        perplexity = eval_lm(lm_data, result.checkpoint, extra=[*LM_TASK[2:], *window])
        assert perplexity > 1.0
    # evaluated without the BOS token it was trained with: scored, but not silently
    warning = "the checkpoint was trained with --add-bos-token and this task has none"
    without = [*LM_TASK[:2], *LM_TASK[3:]]
    log = run(fairseq_command("eval_lm") + [lm_data, "--user-dir", PLUGIN_DIR, "--path", result.checkpoint, "--cpu",
                                            "--max-tokens", "256", "--num-workers", "0", *EVALUATE_ALL, *without])
    assert warning in log and "Perplexity" in log
    log = run(fairseq_command("eval_lm") + [lm_data, "--user-dir", PLUGIN_DIR, "--path", result.checkpoint, "--cpu",
                                            "--max-tokens", "256", "--num-workers", "0", *EVALUATE_ALL, *LM_TASK])
    assert warning not in log and "Perplexity" in log
    log = run(fairseq_command("generate") + [
        lm_data, "--user-dir", PLUGIN_DIR, "--path", result.checkpoint, "--cpu", *LM_TASK, "--sampling", "--beam", "1",
        "--prefix-size", "1", "--max-len-b", CLI_TOKENS, "--batch-size", "4", "--num-workers", "0", "--seed", "1", *EVALUATE_ALL,
    ])
    hypotheses = [line for line in log.splitlines() if line.startswith("H-")]
    assert hypotheses, log[-2000:]
