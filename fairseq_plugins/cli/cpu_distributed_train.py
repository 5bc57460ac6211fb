"""``fairseq-plugins-cpu-train``: data-parallel fairseq-train on CPU, its ranks started by torchrun.

    fairseq-plugins-cpu-train -n N [--threads-per-rank K] -- <fairseq-train arguments>

checks the arguments (one ``error:`` line, exit 2, before anything starts) and becomes::

    OMP_NUM_THREADS=K MKL_NUM_THREADS=K GLOO_SOCKET_IFNAME=lo \\
    python -m torch.distributed.run --standalone --nproc-per-node N fairseq_plugins/cli/_rank_main.py <arguments>

(K: usable cores // N, at least 1). torchrun (``python -m torch.distributed.run``) picks a free port for the
rendezvous, starts the N ranks, stops all of them when one fails (its report names the failing rank and exit
code; the rank's own error is on stderr above it) or on Ctrl-C/SIGTERM, and exits non-zero then. Stock
fairseq-train cannot be torchrun's script on a CPU-only machine; ``_rank_main.py`` says why and which options
it appends for every rank (``--cpu --distributed-backend gloo --ddp-backend legacy_ddp``, the rank, the world
size, ``env://``). Those options belong to the launcher: passing one of them is refused with an error naming it
(the agreeing ``--cpu``, ``--distributed-no-spawn``, ``--distributed-backend gloo`` and ``--ddp-backend``
``legacy_ddp``/``no_c10d``/``c10d``/``pytorch_ddp`` are accepted). As in any fairseq run, only rank 0 writes
checkpoints, and running the same command again resumes from ``checkpoint_last.pt``.
"""
import argparse
import os
import socket
import sys
from typing import Dict, List, Optional, Sequence

PROG = "fairseq-plugins-cpu-train"
RANK_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank_main.py")

# Options the launcher sets for every rank and the user may not pass.
OWNED_OPTIONS: Dict[str, str] = {
    "--distributed-world-size": "it is -n/--nprocs",
    "--distributed-rank": "torchrun numbers the ranks",
    "--distributed-init-method": "the ranks meet through torchrun (env://)",
    "--distributed-port": "torchrun picks a free port",
    "--distributed-num-procs": "it is -n/--nprocs",
    "--nprocs-per-node": "it is -n/--nprocs",
    "--device-id": "every CPU rank uses device 0",
    "--local_rank": "every CPU rank uses device 0",
}
# Options the launcher sets to one value; the user may pass only these values (the first is its default).
FIXED_OPTIONS: Dict[str, Sequence[str]] = {
    "--distributed-backend": ("gloo",),  # the torch.distributed backend that runs on CPU
    "--ddp-backend": ("legacy_ddp", "no_c10d", "c10d", "pytorch_ddp"),  # see _rank_main.py for c10d on CPU
}
SWITCHES = ("--cpu", "--distributed-no-spawn")


class LauncherError(ValueError):
    """Bad launcher usage; the message is for the user."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, usage=f"{PROG} -n N [--threads-per-rank K] -- <fairseq-train arguments>",
        description="Data-parallel fairseq-train on CPU: N ranks over gloo, started by torchrun.",
        epilog="Everything after '--' goes to fairseq-train; every rank adds --cpu --distributed-backend gloo "
        "--ddp-backend legacy_ddp --distributed-init-method env:// --distributed-world-size N --distributed-rank R "
        "--distributed-no-spawn --device-id 0. Do not pass those (except the agreeing --cpu, --distributed-no-spawn, "
        "--distributed-backend gloo, and --ddp-backend legacy_ddp, no_c10d, c10d or pytorch_ddp).",
        allow_abbrev=False,
    )
    parser.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks (processes)")
    parser.add_argument("--threads-per-rank", type=int, default=None,
                        help="OMP_NUM_THREADS of every rank (default: usable cores // nprocs, at least 1)")
    return parser


def check_fairseq_args(fairseq_args: Sequence[str]) -> None:
    """Refuse options that the launcher sets (fairseq's parser has no abbreviations, so exact names suffice)."""
    args = list(fairseq_args)
    if not args:
        raise LauncherError("no fairseq-train arguments after '--'")
    for i, token in enumerate(args):
        if not token.startswith("--"):
            continue
        name, has_value, value = token.partition("=")
        if name in OWNED_OPTIONS:
            raise LauncherError(f"do not pass {name} to fairseq-train: the launcher sets it ({OWNED_OPTIONS[name]})")
        if name in FIXED_OPTIONS:
            allowed = FIXED_OPTIONS[name]
            if not has_value:
                value = args[i + 1] if i + 1 < len(args) else ""
            if value not in allowed:
                raise LauncherError(f"{name} {value or '(no value)'}: expected {' or '.join(allowed)} on CPU ranks")
        if name in SWITCHES and has_value:
            raise LauncherError(f"{token}: {name} takes no value")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def rank_env(threads: int, environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)  # (torchrun would set 1)
    if "GLOO_SOCKET_IFNAME" not in env:
        # Every rank is on this machine: keep gloo on the loopback interface (it otherwise uses the address
        # the hostname resolves to, which may be unreachable). Linux: lo, BSD/macOS: lo0.
        try:
            loopback = next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
        except (AttributeError, OSError):
            loopback = None
        if loopback:
            env["GLOO_SOCKET_IFNAME"] = loopback
    return env


def torchrun_command(nprocs: int, fairseq_args: Sequence[str], rank_script: str = RANK_MAIN) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nprocs),
            rank_script, *fairseq_args]


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            parser.print_help()
            return 0
        parser.error("put the fairseq-train arguments after '--' (e.g. ... -n 2 -- data-bin --arch ...)")
    i = argv.index("--")
    args, fairseq_args = parser.parse_args(argv[:i]), argv[i + 1:]
    try:
        if args.nprocs < 1:
            raise LauncherError(f"-n/--nprocs must be >= 1, got {args.nprocs}")
        if args.threads_per_rank is not None and args.threads_per_rank < 1:
            raise LauncherError(f"--threads-per-rank must be >= 1, got {args.threads_per_rank}")
        check_fairseq_args(fairseq_args)
    except LauncherError as e:
        parser.error(str(e))
    threads = args.threads_per_rank or max(1, usable_cores() // args.nprocs)
    command = torchrun_command(args.nprocs, fairseq_args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, rank_env(threads))


if __name__ == "__main__":
    sys.exit(main())
