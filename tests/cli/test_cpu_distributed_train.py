"""fairseq-plugins-cpu-train: data-parallel fairseq-train on CPU, one process per rank.

The end-to-end tests start the launcher as a subprocess on a small synthetic
translation task with a shrunk mFormer. Parameters are compared across ranks
through ``--dump-final-params``: every rank saves its final model state_dict
(with the rank, world size and update count torch.distributed and fairseq
report), since fairseq itself writes checkpoints only from rank 0. A second
run of the same command with a higher ``--max-update`` resumes from the first
run's checkpoint on both ranks (fairseq loads it on rank 0 and broadcasts it).
"""
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import fairseq_plugins
from fairseq_plugins.cli import cpu_distributed_train as launcher
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))
REPO_ROOT = os.path.dirname(PLUGIN_DIR)
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


def launcher_env():
    # The launcher and its ranks import the same fairseq_plugins as this test.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_launcher(args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "fairseq_plugins.cli.cpu_distributed_train", *args],
        cwd=cwd, env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S,
    )


def output_tail(result, chars=6000):
    return f"--- stdout ---\n{result.stdout[-chars:]}\n--- stderr ---\n{result.stderr[-chars:]}"


def rank_pids(stderr):
    return {int(r): int(p) for r, p in re.findall(r"started rank (\d+) \(pid (\d+)\)", stderr)}


def _group_members(pgid):
    """Live (non-zombie) processes of a process group, from /proc."""
    if not os.path.isdir("/proc"):  # not Linux: zombies count as alive
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(entry))
    return members


def group_gone(pgid, wait_s=30):
    """Whether a rank's process group (the rank and its data-loader workers) is
    empty; waits a little for killed processes to disappear (not a speed check)."""
    deadline = time.monotonic() + wait_s
    while _group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def load_dumps(dump_dir):
    return [torch.load(dump_dir / f"rank{rank}.pt") for rank in range(2)]


@pytest.fixture(scope="module")
def two_rank_run(data_bin, tmp_path_factory):
    """A 2-rank run to MAX_UPDATE: (result, dump dir, save dir). Tests share
    it, so they must not write into its save dir (copy it first)."""
    root = tmp_path_factory.mktemp("two-ranks")
    dump_dir, save_dir = root / "final-params", root / "checkpoints"
    result = run_launcher(
        ["--nprocs", "2", "--dump-final-params", str(dump_dir), "--", *fairseq_args(data_bin, save_dir)], cwd=root
    )
    return result, dump_dir, save_dir


# ------------------------------------------------------------ end to end ---
def test_two_ranks_end_with_identical_parameters(two_rank_run):
    result, dump_dir, save_dir = two_rank_run
    assert result.returncode == 0, output_tail(result)
    assert "all 2 ranks finished" in result.stderr

    dumps = load_dumps(dump_dir)
    for rank, dump in enumerate(dumps):
        # A real 2-rank process group, not two independent runs, each at max_update.
        assert (dump["rank"], dump["world_size"], dump["num_updates"]) == (rank, 2, MAX_UPDATE)
    params0, params1 = dumps[0]["model"], dumps[1]["model"]
    assert params0.keys() == params1.keys()
    assert any(name.endswith("self_attn.q_proj.weight") for name in params0)
    differing = [name for name in params0 if not torch.equal(params0[name], params1[name])]
    assert not differing, f"parameters differ between rank 0 and rank 1: {differing}"

    # Rank 0's dump is the model fairseq saved, and it was trained.
    from fairseq import checkpoint_utils

    saved = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_last.pt"))
    assert saved["optimizer_history"][-1]["num_updates"] == MAX_UPDATE
    assert saved["model"].keys() == params0.keys()
    assert all(torch.equal(saved["model"][name], params0[name]) for name in params0)

    # The loss was logged (by rank 0: fairseq logs only warnings on other ranks) up to the last update.
    assert re.search(rf"^\[rank 0\] .*\| train_inner \|.*loss=[0-9.]+.*num_updates={MAX_UPDATE}\b", result.stdout, re.M)
    assert re.search(r"^\[rank 1\] ", result.stdout + result.stderr, re.M)


def test_two_ranks_resume_from_their_checkpoint(data_bin, two_rank_run, tmp_path):
    # The same command with a higher --max-update. Rank 0 loads checkpoint_last.pt
    # and fairseq broadcasts the loaded state (config as an omegaconf DictConfig)
    # to rank 1, which unpickles it with weights-only torch.load.
    first, first_dump_dir, first_save_dir = two_rank_run
    assert first.returncode == 0, output_tail(first)
    save_dir, dump_dir = tmp_path / "checkpoints", tmp_path / "final-params"
    shutil.copytree(first_save_dir, save_dir)
    result = run_launcher(
        ["--nprocs", "2", "--dump-final-params", str(dump_dir), "--",
         *fairseq_args(data_bin, save_dir, max_update=RESUMED_MAX_UPDATE)],
        cwd=tmp_path,
    )
    assert result.returncode == 0, output_tail(result)
    assert "all 2 ranks finished" in result.stderr

    # Rank 0 loaded the first run's last checkpoint (fairseq logs only warnings on other ranks) ...
    loaded = rf"^\[rank 0\] .*Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ {MAX_UPDATE} updates\)"
    assert re.search(loaded, result.stdout, re.M), output_tail(result)
    # ... and training went on from there, not from scratch.
    logged = re.findall(r"^\[rank 0\] .*\| train_inner \|.*\bnum_updates=(\d+)", result.stdout, re.M)
    assert [int(n) for n in logged] == list(range(MAX_UPDATE + 1, RESUMED_MAX_UPDATE + 1))

    dumps = load_dumps(dump_dir)
    for rank, dump in enumerate(dumps):
        # Rank 1 made only RESUMED_MAX_UPDATE - MAX_UPDATE updates in this run:
        # its count (like its weights and optimizer state) came from the broadcast checkpoint.
        assert (dump["rank"], dump["world_size"], dump["num_updates"]) == (rank, 2, RESUMED_MAX_UPDATE)
    params0, params1 = dumps[0]["model"], dumps[1]["model"]
    assert params0.keys() == params1.keys()
    differing = [name for name in params0 if not torch.equal(params0[name], params1[name])]
    assert not differing, f"parameters differ between rank 0 and rank 1 after resuming: {differing}"

    # The resumed run trained (beyond the first run's weights), and fairseq saved rank 0's model.
    first_params = load_dumps(first_dump_dir)[0]["model"]
    assert any(not torch.equal(first_params[name], params0[name]) for name in params0)
    from fairseq import checkpoint_utils

    saved = checkpoint_utils.load_checkpoint_to_cpu(str(save_dir / "checkpoint_last.pt"))
    assert saved["optimizer_history"][-1]["num_updates"] == RESUMED_MAX_UPDATE
    assert all(torch.equal(saved["model"][name], params0[name]) for name in params0)


def test_broadcast_checkpoint_needs_exactly_the_allowed_globals(two_rank_run):
    """What a resuming rank 0 broadcasts names exactly fairseq_plugins' safe
    globals: every one is needed, and nothing else is (weights-only loading refuses the rest)."""
    from fairseq import checkpoint_utils
    from fairseq.distributed.utils import _split_tensors_from_obj

    from fairseq_plugins.checkpoint_compat import BROADCAST_GLOBALS, CHECKPOINT_GLOBALS

    first, _, first_save_dir = two_rank_run
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


def test_failed_rank_stops_the_others(data_bin, tmp_path):
    # Only rank 0 creates --save-dir: under a regular file it fails, after the
    # ranks have met. Rank 1 then goes on (or fails on the lost connection);
    # either way the launcher must end it and name rank 0.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_launcher(["--nprocs", "2", "--", *fairseq_args(data_bin, blocker / "checkpoints")], cwd=tmp_path)
    assert result.returncode == 1, output_tail(result)
    assert re.search(r"error: rank 0 failed with exit code 1\b", result.stderr), output_tail(result)
    pids = rank_pids(result.stderr)
    assert sorted(pids) == [0, 1]
    assert all(group_gone(pid) for pid in pids.values())


def test_ctrl_c_stops_every_rank(data_bin, tmp_path):
    # Run the launcher as a terminal would: with Python's Ctrl-C handler even
    # if this test runs where SIGINT is ignored (e.g. a background job).
    bootstrap = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from fairseq_plugins.cli.cpu_distributed_train import main; sys.exit(main())"
    )
    args = ["--nprocs", "2", "--", *fairseq_args(data_bin, tmp_path / "checkpoints", max_update=10**6)]
    proc = subprocess.Popen(
        [sys.executable, "-c", bootstrap, *args],
        cwd=tmp_path, env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    stdout, stderr = [], []
    training = threading.Event()

    def read(stream, lines, marker=None):
        for line in stream:
            lines.append(line)
            if marker and marker in line:
                training.set()

    readers = [
        threading.Thread(target=read, args=(proc.stdout, stdout, "| train_inner |"), daemon=True),
        threading.Thread(target=read, args=(proc.stderr, stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not training.is_set() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert training.is_set(), "training never started:\n" + "".join(stdout[-50:] + stderr[-50:])
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    err = "".join(stderr)
    assert returncode == 130, err[-4000:]
    assert "interrupted (Ctrl-C): stopping all ranks" in err
    pids = rank_pids(err)
    assert sorted(pids) == [0, 1]
    assert all(group_gone(pid) for pid in pids.values())


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
        launcher.main(["--nprocs", "2", "--", "data-bin", "--arch", "mformer_iwslt_de_en", *given])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "fairseq-plugins-cpu-train: error:" in err


def test_needs_the_separator_and_valid_counts(capsys):
    for argv in (["--nprocs", "2", "data-bin"], ["--nprocs", "0", "--", "data-bin"], ["--nprocs", "2", "--"]):
        with pytest.raises(SystemExit) as exit_info:
            launcher.main(argv)
        assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("error:") == 3


def test_rank_command_appends_the_launcher_flags_once():
    user = ["data-bin", "--arch", "mformer_iwslt_de_en", "--cpu", "--ddp-backend", "no_c10d"]
    command = launcher.rank_command(1, 2, 12345, user, dump_dir="/tmp/dump")
    assert command[:2] == [sys.executable, "-c"]
    separator = command.index("--")
    assert command[3:separator] == ["--dump-final-params", "/tmp/dump"]
    fairseq = command[separator + 1:]
    assert fairseq[: len(user)] == user
    added = fairseq[len(user):]
    pairs = dict(zip(added[1::2], added[2::2]))  # after the --distributed-no-spawn switch
    assert added[:1] == ["--distributed-no-spawn"]
    assert pairs == {
        "--distributed-backend": "gloo",
        "--distributed-world-size": "2",
        "--distributed-init-method": "tcp://127.0.0.1:12345",
        "--distributed-rank": "1",
        "--device-id": "0",
    }
    assert fairseq.count("--cpu") == 1 and fairseq.count("--ddp-backend") == 1
