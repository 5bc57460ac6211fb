"""The architecture search of the mixed-attention paper (Liu et al.): search spaces (``space.py``), the
weight-sharing supernet (``supernet.py``: the ``mixed_supertransformer`` models) and the tasks that train it
(``supernet_tasks.py``), the sub-network tools (``subnetworks.py``) and the command line
``python -m fairseq_plugins.search`` (``__main__.py``). Importing the package registers the supernet models
and tasks with fairseq; the search depends on ``models`` (the sub-networks are ``mixed_transformer`` models),
never the other way round."""
from .space import HEAD_DIM_MODES, SearchSpace, SearchSpaceError, SideChoices  # noqa: F401
from . import supernet, supernet_tasks  # noqa: F401  (registration side effects)
