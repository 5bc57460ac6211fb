"""fairseq-plugins-cpu-train: data-parallel fairseq-train on CPU, its ranks started by torchrun.

On a small synthetic translation task with a shrunk mFormer: a 2-rank run through the launcher trains and saves;
the same command with a higher ``--max-update`` resumes from its checkpoint_last.pt on both ranks (fairseq loads
it on rank 0 and broadcasts it), which tests/torchrun_rank_probe.py checks by saving every rank's final
parameters (fairseq writes checkpoints only from rank 0); a rank that fails stops the other, and torchrun exits
non-zero with the failing rank's error shown.
"""
import io
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

import fairseq_plugins
from fairseq_plugins.cli import _rank_main
from fairseq_plugins.cli import cpu_distributed_train as launcher
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))
REPO_ROOT = os.path.dirname(PLUGIN_DIR)
PROBE = os.path.join(REPO_ROOT, "tests", "torchrun_rank_probe.py")
# Only a guard against a hung run, never a check of speed.
HANG_GUARD_S = 600
MAX_UPDATE = 10
# The resumed run goes on from MAX_UPDATE to here (mid-epoch: 4 updates per epoch with 2 ranks).
RESUMED_MAX_UPDATE = MAX_UPDATE + 4


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("translation")
    raw = write_translation_task(str(root / "raw"), splits={"train": 400, "valid": 50, "test": 50})
    return binarize_translation(raw, str(root / "data-bin"))


def fairseq_args(data_bin, save_dir, max_update=MAX_UPDATE):
    """A shrunk mformer_iwslt_de_en (6 encoder layers, as its per-layer kind list has 6 entries)."""
    return [
        data_bin, "--user-dir", PLUGIN_DIR, "--task", "translation", "--arch", "mformer_iwslt_de_en",
        "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--decoder-layers", "2",
        "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", str(max_update),
        "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1",
        "--cpu",
    ]


def subprocess_env(**extra):
    # The launcher and its ranks import the same fairseq_plugins as this test.
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    return env


def run(command, cwd, env=None):
    return subprocess.run(command, cwd=cwd, env=env or subprocess_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S)


def run_launcher(args, cwd):
    return run([sys.executable, "-m", "fairseq_plugins.cli.cpu_distributed_train", "-n", "2", "--threads-per-rank", "1",
                "--", *args], cwd)


def run_probe(probe_args, args, cwd):
    """torchrun as the launcher starts it, with the test's probe as the ranks' script (it runs _rank_main.py)."""
    command = launcher.torchrun_command(2, [*probe_args, "--", *args], rank_script=PROBE)
    return run(command, cwd, env=launcher.rank_env(1, subprocess_env()))


def output_tail(result, chars=6000):
    return f"--- stdout ---\n{result.stdout[-chars:]}\n--- stderr ---\n{result.stderr[-chars:]}"


def gone(pid, wait_s=30):
    """Whether a process has ended (a zombie counts as ended); waits a little, never a check of speed."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def first_run(data_bin, tmp_path_factory):
    """A 2-rank run through the launcher to MAX_UPDATE: (result, save dir). Tests share it, so they must not
    write into its save dir (copy it first)."""
    root = tmp_path_factory.mktemp("two-ranks")
    save_dir = root / "checkpoints"
    return run_launcher(fairseq_args(data_bin, save_dir), cwd=root), save_dir


# ------------------------------------------------------------ end to end ---
def test_two_ranks_train_through_torchrun(first_run):
    result, save_dir = first_run
    assert result.returncode == 0, output_tail(result)
    out = result.stdout + result.stderr
    # one process group of two ranks that met through torchrun, not two runs of one
    assert re.search(r"distributed init \(rank 1\): env://", out), output_tail(result)
    assert re.search(r"\| train_inner \| epoch 001: +4 / 4 .*num_updates=4\b", out), output_tail(result)
    # the loss was logged (by rank 0: fairseq logs only warnings on other ranks) up to the last update, once
    logged = re.findall(r"\| train_inner \|.*loss=[0-9.]+.*\bnum_updates=(\d+)", out)
    assert [int(n) for n in logged] == list(range(1, MAX_UPDATE + 1))
    from fairseq import checkpoint_utils

    saved = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_last.pt"))
    assert saved["optimizer_history"][-1]["num_updates"] == MAX_UPDATE
    assert saved["cfg"].distributed_training.distributed_world_size == 2
    assert saved["cfg"].distributed_training.ddp_backend == "legacy_ddp"


def test_two_ranks_resume_from_their_checkpoint_to_identical_parameters(data_bin, first_run, tmp_path):
    # The same command with a higher --max-update. Rank 0 loads checkpoint_last.pt and fairseq broadcasts the
    # loaded state (config as an omegaconf DictConfig) to rank 1, which unpickles it with weights-only torch.load.
    first, first_save_dir = first_run
    assert first.returncode == 0, output_tail(first)
    save_dir, dump_dir = tmp_path / "checkpoints", tmp_path / "final-params"
    shutil.copytree(first_save_dir, save_dir)
    from fairseq import checkpoint_utils

    first_params = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_last.pt"))["model"]
    result = run_probe(["--dump-final-params", str(dump_dir)],
                       fairseq_args(data_bin, save_dir, max_update=RESUMED_MAX_UPDATE), cwd=tmp_path)
    assert result.returncode == 0, output_tail(result)
    out = result.stdout + result.stderr

    # Rank 0 loaded the first run's last checkpoint (fairseq logs only warnings on other ranks) ...
    assert re.search(rf"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ {MAX_UPDATE} updates\)", out), \
        output_tail(result)
    # ... and training went on from there, not from scratch.
    logged = re.findall(r"\| train_inner \|.*\bnum_updates=(\d+)", out)
    assert [int(n) for n in logged] == list(range(MAX_UPDATE + 1, RESUMED_MAX_UPDATE + 1))

    dumps = [torch.load(dump_dir / f"rank{rank}.pt") for rank in range(2)]
    for rank, dump in enumerate(dumps):
        # A real 2-rank process group, each rank at RESUMED_MAX_UPDATE: rank 1 made only the last 4 updates in
        # this run, its count (like its weights and optimizer state) came from the broadcast checkpoint.
        assert (dump["rank"], dump["world_size"], dump["num_updates"]) == (rank, 2, RESUMED_MAX_UPDATE)
    params0, params1 = dumps[0]["model"], dumps[1]["model"]
    assert params0.keys() == params1.keys() == first_params.keys()
    assert any(name.endswith("self_attn.q_proj.weight") for name in params0)
    differing = [name for name in params0 if not torch.equal(params0[name], params1[name])]
    assert not differing, f"parameters differ between rank 0 and rank 1: {differing}"
    # The resumed run trained beyond the first run's weights, and fairseq saved rank 0's model.
    assert any(not torch.equal(first_params[name], params0[name]) for name in params0)
    saved = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_last.pt"))
    assert saved["optimizer_history"][-1]["num_updates"] == RESUMED_MAX_UPDATE
    assert all(torch.equal(saved["model"][name], params0[name]) for name in params0)


def test_broadcast_checkpoint_needs_exactly_the_allowed_globals(first_run):
    """What a resuming rank 0 broadcasts names exactly fairseq_plugins' safe
    globals: every one is needed, and nothing else is (weights-only loading refuses the rest)."""
    from fairseq import checkpoint_utils
    from fairseq.distributed.utils import _split_tensors_from_obj

    from fairseq_plugins.checkpoint_compat import BROADCAST_GLOBALS, CHECKPOINT_GLOBALS

    first, first_save_dir = first_run
    assert first.returncode == 0, output_tail(first)
    # As fairseq's Trainer.load_checkpoint and broadcast_object do on rank 0:
    # load, swap the tensors for placeholders, torch.save the rest.
    state = checkpoint_utils.load_checkpoint_to_cpu(str(first_save_dir / "checkpoint_last.pt"))
    tensors = []
    buffer = io.BytesIO()
    torch.save(_split_tensors_from_obj(state, tensors), buffer)
    assert tensors and any(name.endswith("self_attn.q_proj.weight") for name in state["model"])

    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        needed = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(buffer.getvalue()))
        with pytest.raises(Exception, match="Unsupported global"):
            torch.load(io.BytesIO(buffer.getvalue()))
    finally:
        torch.serialization.add_safe_globals(registered)
    # (EVAL_BLEU_GLOBALS: only checkpoints of --eval-bleu runs hold numpy arrays)
    assert sorted(needed) == sorted(f"{c.__module__}.{c.__qualname__}" for c in CHECKPOINT_GLOBALS + BROADCAST_GLOBALS)
    received = torch.load(io.BytesIO(buffer.getvalue()))  # weights_only=True, the torch >= 2.6 default
    assert received["cfg"].common.seed == state["cfg"].common.seed


def test_a_failing_rank_stops_the_other(data_bin, tmp_path):
    # Rank 1 fails after 2 updates of a run that would go on for a million: rank 0 waits for it in the next
    # all-reduce (or fails on the lost connection), and torchrun must end it.
    result = run_probe(["--fail-rank", "1", "--fail-after-updates", "2"],
                       fairseq_args(data_bin, tmp_path / "checkpoints", max_update=10**6), cwd=tmp_path)
    assert result.returncode != 0, output_tail(result)
    # the failing rank's own error, then torchrun's report naming it
    assert "RuntimeError: injected failure on rank 1 after 2 updates" in result.stderr, output_tail(result)
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)\s+exitcode\s*: 1\b", result.stderr), output_tail(result)
    pids = {int(r): int(p) for r, p in re.findall(r"^probe: rank (\d) pid (\d+)$", result.stderr, re.M)}
    assert sorted(pids) == [0, 1], output_tail(result)  # (seen once without either line: what did torchrun print?)
    assert all(gone(pid) for pid in pids.values())


def test_the_launcher_exits_with_the_failing_rank_error(data_bin, tmp_path):
    # Only rank 0 creates --save-dir: under a regular file it fails, after the ranks have met.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_launcher(fairseq_args(data_bin, blocker / "checkpoints"), cwd=tmp_path)
    assert result.returncode != 0, output_tail(result)
    assert re.search(r"(NotADirectoryError|FileExistsError).*a-file", result.stderr), output_tail(result)
    assert re.search(r"rank\s*: 0 \(local_rank: 0\)\s+exitcode\s*: 1\b", result.stderr), output_tail(result)


# ---------------------------------------------------------- command line ---
@pytest.mark.parametrize(
    "given, named",
    [
        (["--distributed-world-size", "4"], "--distributed-world-size"),
        (["--distributed-rank=1"], "--distributed-rank"),
        (["--distributed-init-method", "tcp://127.0.0.1:1"], "--distributed-init-method"),
        (["--distributed-port", "5000"], "--distributed-port"),
        (["--device-id", "1"], "--device-id"),
        (["--ddp-backend", "fully_sharded"], "--ddp-backend"),
        (["--ddp-backend=slowmo"], "--ddp-backend"),
        (["--distributed-backend", "nccl"], "--distributed-backend"),
    ],
)
def test_refuses_options_the_launcher_sets(given, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        launcher.main(["-n", "2", "--", "data-bin", "--arch", "mformer_iwslt_de_en", *given])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert named in err and f"{launcher.PROG}: error:" in err


def test_needs_the_separator_and_valid_counts(capsys):
    for argv, message in ((["-n", "2", "data-bin"], "put the fairseq-train arguments after '--'"),
                          (["-n", "0", "--", "data-bin"], "-n/--nprocs must be >= 1, got 0"),
                          (["--nprocs", "2", "--threads-per-rank", "0", "--", "data-bin"], "--threads-per-rank must be >= 1"),
                          (["-n", "2", "--"], "no fairseq-train arguments after '--'")):
        with pytest.raises(SystemExit) as exit_info:
            launcher.main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"{launcher.PROG}: error: {message}"), err


def test_the_launcher_runs_torchrun_with_the_rank_script():
    assert launcher.torchrun_command(3, ["data-bin", "--arch", "x"]) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
        os.path.join(PLUGIN_DIR, "cli", "_rank_main.py"), "data-bin", "--arch", "x"]
    env = launcher.rank_env(5, {"PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "5"


def test_the_rank_appends_its_options_once():
    torchrun_env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    user = ["data-bin", "--arch", "mformer_iwslt_de_en", "--cpu", "--ddp-backend", "no_c10d"]
    added = _rank_main.rank_flags(user, torchrun_env)
    assert added[:1] == ["--distributed-no-spawn"]
    assert dict(zip(added[1::2], added[2::2])) == {
        "--distributed-backend": "gloo", "--distributed-init-method": "env://", "--distributed-world-size": "2",
        "--distributed-rank": "1", "--device-id": "0"}
    assert "--ddp-backend" in _rank_main.rank_flags(["data-bin"], torchrun_env)
    with pytest.raises(SystemExit, match="RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set: run by torchrun"):
        _rank_main.rank_flags(user, {})


def test_a_rank_that_cannot_follow_torchrun_says_so(monkeypatch, capsys):
    """The rank asks Linux for SIGTERM when torchrun dies (prctl); where that is refused it trains on, and says
    that killing torchrun alone would leave it running."""
    import ctypes

    class RefusingLibc:
        def prctl(self, *args):
            ctypes.set_errno(1)  # EPERM
            return -1

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda *args, **kwargs: RefusingLibc())
    _rank_main.exit_with_launcher()
    err = capsys.readouterr().err
    assert f"cannot ask Linux to stop this rank when torchrun exits (prctl: {os.strerror(1)})" in err
    assert f"kill rank process {os.getpid()} too" in err and err.count("\n") == 1
