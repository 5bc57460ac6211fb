"""The architecture search of the mixed-attention paper (Liu et al.): search spaces (``space.py``), the
weight-sharing supernet (``supernet.py``: the ``mixed_supertransformer`` models) and the tasks that train it
(``supernet_tasks.py``), the sub-network tools (``subnetworks.py``) and the command line
``python -m fairseq_plugins.search`` (``__main__.py``). ``fairseq_plugins.register()`` (importing
``fairseq_plugins``) registers the supernet models and tasks with fairseq; this package's own import is
light (the names below are read from ``space.py`` when first used), so that the command line answers
``--help`` without torch. The search depends on ``models`` (the sub-networks are ``mixed_transformer``
models), never the other way round."""
SPACE_NAMES = ("HEAD_DIM_MODES", "SearchSpace", "SearchSpaceError", "SideChoices")


def __getattr__(name):
    if name in SPACE_NAMES:
        from . import space

        return getattr(space, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
