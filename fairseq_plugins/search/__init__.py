"""The architecture search of the mixed-attention paper (Liu et al.): search spaces (``space.py``)
and the command line ``python -m fairseq_plugins.search`` (``__main__.py``)."""
from .space import HEAD_DIM_MODES, SearchSpace, SearchSpaceError, SideChoices  # noqa: F401
