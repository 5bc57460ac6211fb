"""A fork server for the Python processes the tests start (test infrastructure, not part of the plugin).

Most of the suite's time went into starting interpreters: about 215 fairseq processes per `make test`,
each spending 5-6 s of CPU importing torch, fairseq and the libraries fairseq imports (scikit-learn,
scipy, hydra) before doing a few updates of work. Here each test process (an xdist worker) starts one
server that imports those libraries once and then forks a child per command, and points
``sys.executable`` (hence ``PYTHON`` of the recipes, ``fairseq_command`` of the pipeline, every
``subprocess.run([sys.executable, ...])`` of the tests) at a small client script that hands its
command line, environment, working folder and standard streams to the server. The child runs the
command as ``python -c CODE`` / ``python -m MODULE`` / ``python SCRIPT`` would (same ``sys.argv``,
``sys.path``, ``__main__``, exit status, atexit handlers), so the real CLIs are what is tested; only
their imports are already done. What the pre-imports printed is written to the child's own
streams first, so a test that looks for import-time noise still sees it.

Where a forked child could behave differently from a fresh interpreter, the client runs the real
interpreter instead (``os.execv``): interpreter options other than -c/-m/a script, an environment
that differs from the server's in a variable read at import time (``PYTHON*`` other than
``PYTHONPATH``, thread counts of OpenMP/MKL, locale, tqdm), open file descriptors other than the
three standard streams (multiprocessing passes pipes that way), a client that leads its own session
or process group (launchers that signal the group of their ranks), or no server.

``TEST_FORK_SERVER=0 make test`` runs every command in a fresh interpreter instead;
``TEST_FORK_SERVER_LOG=FILE`` makes the clients append to FILE why a command was not forked (a
variable that differs: a test process that changes its environment for good slows every later command).

Not reproduced: a fresh interpreter's own hash seed (the children share the server's, so the order of
a set of strings is the same in every command of a worker) and glibc's malloc settings (``MALLOC_*``,
read once when a process starts: the recipes' ``CPU_MALLOC=keep`` does not reach a forked child; they
change its speed and memory, never what it computes).
"""
import json
import os
import select
import signal
import socket
import sys

SOCKET_VARIABLE = "FAIRSEQ_PLUGINS_TEST_FORK_SERVER"  # set in the test processes: where the server listens
# The real interpreter, for a test that SIGKILLs its process: a command run through the server is killed
# when the server sees its client gone, a moment after the client, so what it holds (a lock) outlives
# the client's wait().
FRESH_PYTHON_VARIABLE = "FAIRSEQ_PLUGINS_TEST_FRESH_PYTHON"
# What the server imports before forking: the expensive part of starting a fairseq CLI.
PRELOAD = ("torch", "fairseq", "fairseq.options", "fairseq.checkpoint_utils", "fairseq.trainer",
           "fairseq.sequence_generator", "fairseq.tasks", "fairseq.models", "fairseq.criterions")
# Environment variables read when those libraries are imported (or when the interpreter starts): a
# command whose environment differs from the server's in one of them gets a fresh interpreter.
IMPORT_TIME_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "TORCH", "PYTORCH_",
                        "CUDA", "TQDM_", "LANG", "LC_", "SKLEARN_", "SCIPY_", "HYDRA_")
# PYTHONPATH is rebuilt in the child as a fresh interpreter would; PYTHON is the recipes' interpreter, not
# something Python reads; torch._inductor sets TORCHINDUCTOR_CACHE_DIR in a test process that imports it
# (a later command inherits it) and reads it only when it compiles, which none of the commands does.
HANDLED_VARIABLES = ("PYTHONPATH", "PYTHON", "TORCHINDUCTOR_CACHE_DIR")
LOG_VARIABLE = "TEST_FORK_SERVER_LOG"  # a file: the clients append why a command got a fresh interpreter
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
MAX_INHERITED_FD = 256


# ------------------------------------------------------------------ client ---
def _command_kind(args):
    """('c', CODE) / ('m', MODULE) / ('script', PATH) and the arguments after it; None: another form."""
    if len(args) >= 2 and args[0] in ("-c", "-m"):
        return args[0][1], args[1], args[2:]
    if args and not args[0].startswith("-"):
        return "script", args[0], args[1:]
    return None


def _extra_fds():
    extra = []
    candidates = (sorted(int(name) for name in os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd")
                  else range(MAX_INHERITED_FD))
    for fd in candidates:  # (the listing's own descriptor is closed again: fstat fails on it)
        if fd < 3:
            continue
        try:
            os.fstat(fd)
        except OSError:
            continue
        extra.append(fd)
    return extra


def _standard_streams_open():
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def _log(message: str) -> None:
    if os.environ.get(LOG_VARIABLE):
        with open(os.environ[LOG_VARIABLE], "a") as log:
            log.write(message + "\n")


def client_main(real_python: str, socket_path: str) -> None:
    args = sys.argv[1:]

    def fresh_interpreter(reason):
        _log(f"fresh interpreter for {args[:2]!r}: {reason}")
        # (exec resets caught signals to their defaults; one that arrived before is lost, as it would be
        # for a fresh interpreter still starting)
        os.execv(real_python, [real_python] + args)

    kind = _command_kind(args)
    if kind is None:
        fresh_interpreter("interpreter options")
    if _extra_fds() or not _standard_streams_open():
        fresh_interpreter("file descriptors other than the three standard streams")
    if os.getsid(0) == os.getpid() or os.getpgid(0) == os.getpid():
        fresh_interpreter("leads its own session or process group")
    # Forward signals from before the child's pid is known: the child may already run (and a test react
    # to its output) before the server's reply arrives; what comes earlier is sent once the pid is here.
    child, pending = None, []

    def forward(signum, _frame):
        if child is None:
            pending.append(signum)
            return
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(socket_path)
    except OSError as error:
        # not silent: the suite still passes, at the old speed, and the cause is in the server's log
        sys.stderr.write(f"fork server {socket_path} is not running ({error}; its log: "
                         f"{os.path.join(os.path.dirname(socket_path), 'server.log')}): a fresh interpreter runs this\n")
        fresh_interpreter(f"no server ({error})")
    request = json.dumps({"kind": kind[0], "target": kind[1], "args": kind[2], "cwd": os.getcwd(), "env": dict(os.environ)})
    socket.send_fds(connection, [request.encode() + b"\n"], [0, 1, 2])
    replies = connection.makefile("r")
    first = replies.readline()
    if first.startswith("F"):
        connection.close()
        fresh_interpreter(first[1:].strip())
    if not first.startswith("P"):
        sys.stderr.write(f"fork server ({socket_path}) gave no child for {args[:2]}: {first!r}\n")
        os._exit(1)
    child = int(first[1:])
    for signum in pending:
        forward(signum, None)
    last = replies.readline()
    if not last.startswith("X"):
        sys.stderr.write(f"fork server ({socket_path}) lost the child {child} of {args[:2]}\n")
        os._exit(1)
    code = int(last[1:])
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ------------------------------------------------------------------ server ---
def _capture_preload():
    """Import PRELOAD with the standard streams going to files; returns what they printed."""
    import importlib
    import tempfile

    captured = []
    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(files[0].fileno(), 1), os.dup2(files[1].fileno(), 2)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    for f in files:
        f.seek(0)
        captured.append(f.read())
        f.close()
    return captured


def _import_time_environment(env):
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in HANDLED_VARIABLES}


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _configure_logging_on_fairseq_import(logging_by_import):
    """Until the command imports fairseq, the root logger is as in a fresh interpreter; at that import it
    gets the handlers and level fairseq's import gave it in the server, unless the command configured
    logging first (then fairseq's logging.basicConfig calls would have done nothing)."""
    import builtins
    import logging

    original_import = builtins.__import__

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "fairseq" or name.startswith("fairseq.")):
            builtins.__import__ = original_import
            root = logging.getLogger()
            if not root.handlers:
                for handler in logging_by_import[0]:
                    root.addHandler(handler)
                root.setLevel(logging_by_import[1])
        return original_import(name, globals, locals, fromlist, level)

    builtins.__import__ = import_


def _run_child(request, noise, base_path, logging_by_import):
    """In the forked child: become the requested command, run it, exit as Python would."""
    import atexit
    import runpy
    import threading
    import types

    os.setpgid(0, 0)  # the server can stop the command and whatever it started if the client goes away
    for signum in (signal.SIGINT,):
        signal.signal(signum, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    kind, target, args = request["kind"], request["target"], request["args"]
    if kind == "c":
        first = ""
    elif kind == "m":
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.realpath(target))
    sys.path[:] = [first] + [os.path.abspath(p) for p in extra] + base_path
    sys.stdout.reconfigure(line_buffering=os.isatty(1))
    _configure_logging_on_fairseq_import(logging_by_import)
    if "numpy" in sys.modules:  # seeded from the OS when imported, like `random` (which reseeds after a fork itself)
        sys.modules["numpy"].random.seed()
    _write_all(1, noise[0])
    _write_all(2, noise[1])
    code = 0
    try:
        # the command line a fresh interpreter would record (the package's light command lines read it:
        # fairseq_plugins/command_line.py)
        sys.orig_argv = [sys.orig_argv[0], *(["-c", target] if kind == "c" else ["-m", target] if kind == "m" else [target]), *args]
        if kind == "c":
            sys.argv = ["-c"] + args
            main = types.ModuleType("__main__")
            main.__builtins__ = __builtins__
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        elif kind == "m":
            sys.argv = [target] + args  # runpy puts the module's path first, as -m does
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target] + args
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code & 0xFF
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:
        kind_, value, trace = sys.exc_info()
        while trace is not None and trace.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
            trace = trace.tb_next  # the traceback a fresh interpreter prints: from the command's own code
        sys.excepthook(kind_, value.with_traceback(trace), trace)
        code = 1
    try:
        getattr(threading, "_shutdown", lambda: None)()  # wait for non-daemon threads, as interpreter exit does
        atexit._run_exitfuncs()
    except BaseException:
        sys.excepthook(*sys.exc_info())
    for stream in (sys.stdout, sys.stderr):
        try:
            if not stream.closed:  # a command may close sys.stdout itself (json.tool does)
                stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code)


def serve(socket_path: str, parent_pid: int) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    import logging

    environment = _import_time_environment(os.environ)
    before = dict(os.environ)
    root = logging.getLogger()
    pristine_logging = (list(root.handlers), root.level)
    noise = _capture_preload()
    # fairseq's import configures the root logger (logging.basicConfig in some of its modules), but the
    # fairseq CLIs configure it first, before they import fairseq, and that first call wins: the child
    # starts unconfigured and gets the import's configuration when it imports fairseq, as it would
    logging_by_import = (list(root.handlers), root.level)
    root.handlers[:] = pristine_logging[0]
    root.setLevel(pristine_logging[1])
    # variables the imports themselves set (KMP_INIT_AT_FORK, KMP_DUPLICATE_LIB_OK ...): a fresh
    # interpreter sets them when it imports the same libraries, so the child does too
    set_by_imports = {k: v for k, v in os.environ.items() if before.get(k) != v}
    environment = {k: v for k, v in environment.items() if k not in set_by_imports}
    own_extra = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if p not in own_extra]
    children = {}  # pid -> connection to its client
    while True:
        if os.getppid() != parent_pid:  # the test process is gone
            for pid in children:
                _kill_group(pid)
            return
        readable, _, _ = select.select([listener] + list(children.values()), [], [], 0.05)
        for ready in readable:
            if ready is listener:
                try:
                    _accept(listener, children, environment, set_by_imports, noise, base_path, logging_by_import)
                except (OSError, ValueError, KeyError) as error:  # a client that went away mid-request, or garbage
                    print(f"fork server: a request failed: {error!r}", file=sys.stderr, flush=True)
            else:  # a client closed its end while its command runs: stop the command
                pid = next(p for p, c in children.items() if c is ready)
                if not ready.recv(1, socket.MSG_PEEK):
                    _kill_group(pid)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = children.pop(pid, None)
            if connection is not None:
                try:
                    connection.sendall(f"X{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                connection.close()


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _accept(listener, children, environment, set_by_imports, noise, base_path, logging_by_import):
    connection, _ = listener.accept()
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 20)
        if not more:
            break
        data += more
    request = json.loads(data)
    compared = {k: v for k, v in _import_time_environment(request["env"]).items() if k not in set_by_imports}
    if len(fds) != 3 or compared != environment:
        differing = sorted(k for k in set(environment) | set(compared) if environment.get(k) != compared.get(k))
        for fd in fds:
            os.close(fd)
        connection.sendall(f"F{len(fds)} streams, variables that differ from the server's: {differing}\n".encode())
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            for other in children.values():
                other.close()
            connection.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            request["env"] = {**set_by_imports, **request["env"]}
            _run_child(request, noise, base_path, logging_by_import)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"P{pid}\n".encode())
    children[pid] = connection


# ----------------------------------------------------------- test process ---
def start(real_python: str, directory: str):
    """Start a server for this process; returns (client script path, server process)."""
    import shlex
    import subprocess

    socket_path = os.path.join(directory, "socket")
    client = os.path.join(directory, "python")
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path.insert(0, {here!r}); import fork_server; "
            f"fork_server.client_main({real_python!r}, {socket_path!r})")
    with open(client, "w") as f:  # a shell script: a shebang line cannot hold a long path or one with spaces
        f.write(f"#!/bin/sh\nexec {shlex.quote(real_python)} -IS -c {shlex.quote(code)} \"$@\"\n")
    os.chmod(client, 0o755)
    log = open(os.path.join(directory, "server.log"), "wb")
    server = subprocess.Popen([real_python, os.path.abspath(__file__), "serve", socket_path, str(os.getpid()), client],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    # the client connects only once the socket exists; wait for the bind, not for the imports
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(socket_path):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the test fork server did not start: see {directory}/server.log")
        time.sleep(0.01)
    return client, server


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "serve":
    import multiprocessing

    multiprocessing.set_executable(sys.executable)  # multiprocessing's own children: the real interpreter
    sys.executable = sys.argv[4]  # the commands' children go through the client too
    serve(sys.argv[2], int(sys.argv[3]))
