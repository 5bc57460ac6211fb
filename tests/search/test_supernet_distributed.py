"""Data-parallel supernet training as the WMT14 recipe runs it on GPUs (issue 33): the fairseq-train command
``recipes/wmt14_en_de/supernet.sh`` prints for 2 GPUs (DRY_RUN=1) runs on 2 CPU ranks over gloo with fairseq's
GPU wrapper, PyTorch's DistributedDataParallel (``--ddp-backend pytorch_ddp``, fairseq's default; the CPU rank
script drops only its device ids), trains a few updates and ends with identical parameters on both ranks; without
the recipe's ``--find-unused-parameters`` the first update stops with the one-line error naming it. The ranks are
started as fairseq-plugins-cpu-train starts them (torchrun), with tests/torchrun_rank_probe.py saving every
rank's final parameters."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fairseq_plugins
from fairseq_plugins.cli import cpu_distributed_train as launcher
from fairseq_plugins.cli.pipeline import fairseq_command, run
from fairseq_plugins.cli.synthetic import write_translation_task

ROOT = Path(__file__).resolve().parents[2]
PROBE = str(ROOT / "tests" / "torchrun_rank_probe.py")
HANG_GUARD_S = 600  # only a guard against a hung run, never a check of speed
MAX_UPDATE = 4
SPACE = """
shared_embed_dim: true
encoder: {embed_dim: [8, 16], layers: [1, 2], ffn_embed_dim: [8, 12], attention_heads: [2, 4], attention_kinds: [softmax, cosformer]}
decoder: {embed_dim: [8, 16], layers: [1, 2], ffn_embed_dim: [8, 12], attention_heads: [2, 4],
          attention_kinds: [softmax, cosformer], cross_attention_heads: [2, 4],
          cross_attention_kinds: [softmax, cosformer], encoder_decoder_connect: [1, 2]}
"""
# options of a GPU run that a CPU rank cannot take (the launcher sets the world size)
GPU_ONLY = {"--distributed-world-size": 1, "--fp16": 0}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("supernet_ddp")
    raw = write_translation_task(str(root / "raw"), splits={"train": 200, "valid": 20, "test": 20})
    for split in ("train", "valid", "test"):  # the recipe's languages (recipes/lib/wmt.sh: en-de)
        os.replace(f"{raw}/{split}.src", f"{raw}/{split}.en")
        os.replace(f"{raw}/{split}.tgt", f"{raw}/{split}.de")
    (root / "space.yaml").write_text(SPACE)
    run(fairseq_command("preprocess") + [
        "--source-lang", "en", "--target-lang", "de", "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
        "--testpref", f"{raw}/test", "--destdir", str(root / "data-bin"), "--joined-dictionary", "--workers", "1"])
    return root, str(root / "data-bin")


def env():
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environment.get("PYTHONPATH")) if p)
    environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), environment.get("PATH", "")])
    return environment


def recipe_command(root, data_bin, sampling):
    """The fairseq-train arguments supernet.sh gives a 2-GPU run, without the options only GPUs take."""
    overrides = dict(DRY_RUN="1", NUM_GPUS="2", DATA_BIN=data_bin, SEARCH_SPACE=str(root / "space.yaml"),
                     SAVE_DIR=str(root / f"checkpoints_{sampling}"), MAX_UPDATE=str(MAX_UPDATE), WARMUP="2",
                     MAX_TOKENS="300", TOKENS_PER_UPDATE="1200", SUPERNET_SAMPLING=sampling, SANDWICH_RANDOM="1",
                     DATA_WORKERS="0", PYTHON=sys.executable)
    printed = subprocess.run(["bash", str(ROOT / "recipes/wmt14_en_de/supernet.sh")], env={**env(), **overrides},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True).stdout
    command = shlex.split(printed.strip().splitlines()[-1])
    assert command[0] == "fairseq-train" and "--update-freq" in command, printed
    assert command[command.index("--distributed-world-size") + 1] == "2" and "--ddp-backend" not in command
    arguments, skip = [], 0
    for token in command[1:]:
        if skip:
            skip -= 1
        elif token in GPU_ONLY:
            skip = GPU_ONLY[token]
        else:
            arguments.append(token)
    return arguments


def run_two_ranks(arguments, dump, backend="pytorch_ddp"):
    command = launcher.torchrun_command(2, ["--dump-final-params", str(dump), "--", *arguments, "--ddp-backend", backend],
                                        rank_script=PROBE)
    return subprocess.run(command, env=launcher.rank_env(1, env()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("sampling", ["random", "sandwich"])
def test_the_recipe_trains_on_two_c10d_ranks_to_identical_parameters(data, sampling, tmp_path):
    root, data_bin = data
    arguments = recipe_command(root, data_bin, sampling)
    assert "--find-unused-parameters" in arguments
    result = run_two_ranks(arguments, tmp_path / "dump")
    assert result.returncode == 0, result.stderr[-6000:]
    ranks = [torch.load(tmp_path / "dump" / f"rank{r}.pt") for r in (0, 1)]
    assert [(d["rank"], d["world_size"], d["num_updates"]) for d in ranks] == [(0, 2, MAX_UPDATE), (1, 2, MAX_UPDATE)]
    first, second = ranks[0]["model"], ranks[1]["model"]
    assert first.keys() == second.keys() and any(key.startswith("weights.") for key in first)
    for key in first:
        assert torch.equal(first[key], second[key]), key
    if sampling == "sandwich":
        # all sub-networks of an update but the last under no_sync, one all-reduce: the same parameters as
        # fairseq's own all-reduce of the summed gradients (legacy_ddp; every container is used at every update
        # here, so its zeros for unused ones make no difference)
        # (its own --save-dir: it must not resume from the checkpoint of the run above)
        legacy = run_two_ranks(arguments + ["--save-dir", str(tmp_path / "legacy_checkpoints")], tmp_path / "legacy",
                               backend="legacy_ddp")
        assert legacy.returncode == 0, legacy.stderr[-6000:]
        reference = torch.load(tmp_path / "legacy" / "rank0.pt")["model"]
        for key in first:
            torch.testing.assert_close(first[key], reference[key], msg=key)


def test_pytorch_ddp_without_find_unused_parameters_is_refused(data, tmp_path):
    root, data_bin = data
    arguments = [a for a in recipe_command(root, data_bin, "random") if a != "--find-unused-parameters"]
    arguments += ["--save-dir", str(tmp_path / "checkpoints")]  # (a fresh start, not the other test's checkpoint)
    result = run_two_ranks(arguments, tmp_path / "dump")
    assert result.returncode != 0
    # (the check sees PyTorch's DistributedDataParallel: the ranks ran fairseq's GPU wrapper)
    assert "error: --find-unused-parameters: a supernet's sub-networks leave containers unused" in result.stderr, \
        result.stderr[-3000:]
    assert "Expected to have finished reduction" not in result.stderr


def test_fairseq_plugins_is_this_checkout():
    assert Path(fairseq_plugins.__file__).resolve().parents[1] == ROOT
