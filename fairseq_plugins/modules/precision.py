"""How the kinds' hand-written parts behave under ``torch.autocast``.

fairseq's ``--amp`` (and ``--fp16``/``--bf16`` with autocast) runs training
under ``torch.autocast``, which rewrites the dtypes of the ops it knows. Code
that autocast cannot see into (custom autograd Functions, whose backward calls
ops autocast does not cast) or that must not run in low precision (running sums
of linear attention: float16 overflows, bfloat16 keeps 8 significant bits)
declares what it does with these helpers.
"""
import contextlib
import functools
from typing import Optional

import torch
from torch import Tensor

# The device types whose autocast our custom autograd Functions declare a
# behaviour for: CUDA (fairseq's mixed-precision training) and the CPU (tests,
# CPU training). torch.amp.custom_fwd takes one device type per decorator.
AUTOCAST_DEVICE_TYPES = ("cuda", "cpu")


def float32_forward(forward):
    """``torch.amp.custom_fwd(cast_inputs=torch.float32)`` for every device type in
    ``AUTOCAST_DEVICE_TYPES``: under autocast, the Function's forward gets its
    floating-point inputs in float32 and runs with autocast off; outside autocast
    nothing changes."""
    for device_type in AUTOCAST_DEVICE_TYPES:
        forward = torch.amp.custom_fwd(forward, device_type=device_type, cast_inputs=torch.float32)
    return forward


def float32_backward(backward):
    """``torch.amp.custom_bwd`` for every device type in ``AUTOCAST_DEVICE_TYPES``:
    the backward of a ``float32_forward`` runs with autocast off too."""
    for device_type in AUTOCAST_DEVICE_TYPES:
        backward = torch.amp.custom_bwd(backward, device_type=device_type)
    return backward


def _autocast_enabled(device_type: str) -> bool:
    # torch.is_autocast_enabled raises for device types without autocast (meta: models built to be counted);
    # cpu and cuda always have it, so they skip that query: this check sits on decoding's per-token path,
    # where every torch call showed (benchmarks/paired_speed.py: cosFormer's step was ~5 % slower with two
    # queries and a null context than with none)
    if device_type not in AUTOCAST_DEVICE_TYPES and not torch.amp.is_autocast_available(device_type):
        return False
    return torch.is_autocast_enabled(device_type)


def autocast_off(device_type: str):
    """A context in which autocast is off for ``device_type`` (a no-op where it is off already)."""
    if _autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def without_autocast(fn):
    """Decorator: ``fn`` runs with autocast off on the device of its first argument (a tensor)."""

    @functools.wraps(fn)
    def run(x: Tensor, *args, **kwargs):
        device_type = x.device.type
        if not _autocast_enabled(device_type):  # the common case: call straight through, no context
            return fn(x, *args, **kwargs)
        with torch.autocast(device_type, enabled=False):
            return fn(x, *args, **kwargs)

    return run


def autocast_dtype(x: Tensor) -> Optional[torch.dtype]:
    """The dtype autocast casts ``x`` to for a low-precision op (a matrix product,
    a convolution), or None where autocast leaves it alone: autocast off on its
    device, or ``x`` not floating point or float64."""
    device_type = x.device.type
    if not x.is_floating_point() or x.dtype == torch.float64 or not _autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)
