"""fairseq_plugins.checkpoint_compat allows the classes fairseq's checkpoints
and their broadcast need, and weights-only loading still refuses everything
else: pickles that would run code, also when hidden inside the omegaconf
config that is now allowed. (That exactly the allowed classes are needed is
checked on real checkpoints: tests/cli/test_end_to_end.py for the file,
tests/cli/test_cpu_distributed_train.py for fairseq's broadcast of it.)
Every load below uses torch.load's default, weights_only=True."""
import collections
import io
import os
import pickle

import numpy
import pytest
import torch
from omegaconf import OmegaConf

from fairseq_plugins.checkpoint_compat import BROADCAST_GLOBALS, CHECKPOINT_GLOBALS, EVAL_BLEU_GLOBALS, SAFE_GLOBALS


class RunsShell:
    """Unpickling this runs a shell command (the classic malicious pickle)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class EvalsCode:
    """Unpickling this evaluates Python code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return eval, (f"open({self.marker!r}, 'w').close()",)


class ShellFactoryDefaultdict:
    """An allowed class (collections.defaultdict) built around a disallowed callable."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return collections.defaultdict, (os.system,)


def saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_registered_safe_globals_are_exactly_the_listed_ones():
    # Importing the package registers these and nothing else (torch registers
    # some of its own classes, e.g. for nested tensors, when they are imported).
    assert set(SAFE_GLOBALS) == set(CHECKPOINT_GLOBALS) | set(BROADCAST_GLOBALS) | set(EVAL_BLEU_GLOBALS)
    registered = [entry[0] if isinstance(entry, tuple) else entry for entry in torch.serialization.get_safe_globals()]
    assert {g for g in registered if not g.__module__.startswith("torch.")} == set(SAFE_GLOBALS)


@pytest.mark.parametrize(
    "payload, refused",
    [
        (RunsShell, r"GLOBAL (posix|nt)\.system"),
        (EvalsCode, r"Unsupported global: GLOBAL eval\b"),
        (ShellFactoryDefaultdict, r"GLOBAL (posix|nt)\.system"),
    ],
)
def test_malicious_pickles_are_refused(payload, refused, tmp_path):
    marker = tmp_path / "code-ran"
    # Inside a state shaped like a checkpoint, next to a legitimate tensor.
    buffer = saved({"model": {"w": torch.ones(2)}, "args": payload(marker)})
    with pytest.raises(pickle.UnpicklingError, match=refused):
        torch.load(buffer)
    assert not marker.exists()


def test_malicious_object_inside_an_allowed_config_is_refused(tmp_path):
    # The broadcast state carries the config as a DictConfig whose leaves may
    # be arbitrary objects (fairseq sets allow_objects): allowing DictConfig
    # must not let an object in it through.
    marker = tmp_path / "code-ran"
    cfg = OmegaConf.create({"model": {"arch": "x"}}, flags={"allow_objects": True})
    cfg.model.arch = RunsShell(marker)
    buffer = saved({"cfg": cfg, "model": {"w": torch.ones(2)}})
    with pytest.raises(pickle.UnpicklingError, match=r"GLOBAL (posix|nt)\.system"):
        torch.load(buffer)
    assert not marker.exists()


def test_config_with_allowed_leaves_loads():
    # The counterpart: the same config with fairseq's kinds of values loads.
    cfg = OmegaConf.create({"common": {"seed": 1, "lr": [0.001], "arch": None}}, flags={"allow_objects": True})
    loaded = torch.load(saved({"cfg": cfg}))["cfg"]
    assert OmegaConf.to_container(loaded) == OmegaConf.to_container(cfg)


@pytest.mark.parametrize("counts", [
    numpy.array([3, 2, 1, 0]),  # one process: the task's counts are Python ints
    numpy.array([torch.tensor(3.0, dtype=torch.double), torch.tensor(2.0, dtype=torch.double)]),  # summed across ranks
], ids=["int64", "float64 (several ranks)"])
def test_eval_bleu_meters_load(counts, tmp_path):
    # fairseq's translation task keeps --eval-bleu's n-gram counts as numpy arrays in the
    # checkpoint's meters: int64 on one process, float64 after the cross-rank sum.
    loaded = torch.load(saved({"extra_state": {"metrics": {"_bleu_counts": counts}}}))
    assert numpy.array_equal(loaded["extra_state"]["metrics"]["_bleu_counts"], numpy.asarray(counts, dtype=counts.dtype))
