"""``fairseq-plugins-cpu-train``: data-parallel fairseq-train on CPU, one process per rank.

Usage::

    fairseq-plugins-cpu-train --nprocs N [--port P] [--threads-per-rank K] \\
        [--dump-final-params DIR] -- <fairseq-train arguments>

Stock fairseq assumes CUDA for multi-process training: torchrun on a CPU-only
machine divides by ``torch.cuda.device_count() == 0``, spawning
(``--distributed-world-size N`` alone) starts ``min(device_count, N)`` = 0
processes, and the ``pytorch_ddp``/``c10d`` backends pass ``device_ids``, which
DistributedDataParallel rejects for CPU modules. What works is one process per
rank, each told its rank, talking over gloo, with fairseq's own gradient
all-reduce (``legacy_ddp``). This launcher starts those N processes with::

    --cpu --distributed-backend gloo --distributed-world-size N
    --distributed-init-method tcp://127.0.0.1:PORT --distributed-rank R
    --distributed-no-spawn --device-id 0 --ddp-backend legacy_ddp

appended to the given fairseq-train arguments. Those options belong to the
launcher: passing one of them after ``--`` is refused with an error naming it
(``--cpu``, ``--distributed-no-spawn``, ``--distributed-backend gloo`` and
``--ddp-backend legacy_ddp``/``no_c10d`` are accepted, as they agree).

``--ddp-backend c10d`` (or ``pytorch_ddp``) after ``--`` runs fairseq's default GPU wrapper, PyTorch's
DistributedDataParallel, with every option fairseq gives it (``--find-unused-parameters``, bucket size,
buffers) except the device ids, which DistributedDataParallel refuses for a CPU module (the rank drops
them, see ``_rank_main.py``): what a GPU run of the same command does, on CPU.

Every rank gets ``OMP_NUM_THREADS`` = ``--threads-per-rank`` (default: usable
cores // N, at least 1), its output is forwarded line by line with a
``[rank R]`` prefix (stdout to stdout, stderr to stderr; fairseq logs only
warnings on ranks other than 0). If a rank fails, the others are stopped and
the launcher exits non-zero naming the rank and its exit code; Ctrl-C (or
SIGTERM) stops all ranks. As in any fairseq run, only rank 0 writes
checkpoints. ``--dump-final-params DIR`` makes every rank save its final model
state to ``DIR/rank{R}.pt`` (see ``_rank_main.py``), e.g. to check that the
ranks stayed in sync.
"""
import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

PROG = "fairseq-plugins-cpu-train"
HOST = "127.0.0.1"
RANK_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank_main.py")
# The rank's entry point runs by path, not with `-m fairseq_plugins...`: that
# would import this package before fairseq handles --user-dir, so a --user-dir
# naming another copy of fairseq_plugins would fail as "not globally unique".
# Run this way, a rank imports exactly what stock fairseq-train would.
RANK_BOOTSTRAP = "import runpy; runpy.run_path({path!r}, run_name='__main__')"
# Environment variable through which a rank learns its launcher's pid (it exits
# if the launcher dies, see _rank_main.py).
LAUNCHER_PID_ENV = "FAIRSEQ_PLUGINS_LAUNCHER_PID"
STOP_GRACE_S = 10.0

# Options the launcher sets for every rank and the user may not pass.
OWNED_OPTIONS: Dict[str, str] = {
    "--distributed-world-size": "it is --nprocs",
    "--distributed-rank": "the launcher numbers the ranks",
    "--distributed-init-method": f"the launcher uses tcp://{HOST}:PORT (choose PORT with --port)",
    "--distributed-port": "use the launcher's --port",
    "--distributed-num-procs": "it is --nprocs",
    "--nprocs-per-node": "it is --nprocs",
    "--device-id": "every CPU rank uses device 0",
    "--local_rank": "every CPU rank uses device 0",
}
# Options the launcher sets to one value; the user may pass only that value (or an alias).
FIXED_OPTIONS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "--distributed-backend": (("gloo",), "gloo is the torch.distributed backend that runs on CPU"),
    "--ddp-backend": (
        ("legacy_ddp", "no_c10d", "c10d", "pytorch_ddp"),
        "legacy_ddp is fairseq's own all-reduce; c10d/pytorch_ddp run PyTorch's DistributedDataParallel without "
        "device ids, as fairseq on a GPU runs it with them",
    ),
}
# Switches the launcher sets; the user may pass them too.
SWITCHES = ("--cpu", "--distributed-no-spawn")


class LauncherError(ValueError):
    """Bad launcher usage; the message is for the user."""


# ------------------------------------------------------------- arguments ---
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} --nprocs N [--port P] [--threads-per-rank K] [--dump-final-params DIR] -- <fairseq-train arguments>",
        description="Data-parallel fairseq-train on CPU: one process per rank over gloo, with legacy_ddp.",
        epilog="Everything after '--' goes to fairseq-train. The launcher adds --cpu --distributed-backend gloo "
        "--distributed-world-size --distributed-init-method --distributed-rank --distributed-no-spawn "
        "--device-id 0 --ddp-backend legacy_ddp; do not pass those (except the agreeing --cpu, "
        "--distributed-no-spawn, --distributed-backend gloo, and --ddp-backend legacy_ddp, no_c10d, c10d or pytorch_ddp).",
        allow_abbrev=False,
    )
    parser.add_argument("--nprocs", type=int, required=True, help="number of ranks (processes)")
    parser.add_argument("--port", type=int, default=None, help=f"port on {HOST} for the rendezvous (default: a free one)")
    parser.add_argument(
        "--threads-per-rank", type=int, default=None,
        help="OMP_NUM_THREADS of every rank (default: usable cores // nprocs, at least 1)",
    )
    parser.add_argument(
        "--dump-final-params", metavar="DIR", default=None,
        help="every rank saves its final model state_dict to DIR/rank{R}.pt (with rank, world_size, num_updates)",
    )
    return parser


def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    argv = list(argv)
    if "--" not in argv:
        raise LauncherError("put the fairseq-train arguments after '--' (e.g. ... --nprocs 2 -- data-bin --arch ...)")
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def check_fairseq_args(fairseq_args: Sequence[str]) -> None:
    """Refuse options that the launcher sets (fairseq's parser has no abbreviations, so exact names suffice)."""
    args = list(fairseq_args)
    for i, token in enumerate(args):
        if not token.startswith("--"):
            continue
        name, has_value, value = token.partition("=")
        if name in OWNED_OPTIONS:
            raise LauncherError(f"do not pass {name} to fairseq-train: the launcher sets it ({OWNED_OPTIONS[name]})")
        if name in FIXED_OPTIONS:
            allowed, why = FIXED_OPTIONS[name]
            if not has_value:
                value = args[i + 1] if i + 1 < len(args) else ""
            if value not in allowed:
                raise LauncherError(f"{name} {value or '(no value)'} is not supported: the launcher uses {name} {allowed[0]} ({why})")
        if name in SWITCHES and has_value:
            raise LauncherError(f"{token}: {name} takes no value")


def launcher_flags(rank: int, nprocs: int, port: int, fairseq_args: Sequence[str]) -> List[str]:
    """The flags appended to the user's fairseq-train arguments for one rank."""
    present = {token.partition("=")[0] for token in fairseq_args if token.startswith("--")}
    flags = [switch for switch in SWITCHES if switch not in present]
    for name, (allowed, _) in FIXED_OPTIONS.items():
        if name not in present:
            flags += [name, allowed[0]]
    flags += [
        "--distributed-world-size", str(nprocs),
        "--distributed-init-method", f"tcp://{HOST}:{port}",
        "--distributed-rank", str(rank),
        "--device-id", "0",
    ]
    return flags


def rank_command(rank: int, nprocs: int, port: int, fairseq_args: Sequence[str], dump_dir: Optional[str] = None) -> List[str]:
    command = [sys.executable, "-c", RANK_BOOTSTRAP.format(path=RANK_MAIN)]
    if dump_dir is not None:
        command += ["--dump-final-params", dump_dir]
    return command + ["--", *fairseq_args, *launcher_flags(rank, nprocs, port, fairseq_args)]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_port() -> int:
    # The port is free now; another process could take it before rank 0 binds
    # it (rank 0 then fails with "address already in use": pass --port).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def loopback_interface() -> Optional[str]:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        return None
    return next((n for n in names if n.startswith("lo")), None)  # Linux: lo, BSD/macOS: lo0


def rank_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"  # forward log lines as they come
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    if "GLOO_SOCKET_IFNAME" not in env:
        # Every rank is on 127.0.0.1: keep gloo off the network interfaces
        # (gloo otherwise uses the address the hostname resolves to).
        interface = loopback_interface()
        if interface:
            env["GLOO_SOCKET_IFNAME"] = interface
    return env


# -------------------------------------------------------------- processes ---
def _say(message: str) -> None:
    try:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError):
        pass


class _Forwarder(threading.Thread):
    """Copies one rank's stream to ours, each line prefixed with the rank."""

    lock = threading.Lock()

    def __init__(self, stream, prefix: str, target):
        super().__init__(daemon=True)
        self.stream, self.prefix, self.target = stream, prefix, target
        self.target_ok = True

    def run(self):
        for raw in iter(self.stream.readline, b""):
            if not self.target_ok:
                continue  # keep draining, so that the rank never blocks on a full pipe
            line = raw.decode("utf-8", errors="replace")
            if not line.endswith("\n"):
                line += "\n"
            try:
                with self.lock:
                    self.target.write(self.prefix + line)
                    self.target.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.target_ok = False
        self.stream.close()


class _Terminated(Exception):
    """The launcher received SIGTERM."""


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    # Every rank leads its own process group (start_new_session), which also
    # holds its data-loader workers.
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(procs: Dict[int, subprocess.Popen], first_signal: int) -> None:
    """Signal every running rank, wait up to STOP_GRACE_S, then kill what is left."""
    running = [p for p in procs.values() if p.poll() is None]
    for proc in running:
        _signal_group(proc, first_signal)
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: kill now
    for proc in procs.values():
        # Also whatever is left of the group of a rank that has exited (its
        # data-loader workers would otherwise linger until they notice).
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"exit code {code} (killed by signal {-code})"
    return f"exit code {code}"


def _exit_code(code: int) -> int:
    if code < 0:
        return 128 - code  # killed by a signal: the shell's convention
    return code if code < 256 else 1


def launch(nprocs: int, port: int, threads: int, fairseq_args: Sequence[str], dump_dir: Optional[str] = None) -> int:
    env = rank_env(threads)
    _say(f"starting {nprocs} ranks, rendezvous tcp://{HOST}:{port}, OMP_NUM_THREADS={threads} per rank")
    procs: Dict[int, subprocess.Popen] = {}
    threads_: List[threading.Thread] = []
    # One waiter thread per rank reports (rank, exit code) here as the rank
    # exits, so that the first rank to fail is known even when the others fail
    # right after it (they lose their connection to it).
    exits: "queue.Queue[Tuple[int, int]]" = queue.Queue()
    finished: Dict[int, int] = {}
    first_failure: Optional[Tuple[int, int]] = None
    interrupted = None

    def wait_for(rank: int, proc: subprocess.Popen):
        exits.put((rank, proc.wait()))

    sigterm_seen = []

    def on_sigterm(signum, frame):
        if not sigterm_seen:  # once: a second SIGTERM must not break off the stopping
            sigterm_seen.append(signum)
            raise _Terminated()

    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        try:
            for rank in range(nprocs):
                proc = procs[rank] = subprocess.Popen(
                    rank_command(rank, nprocs, port, fairseq_args, dump_dir),
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,
                )
                _say(f"started rank {rank} (pid {proc.pid})")
                threads_ += [
                    _Forwarder(proc.stdout, f"[rank {rank}] ", sys.stdout),
                    _Forwarder(proc.stderr, f"[rank {rank}] ", sys.stderr),
                    threading.Thread(target=wait_for, args=(rank, proc), daemon=True),
                ]
                for thread in threads_[-3:]:
                    thread.start()
            while len(finished) < nprocs:
                try:
                    rank, code = exits.get(timeout=0.5)  # a timeout keeps Ctrl-C deliverable
                except queue.Empty:
                    continue
                finished[rank] = code
                if code != 0:
                    first_failure = (rank, code)
                    break
        except KeyboardInterrupt:
            interrupted = "interrupted (Ctrl-C)"
        except _Terminated:
            interrupted = "terminated (SIGTERM)"
        if first_failure:
            rank, code = first_failure
            _say(f"rank {rank} failed with {_describe(code)}; stopping the other ranks")
            _stop(procs, signal.SIGTERM)
        elif interrupted:
            _say(f"{interrupted}: stopping all ranks")
            # SIGTERM, not SIGINT: a rank started from a non-interactive
            # shell's background job inherits an ignored SIGINT.
            _stop(procs, signal.SIGTERM)
    except BaseException:
        _stop(procs, signal.SIGKILL)
        raise
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
        for thread in threads_:
            thread.join(timeout=5)
    while not exits.empty():  # ranks that ended while we stopped them
        rank, code = exits.get()
        finished.setdefault(rank, code)

    if first_failure:
        rank, code = first_failure
        others = []
        for other in sorted(procs):
            other_code = finished.get(other, procs[other].returncode)
            if other == rank or other_code == 0:
                continue
            if other_code in (-signal.SIGTERM, -signal.SIGKILL):
                others.append(f"rank {other} was stopped")
            else:
                others.append(f"rank {other} then exited with {_describe(other_code)}")
        detail = f" ({'; '.join(others)})" if others else ""
        _say(f"error: rank {rank} failed with {_describe(code)}{detail}")
        return _exit_code(code)
    if interrupted:
        return 130 if "Ctrl-C" in interrupted else 128 + signal.SIGTERM
    _say(f"all {nprocs} ranks finished")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        own_args, fairseq_args = split_argv(argv)
    except LauncherError as e:
        if any(a in ("-h", "--help") for a in argv):
            parser.print_help()
            return 0
        parser.error(str(e))
    args = parser.parse_args(own_args)
    try:
        if args.nprocs < 1:
            raise LauncherError(f"--nprocs must be >= 1, got {args.nprocs}")
        if args.port is not None and not 0 < args.port < 65536:
            raise LauncherError(f"--port must be in 1..65535, got {args.port}")
        if args.threads_per_rank is not None and args.threads_per_rank < 1:
            raise LauncherError(f"--threads-per-rank must be >= 1, got {args.threads_per_rank}")
        if not fairseq_args:
            raise LauncherError("no fairseq-train arguments after '--'")
        check_fairseq_args(fairseq_args)
    except LauncherError as e:
        parser.error(str(e))
    threads = args.threads_per_rank or max(1, usable_cores() // args.nprocs)
    port = args.port or free_port()
    dump_dir = None
    if args.dump_final_params is not None:
        dump_dir = os.path.abspath(args.dump_final_params)
        os.makedirs(dump_dir, exist_ok=True)
    return launch(args.nprocs, port, threads, fairseq_args, dump_dir)


if __name__ == "__main__":
    sys.exit(main())
