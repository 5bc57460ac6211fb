"""What the project's own command lines share before anything heavy is imported (this module imports
only the standard library).

* Registration on demand: importing ``fairseq_plugins`` registers the kinds, models, tasks and criteria
  with fairseq, which imports torch and fairseq (seconds). A process started as one of the light command
  lines (``LIGHT_MODULES``, run with ``python -m``, and the console scripts ``fairseq-plugins-*``) only
  marks the package as not yet registered, so that ``--help`` and usage errors answer at once; such a
  command calls ``fairseq_plugins.register()`` once its options are parsed, before it uses fairseq.
  Every other process (fairseq's ``--user-dir``, the hub, a script, the tests) registers on import, as
  before. A command that is not in ``LIGHT_MODULES`` (e.g. a distributed rank) is never deferred.
* ``configure_logging``: progress and status of the command lines go through Python's ``logging``
  (``logging.getLogger(__name__)``), configured once per command as fairseq configures its own
  (``%(asctime)s | %(levelname)s | %(name)s | %(message)s``; level ``$LOGLEVEL``, default INFO), on
  stderr, so that stdout keeps only a command's output (tables, JSON). A program that configured logging
  itself keeps its configuration.
"""
import logging
import os
import sys
from typing import List, Optional

# The `python -m` modules whose --help and usage errors import neither torch nor fairseq (nor spaCy,
# LightGBM, Optuna, matplotlib); each calls fairseq_plugins.register() before it uses fairseq, if it does
# (tests/cli/test_help_is_light.py runs each). Of the packages LIGHT_PACKAGES: every module, also run as a
# script (python data_prep/syntax_hints.py).
LIGHT_MODULES = (
    "fairseq_plugins.search", "fairseq_plugins.search.__main__",
    "fairseq_plugins.analysis", "fairseq_plugins.analysis.__main__",
    "fairseq_plugins.cli.demo", "fairseq_plugins.cli.model_costs", "fairseq_plugins.cli.cpu_distributed_train",
    "fairseq_plugins.complexity", "fairseq_plugins.models.hydra_configs",
)
LIGHT_PACKAGES = ("data_prep",)
# setup.py's console scripts: every name has this prefix, and every one is light (the test checks both)
CONSOLE_SCRIPT_PREFIX = "fairseq-plugins-"


def typed_options(argv: List[str]) -> set:
    """The long options of a command line as typed (``--name`` and ``--name=value`` alike): what a check that
    refuses an option its mode would ignore reads, so that a default never counts as given. (Its parser must
    take no abbreviations, ``allow_abbrev=False``, for the names to be those of the options.) data_prep builds
    the same set itself: importing this package there would answer a missing fairseq with the package's error
    instead of data_prep's own."""
    return {token.split("=", 1)[0] for token in argv if token.startswith("--")}


LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli's
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_LEVEL_VARIABLE = "LOGLEVEL"  # fairseq_cli's too


def module_run(orig_argv: List[str]) -> Optional[str]:
    """The module of ``python [options] -m MODULE ...`` (``sys.orig_argv``), or None (a script, ``-c``, the
    interactive prompt): the interpreter's own options are skipped as its parser reads them."""
    arguments = iter(orig_argv[1:])
    for argument in arguments:
        if argument == "-" or not argument.startswith("-"):
            return None
        if argument.startswith("--"):
            if argument == "--check-hash-based-pycs":
                next(arguments, None)
            continue
        flags = argument[1:]
        for position, flag in enumerate(flags):  # grouped flags: -Bm MODULE, -mMODULE, -Wignore
            if flag in "cmWX":
                value = flags[position + 1:] or next(arguments, None)
                if flag == "m":
                    return value
                if flag == "c":
                    return None
                break  # -W, -X: their value read, on to the next argument
    return None


def started_as_light_command() -> bool:
    """Whether this process is one of the light command lines (see the module's docstring)."""
    module = module_run(getattr(sys, "orig_argv", []))
    if module is not None:
        return module in LIGHT_MODULES or module.split(".")[0] in LIGHT_PACKAGES
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-") else ""
    if script.endswith(".py"):  # python data_prep/syntax_hints.py
        return os.path.basename(os.path.dirname(script)) in LIGHT_PACKAGES
    return os.path.basename(script).startswith(CONSOLE_SCRIPT_PREFIX)


def configure_logging(level: Optional[str] = None) -> None:
    """Log records of level ``level`` (default ``$LOGLEVEL``, else INFO) and above to stderr in fairseq's format;
    nothing changes where the root logger already has a handler (a program's own configuration)."""
    if logging.getLogger().handlers:
        return
    level = (level or os.environ.get(LOG_LEVEL_VARIABLE) or "INFO").upper()
    logging.basicConfig(format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT, level=level, stream=sys.stderr)
