"""fairseq_plugins: attention kinds for fairseq (``--user-dir fairseq_plugins``).

Importing the package registers the attention kinds, models, architectures,
tasks and criteria with fairseq, and the few classes that fairseq checkpoints
contain as safe globals for ``torch.load(weights_only=True)``.
"""
from .errors import install_excepthook
from .known_warnings import hide_known_warnings

hide_known_warnings()
install_excepthook()  # the plugin's configuration errors inside fairseq's commands: one line (errors.py)

from . import checkpoint_compat  # noqa: F401
from . import modules  # noqa: F401
from . import models  # noqa: F401
from . import tasks  # noqa: F401
from . import search  # noqa: F401  (the supernet models and tasks)
from . import criterions  # noqa: F401
from . import hub  # noqa: F401  (the moses_prepared tokenizer)
from .modules.registry import import_kind_modules

import_kind_modules()  # kinds of other packages named in $FAIRSEQ_PLUGINS_KIND_MODULES (modules/registry.py)

__version__ = "0.1.0"
