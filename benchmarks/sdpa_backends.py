#!/usr/bin/env python
"""Which of PyTorch's fused-attention backends give the right gradients on this CUDA device.

For the kinds that run ``scaled_dot_product_attention`` (softmax through fairseq's fast path, bet), in
their decoder self-attention placement and every conformance variant: the output and the gradients of
the input and of every parameter, on the device in float32 and under float16 / bfloat16 autocast, once
with PyTorch's own choice of backend ("default", which the kinds restrict: they never run cuDNN,
``without_cudnn_attention``) and once with each backend forced (``torch.nn.attention.sdpa_kernel``),
against float64 on the CPU (parameters and input rounded to float16 first, so that every dtype sees the
same numbers). Relative max errors (absolute where the reference gradient is zero); a backend that cannot
run the case says so. docs/records/gpu.md shows a run.

    python benchmarks/sdpa_backends.py [--lengths 200,64,16]
"""
import argparse
import contextlib
import copy
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import device_check  # noqa: E402  (its sizes, padding and model configuration, public for this)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, build_attention  # noqa: E402

KINDS = ("softmax", "bet")
ROWS = [("fp32 default", None, None)] + [(f"fp32 {b.name}", None, [b]) for b in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION)]
for _dtype, _name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
    ROWS += [(f"{_name} default", _dtype, None)] + [
        (f"{_name} {b.name}", _dtype, [b])
        for b in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)
    ]


def gradients(module, x, pad, dtype=None, backends=None):
    """Output (real positions) and the gradients of the input and of every parameter, float64 on the CPU."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    forced = sdpa_kernel(backends) if backends else contextlib.nullcontext()
    with forced, torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out, _ = module(x, x, x, key_padding_mask=pad, need_weights=False)
    real = (~pad).T.unsqueeze(-1) if pad is not None else torch.ones_like(out[..., :1], dtype=torch.bool)
    out = out.double() * real
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(out.device)
    (out * upstream).sum().backward()
    found = {"output": out.detach(), "input": x.grad}
    found.update({name: p.grad for name, p in module.named_parameters()})
    return {name: None if g is None else g.double().cpu() for name, g in found.items()}


# A reference gradient this small is zero up to float64 rounding (softmax's key bias: the softmax does not
# change when every score of a query moves by the same amount): its error is given absolute ("abs:").
ZERO_GRADIENT = 1e-12


def relative(a, b):
    if a is None or b is None:
        return "none" if a is None and b is None else "missing"
    error, scale = (a - b).abs().max().item(), b.abs().max().item()
    return f"abs:{error:.1e}" if scale < ZERO_GRADIENT else f"{error / scale:.1e}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="200,64,16", help="sequence lengths (default: %(default)s)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check compares CUDA's attention backends")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}; relative max errors against float64 on the CPU")
    for kind in KINDS:
        spec = ATTENTION_REGISTRY[kind]
        variants = [(None, {})] + [(name, v.overrides) for name, v in spec.conformance_variants.items() if DECODER_SELF in v.placements]
        for variant, overrides in variants:
            label = kind if variant is None else f"{kind}[{variant}]"
            for length in (int(t) for t in args.lengths.split(",") if t):
                for padded in (True, False):
                    torch.manual_seed(0)
                    reference = build_attention(kind, DECODER_SELF, device_check.EMBED, device_check.HEADS,
                                                device_check.ModelConfig(**overrides)).double().train()
                    with torch.no_grad():
                        for param in reference.parameters():
                            param.copy_(param.to(torch.float16))
                    x = torch.randn(length, device_check.BSZ, device_check.EMBED, generator=torch.Generator().manual_seed(1),
                                    dtype=torch.float64).to(torch.float16).double()
                    pad = device_check.padding_for(DECODER_SELF, length) if padded else None
                    expected = gradients(reference, x, pad)
                    on_device = copy.deepcopy(reference).float().cuda()
                    xd, padd = x.float().cuda(), None if pad is None else pad.cuda()
                    for row, dtype, backends in ROWS:
                        head = f"{label} T={length} {'right-padded' if padded else 'no padding'} {row}:"
                        try:
                            found = gradients(on_device, xd, padd, dtype, backends)
                        except RuntimeError as exc:  # a backend that cannot run this case
                            print(f"{head} cannot run ({str(exc).splitlines()[0][:100]})", flush=True)
                            continue
                        print(head + " " + " ".join(f"{name}={relative(found[name], expected[name])}" for name in expected), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
