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
import typing

import numpy
import torch
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
