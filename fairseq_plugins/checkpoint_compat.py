"""Let torch >= 2.6 load fairseq checkpoints, and fairseq's broadcast of them, with ``weights_only=True``.

torch 2.6 made ``weights_only=True`` the default of ``torch.load``, which
refuses every class it is not told to trust. Two fairseq paths unpickle
checkpoint state with it:

* the checkpoint file. Besides tensors and plain containers, fairseq pickles
  the training arguments as an ``argparse.Namespace`` (``state["args"]`` and
  the ``_name``-less parts of ``state["cfg"]``): ``CHECKPOINT_GLOBALS``.
* the broadcast of a loaded checkpoint in a multi-process run (CPU ranks over
  gloo or several GPUs: the same code). ``Trainer.load_checkpoint`` loads the
  file on rank 0 only; ``checkpoint_utils.load_checkpoint_to_cpu`` has turned
  ``state["cfg"]`` into an omegaconf ``DictConfig`` by then, and
  ``distributed.utils.broadcast_object`` swaps every tensor for a
  ``_TensorPlaceholder``, ``torch.save``s the rest and ``torch.load``s it on
  the other ranks: ``BROADCAST_GLOBALS``.

Both lists hold exactly what those pickles name (the tests compare them with
``torch.serialization.get_unsafe_globals_in_checkpoint`` of a real
checkpoint and of its broadcast). fairseq offers no hook around its
broadcast's ``torch.load``, so the classes are allowed process-wide
(``add_safe_globals``) rather than in a ``safe_globals`` context. Weights-only
loading is never switched off: everything else, e.g. a pickle that calls
``os.system``, is still refused.
"""
import argparse
import collections
import functools
import os
import typing
import zipfile

import numpy
import torch
from fairseq import checkpoint_utils
from fairseq.distributed.utils import _TensorPlaceholder
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode

CHECKPOINT_GLOBALS = [argparse.Namespace]

# What the pickle of a broadcast checkpoint state names besides tensors,
# plain containers and CHECKPOINT_GLOBALS. Unpickling one only stores fields
# (omegaconf's __setstate__, a dataclass, a builtin type); what they hold is
# unpickled under the same rules, so an object hidden in the config is still
# refused (tests/test_checkpoint_compat.py).
BROADCAST_GLOBALS = [
    DictConfig,  # state["cfg"] and its sections
    ListConfig,  # list-valued options (e.g. lr, update_freq)
    AnyNode,  # every leaf value: the config is created from an untyped dict
    Metadata,  # a node's metadata
    ContainerMetadata,  # a container's metadata
    typing.Any,  # metadata ref_type / key_type / element_type
    dict,  # ContainerMetadata.object_type of a DictConfig; resolver_cache's default factory
    list,  # ContainerMetadata.object_type of a ListConfig
    int,  # ContainerMetadata.key_type of a ListConfig
    collections.defaultdict,  # Metadata.resolver_cache
    _TensorPlaceholder,  # broadcast_object sends tensors separately and leaves these in their place
]

# Checkpoints of a run with --eval-bleu (the translation recipes' EVAL_BLEU=1):
# fairseq's translation task logs the valid BLEU's n-gram counts and totals as
# numpy arrays, and the checkpoint keeps those meters (extra_state["metrics"]): int64
# on one process, float64 with several (fairseq sums the valid logs across ranks as
# float64 tensors before the task builds its arrays).
# An array's elements are unpickled under the same rules, so object arrays can
# hide nothing.
EVAL_BLEU_GLOBALS = [
    numpy.core.multiarray._reconstruct,  # how numpy pickles an ndarray
    numpy.ndarray,
    numpy.dtype,  # the arrays' dtype ...
    numpy.dtypes.Int64DType,  # ... whose class is built from its state: int64 (np.array of Python ints)
    numpy.dtypes.Float64DType,  # float64 (np.array of the float64 tensors of a multi-process run)
]

SAFE_GLOBALS = CHECKPOINT_GLOBALS + BROADCAST_GLOBALS + EVAL_BLEU_GLOBALS
torch.serialization.add_safe_globals(SAFE_GLOBALS)


# ------------------------------------------------------------------------------------------------------------
# A checkpoint that cannot be read is named, with what is wrong. fairseq reads every checkpoint file through
# checkpoint_utils.load_checkpoint_to_cpu (fairseq-train's resume, fairseq-generate, fairseq-eval-lm, the hub
# interface, the search's and the analysis' loaders), which has no hook of its own: it is wrapped here, once,
# and does what it did for every file torch can read. torch's own message for a damaged file names no file.
def _readable_checkpoint(path: str, error: BaseException) -> "CheckpointError":
    from .errors import CheckpointError

    try:
        size = os.path.getsize(path)
    except OSError:
        size = None
    if size == 0:
        return CheckpointError(f"{path}: an empty file, not a checkpoint (an interrupted copy or save?)")
    reason = (str(error).split(". ")[0].strip() if "PytorchStreamReader" in str(error) else "") or "not a complete zip archive"
    return CheckpointError(f"{path}: truncated or not a checkpoint ({size} bytes; torch cannot read it: {reason}); "
                           "use another checkpoint, or copy or save this one again")


def _damaged(path: str, error: BaseException) -> bool:
    try:
        return os.path.getsize(path) == 0 or "PytorchStreamReader" in str(error) or not zipfile.is_zipfile(path)
    except OSError:
        return False


def _loading_naming_the_file(load):
    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            state = load(path, *args, **kwargs)
        except (EOFError, RuntimeError, OSError) as error:
            # An empty file (EOFError), or torch's zip reader on a truncated or foreign file (RuntimeError or
            # OSError EINVAL). A missing or unreadable file names itself; pickle's refusal of unsafe content is
            # an UnpicklingError: both pass unchanged.
            if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)) or not _damaged(str(path), error):
                raise
            raise _readable_checkpoint(str(path), error) from error
        remember_loaded(path, state)
        return state

    load_checkpoint_to_cpu.names_the_file = True
    return load_checkpoint_to_cpu


# The model options of the checkpoints loaded last, by the state dict they hold: a model's load_state_dict
# (models/mixed_transformer.py) compares the file's options with its own and names the file when they differ.
_LOADED: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()


def remember_loaded(path, state) -> None:
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        cfg = state.get("cfg")
        model_cfg = cfg.get("model") if cfg is not None and hasattr(cfg, "get") else None
        _LOADED[id(state["model"])] = (str(path), model_cfg if model_cfg is not None else state.get("args"))
        while len(_LOADED) > 8:
            _LOADED.popitem(last=False)


def loaded_from(state_dict) -> tuple:
    """(file, the model options saved in it) of a state dict that a checkpoint file gave, else (None, None)."""
    return _LOADED.get(id(state_dict), (None, None))


if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "names_the_file", False):
    checkpoint_utils.load_checkpoint_to_cpu = _loading_naming_the_file(checkpoint_utils.load_checkpoint_to_cpu)
