"""One rank of ``fairseq-plugins-cpu-train``: fairseq-train, optionally saving
the final model state of this rank.

    python -c "import runpy; runpy.run_path('.../_rank_main.py', run_name='__main__')" \\
        [--dump-final-params DIR] -- <fairseq-train arguments>

The launcher runs this file by path, so it imports nothing from
fairseq_plugins: the rank loads the package only through ``--user-dir``, as
stock fairseq-train does.

Without ``--dump-final-params`` this is exactly ``fairseq_cli.train.cli_main()``.

With it, every rank writes ``DIR/rank{R}.pt`` = {"rank", "world_size",
"num_updates", "model": the model's state_dict on CPU} after training. fairseq
saves checkpoints only on rank 0 and keeps its Trainer local to
``fairseq_cli.train.main``, so there is no public hook to reach the other
ranks' models. The least invasive way found: replace two names in the
``fairseq_cli.train`` module, nothing inside fairseq's training code,

* ``Trainer`` by a subclass that only records the instance ``main`` builds;
* ``main`` by a function that calls the original ``main`` and then saves the
  recorded trainer's model. ``cli_main`` looks ``main`` up when it runs and
  hands it to ``distributed_utils.call_main``, so the dump runs inside the
  rank's process, after training and before fairseq's final barrier, with the
  process group still up (its rank and world size are recorded as seen by
  torch.distributed, so a caller can tell a real data-parallel run from N
  independent ones).

If fairseq ever renames these, this fails loudly instead of dumping nothing.

With ``--ddp-backend c10d`` (or ``pytorch_ddp``) fairseq wraps the model in PyTorch's
DistributedDataParallel with ``device_ids=[--device-id]``, which DistributedDataParallel refuses for a
module on the CPU. The rank replaces the name ``DistributedDataParallel`` in
``fairseq.models.distributed_fairseq_model`` by a subclass that drops the device ids (and nothing else),
so that the CPU run uses the wrapper, the options and the reducer of a GPU run.
"""
import os
import sys
from typing import List, Optional, Tuple

LAUNCHER_PID_ENV = "FAIRSEQ_PLUGINS_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1


def parse_argv(argv: List[str]) -> Tuple[Optional[str], List[str]]:
    if "--" not in argv:
        raise SystemExit("_rank_main: usage: [--dump-final-params DIR] -- <fairseq-train arguments>")
    i = argv.index("--")
    own, fairseq_args = argv[:i], argv[i + 1:]
    dump_dir = None
    if own:
        if len(own) != 2 or own[0] != "--dump-final-params":
            raise SystemExit(f"_rank_main: unknown arguments {own}")
        dump_dir = own[1]
    return dump_dir, fairseq_args


def exit_with_launcher() -> None:
    """Linux: get SIGTERM when the launcher dies, even by SIGKILL (ranks run in
    their own sessions, so nothing else would stop them)."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != int(launcher):  # the launcher died before prctl
        sys.exit("_rank_main: the launcher has exited")


def dump_final_params(trainer, dump_dir: str) -> str:
    import torch
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    payload = {
        "rank": rank,
        "world_size": dist.get_world_size() if distributed else 1,
        "num_updates": trainer.get_num_updates(),
        # get_model(): the model without the data-parallel wrapper.
        "model": {name: t.detach().cpu().clone() for name, t in trainer.get_model().state_dict().items()},
    }
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, f"rank{rank}.pt")
    torch.save(payload, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def install_dump(fairseq_train, dump_dir: str) -> None:
    """Make ``fairseq_train.cli_main()`` save the final model state of this rank (see the module docstring)."""
    for name in ("Trainer", "main", "cli_main"):
        if not hasattr(fairseq_train, name):
            raise RuntimeError(f"--dump-final-params: fairseq_cli.train has no {name!r} (unsupported fairseq version)")
    trainers = []
    base_trainer, train_main = fairseq_train.Trainer, fairseq_train.main

    class RecordingTrainer(base_trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

    RecordingTrainer.__name__ = RecordingTrainer.__qualname__ = base_trainer.__name__

    def main_then_dump(cfg, **kwargs):
        train_main(cfg, **kwargs)
        if len(trainers) != 1:
            raise RuntimeError(
                f"--dump-final-params: expected fairseq-train to build one Trainer, saw {len(trainers)} "
                "(model parallelism is not supported)"
            )
        path = dump_final_params(trainers[0], dump_dir)
        print(f"_rank_main: saved the final model state to {path}", flush=True)

    fairseq_train.Trainer = RecordingTrainer
    fairseq_train.main = main_then_dump


def ddp_backend(fairseq_args: List[str]) -> Optional[str]:
    """The value of --ddp-backend in the fairseq-train arguments (None when absent)."""
    for i, token in enumerate(fairseq_args):
        name, has_value, value = token.partition("=")
        if name == "--ddp-backend":
            return value if has_value else (fairseq_args[i + 1] if i + 1 < len(fairseq_args) else None)
    return None


def allow_c10d_on_cpu() -> None:
    """fairseq's c10d wrapper on CPU modules: DistributedDataParallel without the device ids fairseq passes
    (see the module docstring)."""
    import fairseq.models.distributed_fairseq_model as wrapping

    if not hasattr(wrapping, "DistributedDataParallel"):
        raise RuntimeError("--ddp-backend c10d: fairseq.models.distributed_fairseq_model has no DistributedDataParallel "
                           "(unsupported fairseq version)")
    base = wrapping.DistributedDataParallel

    class CpuDistributedDataParallel(base):
        def __init__(self, module, device_ids=None, output_device=None, **kwargs):
            super().__init__(module, **kwargs)  # (a CPU module takes no device ids)

    CpuDistributedDataParallel.__name__ = CpuDistributedDataParallel.__qualname__ = base.__name__
    wrapping.DistributedDataParallel = CpuDistributedDataParallel


def main(argv: Optional[List[str]] = None) -> None:
    dump_dir, fairseq_args = parse_argv(sys.argv[1:] if argv is None else list(argv))
    exit_with_launcher()
    sys.argv = ["fairseq-train", *fairseq_args]  # cli_main parses sys.argv
    import fairseq_cli.train as fairseq_train

    if dump_dir is not None:
        install_dump(fairseq_train, dump_dir)
    if ddp_backend(fairseq_args) in ("c10d", "pytorch_ddp"):
        allow_c10d_on_cpu()
    fairseq_train.cli_main()


if __name__ == "__main__":
    main()
