"""fairseq_plugins: attention kinds for fairseq (``--user-dir fairseq_plugins``).

Importing the package registers the attention kinds, models, architectures,
tasks and criteria with fairseq, and the few classes that fairseq checkpoints
contain as safe globals for ``torch.load(weights_only=True)`` (``register``).
A process started as one of the package's light command lines (``python -m
fairseq_plugins.search``, the ``fairseq-plugins-*`` scripts, ...:
``command_line.py``) registers only when its command calls ``register()``, so
that ``--help`` and usage errors need neither torch nor fairseq.
"""
from .command_line import started_as_light_command
from .errors import install_excepthook
from .known_warnings import hide_known_warnings

hide_known_warnings()
install_excepthook()  # the plugin's configuration errors inside fairseq's commands: one line (errors.py)

__version__ = "0.1.0"


def register() -> None:
    """Register everything with fairseq (imports torch and fairseq); a second call does nothing."""
    from . import checkpoint_compat  # noqa: F401
    from . import modules  # noqa: F401
    from .models import register as register_models

    register_models()  # (the models package defers it too in the light command lines)
    from . import tasks  # noqa: F401
    from .search import supernet, supernet_tasks  # noqa: F401  (the supernet models and tasks)
    from . import criterions  # noqa: F401
    from . import hub  # noqa: F401  (the moses_prepared tokenizer)
    from .modules.registry import import_kind_modules

    import_kind_modules()  # kinds of other packages named in $FAIRSEQ_PLUGINS_KIND_MODULES (modules/registry.py)


if not started_as_light_command():
    register()
