"""fairseq_plugins.errors: the plugin's errors are one line (exit 2) in its commands and, through the
excepthook, inside fairseq's; other exceptions keep their traceback; FAIRSEQ_PLUGINS_DEBUG=1 shows it."""
import os
import subprocess
import sys

import pytest

from fairseq_plugins.errors import DEBUG_VARIABLE, CheckpointError, error_line, one_line_errors, ours_in_chain
from fairseq_plugins.modules import AttentionConfigError


def raise_(error):
    raise error


def test_one_line_errors_reports_the_plugins_errors_and_keeps_the_rest(capsys, monkeypatch):
    monkeypatch.delenv(DEBUG_VARIABLE, raising=False)
    assert one_line_errors(lambda: raise_(AttentionConfigError("--decoder-attention-kinds x: not a kind"))) == 2
    assert capsys.readouterr().err == "error: --decoder-attention-kinds x: not a kind\n"
    assert one_line_errors(lambda: None) == 0 and one_line_errors(lambda: 3) == 3
    with pytest.raises(KeyError):
        one_line_errors(lambda: raise_(KeyError("a bug")))
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    with pytest.raises(AttentionConfigError):
        one_line_errors(lambda: raise_(AttentionConfigError("shown with its traceback")))


def test_a_message_of_several_lines_becomes_one():
    assert error_line(ValueError("first\n  second\n")) == "error: first; second"


def chained(outer, inner):
    try:
        raise inner
    except type(inner):
        try:
            raise outer
        except type(outer) as error:
            return error


def test_the_cause_is_followed_only_through_fairseqs_generic_wrapper():
    ours = CheckpointError("x.pt: its layers have other attention kinds")
    assert ours_in_chain(ours) is ours
    assert ours_in_chain(chained(Exception("Cannot load model parameters from checkpoint x.pt"), ours)) is ours
    assert ours_in_chain(chained(KeyError("a bug while handling it"), ours)) is None
    assert ours_in_chain(ValueError("not ours")) is None


@pytest.mark.parametrize("debug", [False, True])
def test_the_excepthook_of_an_uncaught_plugin_error(debug):
    code = ("import fairseq_plugins, atexit; atexit.register(lambda: print('atexit ran', flush=True)); "
            "from fairseq_plugins.modules import AttentionConfigError; raise AttentionConfigError('--x 3: expected 1 to 2')")
    env = {DEBUG_VARIABLE: "1"} if debug else {}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env})
    if debug:
        assert result.returncode == 1 and "Traceback" in result.stderr
    else:
        assert result.returncode == 2 and result.stderr == "error: --x 3: expected 1 to 2\n"
    assert result.stdout == "atexit ran\n"
