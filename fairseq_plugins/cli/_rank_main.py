"""One rank of ``fairseq-plugins-cpu-train``: torchrun's training script, fairseq-train told its rank.

    torchrun --standalone --nproc-per-node N .../_rank_main.py <fairseq-train arguments>

Stock fairseq 0.12 cannot be torchrun's script on a machine without CUDA: with its default
``--distributed-world-size`` (the CUDA device count, at least 1) every process trains alone and all of them
write the same checkpoints; with ``--distributed-world-size N`` it stops at ``rank %
torch.cuda.device_count()`` (``_infer_torch_distributed_launch_init`` in fairseq/distributed/utils.py). Given
an init method, fairseq skips that inference, so this script appends, from torchrun's ``RANK`` and
``WORLD_SIZE``::

    --distributed-init-method env:// --distributed-world-size WORLD_SIZE --distributed-rank RANK
    --distributed-no-spawn --device-id 0 --cpu --distributed-backend gloo [--ddp-backend legacy_ddp]

(``--ddp-backend`` only when absent: fairseq's own gradient all-reduce). ``--ddp-backend c10d`` (or
``pytorch_ddp``) runs fairseq's GPU wrapper, PyTorch's DistributedDataParallel, with every option fairseq gives
it but ``device_ids=[--device-id]``, which DistributedDataParallel refuses for a CPU module: this script
replaces the name ``DistributedDataParallel`` in ``fairseq.models.distributed_fairseq_model`` by a subclass
that drops the device ids (and nothing else).

torchrun runs this file by path, and it imports nothing from fairseq_plugins: the rank loads the package only
through ``--user-dir``, as stock fairseq-train does (a --user-dir naming another copy of fairseq_plugins would
otherwise fail as "not globally unique").
"""
import os
import sys
from typing import Dict, List, Optional

PR_SET_PDEATHSIG = 1
# Options the rank sets to one value unless given (the launcher refuses other values).
DEFAULTS = {"--distributed-backend": "gloo", "--ddp-backend": "legacy_ddp"}
SWITCHES = ("--cpu", "--distributed-no-spawn")


def option_value(fairseq_args: List[str], name: str) -> Optional[str]:
    """The value of an option in fairseq-train arguments (``--name value`` or ``--name=value``; None when absent)."""
    for i, token in enumerate(fairseq_args):
        option, has_value, value = token.partition("=")
        if option == name:
            return value if has_value else (fairseq_args[i + 1] if i + 1 < len(fairseq_args) else None)
    return None


def rank_flags(fairseq_args: List[str], environ: Dict[str, str]) -> List[str]:
    """The options appended to the user's fairseq-train arguments in the rank torchrun started."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in environ]
    if missing:
        raise SystemExit(f"_rank_main: {', '.join(missing)} not set: run by torchrun (fairseq-plugins-cpu-train)")
    present = {token.partition("=")[0] for token in fairseq_args if token.startswith("--")}
    flags = [switch for switch in SWITCHES if switch not in present]
    for name, value in DEFAULTS.items():
        if name not in present:
            flags += [name, value]
    return flags + ["--distributed-init-method", "env://", "--distributed-world-size", environ["WORLD_SIZE"],
                    "--distributed-rank", environ["RANK"], "--device-id", "0"]


def exit_with_launcher() -> None:
    """Linux: SIGTERM when torchrun dies, even by SIGKILL: torchrun starts every rank in a session of its own,
    so nothing else would stop it."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return  # not started by torchrun
    launcher = os.getppid()
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        failed = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0
        reason = os.strerror(ctypes.get_errno()) if failed else ""
    except (OSError, AttributeError) as error:
        failed, reason = True, str(error)
    if failed:  # the rank still trains; say that killing torchrun alone would leave it running
        print(f"_rank_main: warning: cannot ask Linux to stop this rank when torchrun exits (prctl: {reason}): "
              f"if you kill torchrun, kill rank process {os.getpid()} too", file=sys.stderr)
        return
    if launcher == 1 or os.getppid() != launcher:  # torchrun died before prctl
        sys.exit("_rank_main: torchrun has exited")


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
    exit_with_launcher()
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run by path: this folder's modules must not shadow top-level names
    fairseq_args = sys.argv[1:] if argv is None else list(argv)
    fairseq_args += rank_flags(fairseq_args, dict(os.environ))
    sys.argv = ["fairseq-train", *fairseq_args]  # cli_main parses sys.argv
    import fairseq_cli.train

    if option_value(fairseq_args, "--ddp-backend") in ("c10d", "pytorch_ddp"):
        allow_c10d_on_cpu()
    fairseq_cli.train.cli_main()


if __name__ == "__main__":
    main()
