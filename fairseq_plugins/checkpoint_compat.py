"""Let torch >= 2.6 load fairseq checkpoints with ``weights_only=True``.

torch 2.6 made ``weights_only=True`` the default of ``torch.load``. Besides
tensors and plain containers, fairseq checkpoints pickle the training
arguments as an ``argparse.Namespace`` (``state["args"]`` and the ``_name``-less
parts of ``state["cfg"]``). That single class is allowed here; weights-only
loading is never switched off (tests/test_checkpoint_compat.py checks that a
checkpoint written by fairseq-train lists nothing else).
"""
import argparse

import torch

SAFE_GLOBALS = [argparse.Namespace]
torch.serialization.add_safe_globals(SAFE_GLOBALS)
