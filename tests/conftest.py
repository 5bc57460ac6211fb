"""One compute thread for every test and every process a test starts.

Trained results (the BLEU and perplexity bars of the end-to-end tests) depend on
the number of intra-op threads: a sum split over 2 threads is added in another
order than over 1, and a few hundred updates later the model differs (the BET(SG)
test reached 92.29 BLEU on 1 thread and 84.34 on 2 at the same seed). With one
thread everywhere the suite is deterministic on a given CPU kind whatever the
machine's core count or load, and `make test` runs test files side by side
(pytest-xdist, one file per worker) instead of threads fighting over the cores.
Set before anything starts a subprocess; the test's own process is set below.
"""
import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"
# Triton's kernels (cosFormer's fused path; Triton is installed for the tests only) run under Triton's
# interpreter on CPU tensors. Set before anything imports them, so that every kernel module, whichever test
# file imports it first and however often, is decorated for the interpreter (a module imported without it
# and reloaded with it left its helpers to the compiler: "Cannot call @triton.jit'd outside of the scope of
# a kernel" in `make test`). The plugin chooses Triton only on CUDA, so nothing else changes.
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402  (after the variables: a fresh OpenMP pool reads them)

torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A folder with small dictionaries for translation (src, tgt) and language models (dict.txt): what
    fairseq's tasks read to build a model."""
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(12)))
    return str(path)


# Longest files first (tools/record_test_durations.py writes the table): `make test` hands files to its
# workers in collection order (--no-loadscope-reorder), so the long trainings start at once and the short
# files fill in around them, instead of one worker training alone at the end.
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")


def pytest_collection_modifyitems(session, config, items):
    import json

    try:
        with open(DURATIONS, encoding="utf-8") as f:
            seconds = json.load(f)
    except FileNotFoundError:
        return
    root = str(config.rootpath)
    # (a stable sort: a file's tests keep their order; files missing from the table keep theirs, after the rest)
    def order(item):
        name = os.path.relpath(str(item.path), root).replace(os.sep, "/")
        return (name not in seconds, -seconds.get(name, 0.0))

    items.sort(key=order)


# ------------------------------------------------------------------ fork server ---
# Every Python process a test starts (fairseq's CLIs, the recipes' $PYTHON, the benchmarks) goes through
# a fork server that has imported torch and fairseq once (tests/fork_server.py: why, and when a command
# gets a fresh interpreter instead). TEST_FORK_SERVER=0 turns it off.
_fork_server = None


def pytest_configure(config):
    global _fork_server
    import multiprocessing
    import sys
    import tempfile

    fork_server = _fork_server_module()
    runs_tests_here = hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)
    if (not runs_tests_here or os.environ.get("TEST_FORK_SERVER", "1") == "0"
            or fork_server.SOCKET_VARIABLE in os.environ):  # a pytest that a test started: its parent's server serves it
        return
    real_python = sys.executable
    directory = tempfile.mkdtemp(prefix="fork-server-")
    client, _fork_server = fork_server.start(real_python, directory)
    multiprocessing.set_executable(real_python)
    sys.executable = client
    os.environ[fork_server.SOCKET_VARIABLE] = os.path.join(directory, "socket")
    os.environ[fork_server.FRESH_PYTHON_VARIABLE] = real_python  # for a test that must SIGKILL the process itself


def pytest_unconfigure(config):
    if _fork_server is not None:
        import shutil

        _fork_server.kill()
        _fork_server.wait()
        shutil.rmtree(os.path.dirname(os.environ[_fork_server_socket_variable()]), ignore_errors=True)


def _fork_server_socket_variable():
    return _fork_server_module().SOCKET_VARIABLE


def _fork_server_module():
    # by path: the suite imports its files with --import-mode=importlib, so tests/ is not on sys.path
    import importlib.util
    import sys

    if "fork_server" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fork_server", os.path.join(os.path.dirname(__file__), "fork_server.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["fork_server"] = module
    return sys.modules["fork_server"]
