"""The suite's fork server (tests/fork_server.py) runs a command as a fresh interpreter would: the same
output, exit status, sys.argv, sys.path, __main__, environment and working folder; and it hands the
commands where a forked child could differ to a fresh interpreter."""
import os
import signal
import subprocess
import sys

import pytest

FORK_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_server.py")


@pytest.fixture(scope="module")
def interpreters(tmp_path_factory):
    """(client script of a server of this test's own, the real interpreter)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fork_server_under_test", FORK_SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real = os.environ.get(module.FRESH_PYTHON_VARIABLE, sys.executable)
    client, server = module.start(real, str(tmp_path_factory.mktemp("fork-server")))
    yield client, real
    server.kill()
    server.wait()


def both(interpreters, args, **kwargs):
    client, real = interpreters
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([client, *args], **kwargs), subprocess.run([real, *args], **kwargs)


def assert_same(served, fresh):
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_commands_run_in_the_preloaded_server(interpreters):
    served, fresh = both(interpreters, ["-c", "import sys; print('fairseq' in sys.modules)"])
    assert (served.stdout, fresh.stdout) == ("True\n", "False\n")


def test_c_code_with_arguments_exit_status_and_streams(interpreters, tmp_path):
    code = ("import os, sys; print(sys.argv, repr(sys.path[0]), __name__, os.getcwd(), os.environ['PROBE']); "
            "print('to stderr', file=sys.stderr); sys.exit(int(sys.argv[2]))")
    served, fresh = both(interpreters, ["-c", code, "a", "3"], cwd=tmp_path, env={**os.environ, "PROBE": "probe value"})
    assert served.returncode == 3 and "probe value" in served.stdout and str(tmp_path) in served.stdout
    assert_same(served, fresh)


def test_module_reads_stdin_and_closes_stdout(interpreters):
    served, fresh = both(interpreters, ["-m", "json.tool"], input='{"a": [1, 2]}')
    assert served.returncode == 0 and '"a"' in served.stdout
    assert_same(served, fresh)


def test_script_argv_path_and_pythonpath(interpreters, tmp_path):
    library = tmp_path / "lib"
    library.mkdir()
    (library / "probe_module.py").write_text("VALUE = 'from PYTHONPATH'\n")
    script = tmp_path / "script.py"
    script.write_text("import sys, probe_module\nprint(__name__, sys.argv, sys.path[:2], probe_module.VALUE)\n")
    served, fresh = both(interpreters, [str(script), "x"], env={**os.environ, "PYTHONPATH": str(library)})
    assert "from PYTHONPATH" in served.stdout
    assert_same(served, fresh)


def test_uncaught_exception_and_string_exit(interpreters):
    for code in ("def f():\n    raise ValueError('boom')\nf()", "import sys; sys.exit('a message')"):
        served, fresh = both(interpreters, ["-c", code])
        assert served.returncode == 1
        assert_same(served, fresh)


def test_death_by_a_signal_and_forwarded_signals(interpreters):
    served, fresh = both(interpreters, ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert served.returncode == fresh.returncode == -signal.SIGTERM
    client, _ = interpreters
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "try:\n    print('ready', flush=True)\n    time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('interrupted', flush=True); sys.exit(5)\n")
    process = subprocess.Popen([client, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 5 and process.stdout.read() == "interrupted\n"
    process.stdout.close()


def test_fresh_interpreter_where_a_fork_could_differ(interpreters):
    probe = ["-c", "import sys; print('fairseq' in sys.modules)"]
    # a session leader (launchers signal their ranks' groups), an import-time variable, an interpreter option
    for args, kwargs in ((probe, {"start_new_session": True}),
                         (probe, {"env": {**os.environ, "OMP_NUM_THREADS": "2"}}),
                         (["-u"] + probe, {})):
        served, _ = both(interpreters, args, **kwargs)
        assert served.stdout == "False\n", (args, kwargs)
    # file descriptors besides the standard streams (multiprocessing passes pipes that way)
    read_end, write_end = os.pipe()
    try:
        served, _ = both(interpreters, probe, pass_fds=(write_end,))
    finally:
        os.close(read_end), os.close(write_end)
    assert served.stdout == "False\n"


def test_logging_as_configured_by_the_command_or_by_fairseqs_import(interpreters):
    # fairseq-train configures the root logger before it imports fairseq; a script that imports fairseq
    # first gets the configuration of fairseq's import; one that never imports it gets none
    show = "import logging; root = logging.getLogger(); print(root.level, [h.formatter._fmt for h in root.handlers])"
    for code in ("from fairseq_cli import train; " + show, "import fairseq; " + show, show):
        served, fresh = both(interpreters, ["-c", code])
        assert_same(served, fresh)


def test_each_command_draws_its_own_random_numbers(interpreters):
    # numpy seeds its global generator from the OS at import (random reseeds after a fork by itself)
    client, _ = interpreters
    code = "import random, numpy; print(random.random(), numpy.random.rand())"
    outputs = [subprocess.run([client, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)]
    first, second = (line.split() for line in outputs)
    assert first[0] != second[0] and first[1] != second[1]


def test_a_gone_server_is_said_and_the_command_still_runs(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fork_server_gone", FORK_SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real = os.environ.get(module.FRESH_PYTHON_VARIABLE, sys.executable)
    client, server = module.start(real, str(tmp_path))
    server.kill()
    server.wait()
    log = tmp_path / "why.log"
    result = subprocess.run([client, "-c", "print('ran')"], capture_output=True, text=True,
                            env={**os.environ, module.LOG_VARIABLE: str(log)})
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert "is not running" in result.stderr and "server.log" in result.stderr
    assert "no server" in log.read_text()


def test_the_log_says_why_a_command_was_not_forked(interpreters, tmp_path):
    log = tmp_path / "why.log"
    env = {**os.environ, "OMP_NUM_THREADS": "3", "TEST_FORK_SERVER_LOG": str(log)}
    both(interpreters, ["-c", "pass"], env=env)
    both(interpreters, ["-u", "-c", "pass"], env={**os.environ, "TEST_FORK_SERVER_LOG": str(log)})
    text = log.read_text()
    assert "OMP_NUM_THREADS" in text and "interpreter options" in text
