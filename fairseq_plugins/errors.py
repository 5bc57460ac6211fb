"""One-line errors: the plugin's way of reporting a configuration or input error to a person.

An error a user must fix (an option, a file) is one line on stderr, ``error: <what, where, what is
expected>``, and exit status 2, as argparse reports a bad option; a traceback is shown only when the
environment sets ``FAIRSEQ_PLUGINS_DEBUG=1`` (the errors are then raised as they are). Other exceptions
(bugs, interrupts) keep their traceback.

* ``one_line_errors(run, *types)``: runs a command's body (the plugin's console scripts, ``python -m
  fairseq_plugins.search``; data_prep's ``main_guard`` gives the same line with ``data_prep.common.fail``).
* ``install_excepthook()``: inside fairseq's own commands (fairseq-train, -generate, -eval-lm, which import
  the plugin through ``--user-dir``), an uncaught error of the plugin's classes (``USER_ERRORS``) is printed
  as one line and the process exits with status 2; every other exception goes to the previous hook.
"""
import atexit
import contextlib
import os
import sys
from typing import Callable, Optional, Tuple, Type

DEBUG_VARIABLE = "FAIRSEQ_PLUGINS_DEBUG"
EXIT_STATUS = 2  # argparse's status for a usage error


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (truncated, another model type, another dictionary or attention
    kinds); the message names the file and what is wrong."""


def debugging() -> bool:
    """True when ``$FAIRSEQ_PLUGINS_DEBUG`` asks for tracebacks (any value but '', '0', 'false', 'no')."""
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def error_line(error: BaseException) -> str:
    """``error: <message>`` on one line (a message's own line breaks become '; ')."""
    message = "; ".join(part.strip() for part in str(error).splitlines() if part.strip()) or type(error).__name__
    return f"error: {message}"


def user_errors() -> Tuple[Type[BaseException], ...]:
    """The plugin's classes of errors a user must fix (imported here, when first needed, so that this module
    imports nothing heavy)."""
    from .cli.cpu_distributed_train import LauncherError
    from .criterions.label_smoothed_cross_entropy_with_pointer import PointerLossError
    from .data.syntax_hints import HintDataError
    from .modules.recording import AttentionRecordingError
    from .modules.registry import AttentionConfigError

    errors = [AttentionConfigError, HintDataError, PointerLossError, AttentionRecordingError, LauncherError, CheckpointError]
    with contextlib.suppress(ImportError):  # the analysis needs matplotlib & co.
        from .analysis.runner import AnalysisError
        from .analysis.stats import AttentionStatisticsError

        errors += [AnalysisError, AttentionStatisticsError]
    return tuple(errors)


def report(error: BaseException, stream=None) -> None:
    print(error_line(error), file=stream or sys.stderr, flush=True)


def one_line_errors(run: Callable[[], Optional[int]], *types: Type[BaseException]) -> int:
    """``run()``'s exit status (None: 0); an error of ``types`` (default: ``user_errors()``) is reported as one
    line and gives ``EXIT_STATUS`` (raised unchanged under ``FAIRSEQ_PLUGINS_DEBUG=1``)."""
    try:
        return run() or 0
    except types or user_errors() as error:
        if debugging():
            raise
        report(error)
        return EXIT_STATUS


def ours_in_chain(error: BaseException) -> Optional[BaseException]:
    """``error`` if it is one of the plugin's; else, when it is fairseq's generic wrapper (a plain ``Exception``:
    the trainer turns any failure to load a checkpoint's weights into "Cannot load model parameters"), the
    plugin's error it was raised from or during; else None (a bug raised while handling ours stays a bug)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, user_errors()):
            return error
        if type(error) is not Exception:
            return None
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _hook(previous):
    def excepthook(kind, error, traceback):
        try:
            ours = None if debugging() else ours_in_chain(error)
        except Exception:  # the package half imported: the previous hook reports the error as it is
            ours = None
        if ours is not None:
            # the process's own stderr: a hook that wrapped ours may have swapped sys.stderr for a buffer it
            # prints after we return (torch.distributed's rank prefix), and we do not return (os._exit below)
            report(ours, sys.__stderr__)
            # Python exits with status 1 after any uncaught exception; argparse's 2 needs an exit of our own,
            # after what a normal exit runs (atexit handlers, flushed streams).
            with contextlib.suppress(Exception):
                atexit._run_exitfuncs()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os._exit(EXIT_STATUS)
        previous(kind, error, traceback)

    excepthook.one_line_errors = True
    return excepthook


def install_excepthook() -> None:
    """Make an uncaught plugin error one line (see the module docstring); installed once, at plugin import."""
    if not getattr(sys.excepthook, "one_line_errors", False):
        sys.excepthook = _hook(sys.excepthook)
