#!/usr/bin/env python
"""Every attention kind on an accelerator (CUDA), checked against the CPU.

For every registered kind in every placement it supports (and every option
variant it declares for the conformance suite), the same module runs in float64
on the CPU (the reference) and in float32 on the device: outputs and input
gradients must agree (real positions; right padding for decoder
self-attention, left padding elsewhere), step-by-step decoding on the device
must equal the device's full pass, and forward+backward under bfloat16 and
float16 autocast (fairseq's --amp) must stay finite and close to the device's
float32 pass. Sequences are longer than every chunk (cosFormer: 64) and window
(the Extractors' lags) so that the chunked and windowed paths run.
``--speed`` adds forward+backward time and peak device memory of one decoder
self-attention layer (d = 512, 8 heads, batch 1, float32) at several lengths,
measured with CUDA events after a warm-up.

    python benchmarks/device_check.py [--device cuda] [--speed] [--lengths 1024,4096,16384]

Made for an accelerator (CI has none); ``--device cpu`` runs the same checks
with CPU autocast. Exits 1 when a check fails.
"""
import argparse
import copy
import math
import os
import sys
import time

import torch

if __package__ in (None, ""):  # run by path, not as python -m benchmarks.device_check: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fairseq_plugins  # noqa: E402,F401  (registers the kinds)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, build_attention  # noqa: E402

from fairseq_plugins.modules.cosformer.chunked import DEFAULT_CHUNK_SIZE  # noqa: E402

EMBED, HEADS, TGT, SRC, BSZ = 64, 4, 200, 150, 3
LAGS = 64
# Longer than every chunk and window, so that the chunked and windowed paths run.
assert min(TGT, SRC) > max(DEFAULT_CHUNK_SIZE, LAGS)
TOL = 1e-4  # float32 on the device against float64 on the CPU, relative to the output scale
# Autocast against float32 on the device, relative to the largest entry: 8 unit
# roundoffs of the autocast dtype (8 and 11 significant bits), as the
# conformance suite's test_forward_and_backward_under_autocast.
AMP_TOL = {torch.bfloat16: 8 * 2.0**-8, torch.float16: 8 * 2.0**-11}


class ModelConfig:
    """The model options build_attention reads, at the sizes of these checks (keyword arguments override)."""
    max_target_positions = 256
    max_source_positions = 256
    cosformer_max_positions = None
    extractor_lags = LAGS

    def __init__(self, **overrides):
        for name, value in overrides.items():
            setattr(self, name, value)


def padding_for(placement, length):
    """Row 1 padded: right padding for decoder self-attention (fairseq targets), left elsewhere (sources)."""
    pad = torch.zeros(BSZ, length, dtype=torch.bool)
    if placement == DECODER_SELF:
        pad[1, length - 7:] = True  # right padding (fairseq targets)
    else:
        pad[1, :5] = True  # left padding (fairseq sources)
    return pad


def _run(module, x, memory, pad, cross, autocast_dtype=None, parameters=False):
    """Forward and backward (under autocast to ``autocast_dtype`` if given): the
    output at real positions and the gradients of the inputs (and, with
    ``parameters``, those of all parameters as one vector), at least float32."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    memory = x if memory is None else memory.detach().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        out, _ = module(x, memory, memory, key_padding_mask=pad, static_kv=cross, need_weights=False)
    real = (~pad).T.unsqueeze(-1) if not cross else torch.ones_like(out[..., :1], dtype=torch.bool)
    out = _at_least_float32(out) * real
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(out)  # the same for every dtype
    (out * upstream).sum().backward()
    grads = [x.grad] + ([] if memory is x else [memory.grad])
    if parameters:
        grads.append(torch.cat([p.grad.flatten() for p in module.parameters()]))
    return out, [_at_least_float32(g) for g in grads]


def _at_least_float32(t):
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _autocast_errors(module, x, memory, pad, cross, dtype):
    """Autocast to ``dtype`` against float32, both on the module's device: relative
    errors of the output and the largest of the gradients'. Parameters and inputs
    are first rounded to ``dtype``, so that autocast's casts of them are exact and
    only its own rounding differs (otherwise a cosFormer ReLU feature rounded
    from 0 to a tiny positive value legitimately moves that head's output)."""
    module = copy.deepcopy(module).train()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(param.to(dtype))
    x = x.to(dtype).float()
    memory = None if memory is None else memory.to(dtype).float()
    out_ref, grads_ref = _run(module, x, memory, pad, cross, parameters=True)
    out_low, grads_low = _run(module, x, memory, pad, cross, dtype, parameters=True)
    if not (torch.isfinite(out_low).all() and all(torch.isfinite(g).all() for g in grads_low)):
        return math.inf, math.inf
    return _rel(out_low, out_ref), max(_rel(g, r) for g, r in zip(grads_low, grads_ref))


def _rel(a, b):
    return ((a.double().cpu() - b.double().cpu()).abs().max() / b.double().abs().max().clamp_min(1e-12)).item()


def check_kind(kind, placement, device, overrides=None):
    torch.manual_seed(0)
    reference = build_attention(kind, placement, EMBED, HEADS, ModelConfig(**(overrides or {}))).double().eval()
    on_device = copy.deepcopy(reference).float().to(device).eval()
    cross = placement == ENCODER_DECODER
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(TGT, BSZ, EMBED, generator=gen, dtype=torch.float64)
    memory = torch.randn(SRC, BSZ, EMBED, generator=gen, dtype=torch.float64) if cross else None
    pad = padding_for(placement, SRC if cross else TGT)
    out_ref, grads_ref = _run(reference, x, memory, pad, cross)
    out_dev, grads_dev = _run(
        on_device, x.float().to(device), None if memory is None else memory.float().to(device), pad.to(device), cross
    )
    errors = {"output": _rel(out_dev, out_ref)}
    for i, (g_dev, g_ref) in enumerate(zip(grads_dev, grads_ref)):
        errors[f"grad{i}"] = _rel(g_dev, g_ref)
    if placement == DECODER_SELF:  # step-by-step decoding on the device equals its full pass
        with torch.no_grad():
            xd, padd = x.float().to(device), pad.to(device)
            full, _ = on_device(xd, xd, xd, key_padding_mask=padd, need_weights=False)
            state, steps = {}, []
            for t in range(TGT):
                tok = xd[t : t + 1]
                step, _ = on_device(tok, tok, tok, key_padding_mask=padd[:, t : t + 1], incremental_state=state, need_weights=False)
                steps.append(step)
            real = (~padd).T.unsqueeze(-1)
            errors["decode"] = _rel(torch.cat(steps) * real, full * real)
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        errors[name], errors[f"{name}_grad"] = _autocast_errors(
            on_device, x.float().to(device), None if memory is None else memory.float().to(device), pad.to(device), cross, dtype
        )
    return errors


def speed(device, lengths, kinds):
    results = []
    for kind in kinds:
        for length in lengths:
            cfg = ModelConfig()
            cfg.max_target_positions = cfg.cosformer_max_positions = max(lengths)
            cfg.extractor_lags = 128
            torch.manual_seed(0)
            module = build_attention(kind, DECODER_SELF, 512, 8, cfg).to(device)
            x = torch.randn(length, 1, 512, device=device, requires_grad=True)
            mask = torch.full((length, length), float("-inf"), device=device).triu_(1) if module.uses_future_mask else None

            def step():
                out, _ = module(x, x, x, attn_mask=mask, need_weights=False)
                out.sum().backward()
                x.grad = None
                module.zero_grad(set_to_none=True)

            try:
                step()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                times = []
                for _ in range(5):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    step()
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                peak = torch.cuda.max_memory_allocated() - base
                results.append((kind, length, sorted(times)[len(times) // 2], peak / 1e6, None))
            except torch.cuda.OutOfMemoryError:
                results.append((kind, length, None, None, "out of memory"))
            del module, x, mask
            torch.cuda.empty_cache()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--speed", action="store_true", help="also time one decoder self-attention layer per kind")
    parser.add_argument("--lengths", default="1024,4096,16384")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check needs an accelerator (--device)")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, so that TOL means float32
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"# torch {torch.__version__}, device {name}")
    failed = []
    print("| kind | placement | output | input grads | decode | bf16 autocast: output, grads | fp16 autocast: output, grads |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, spec in sorted(ATTENTION_REGISTRY.items()):
        variants = [(None, None, spec.placements)]
        variants += [(name, v.overrides, v.placements) for name, v in spec.conformance_variants.items()]
        for variant, overrides, placements in variants:
            label = kind if variant is None else f"{kind}[{variant}]"
            for placement in placements:
                errors = check_kind(kind, placement, args.device, overrides)
                grads = max(v for k, v in errors.items() if k.startswith("grad"))
                ok = errors["output"] < TOL and grads < TOL and errors.get("decode", 0) < TOL
                ok = ok and all(errors[f"{n}{part}"] < AMP_TOL[d] for n, d in (("bf16", torch.bfloat16), ("fp16", torch.float16)) for part in ("", "_grad"))
                if not ok:
                    failed.append(f"{label}/{placement}")
                decode = f"{errors['decode']:.1e}" if "decode" in errors else "-"
                amp = " | ".join(f"{errors[n]:.1e}, {errors[f'{n}_grad']:.1e}" for n in ("bf16", "fp16"))
                mark = "" if ok else " **FAILED**"
                print(f"| {label} | {placement} | {errors['output']:.1e} | {grads:.1e} | {decode} | {amp}{mark} |")
    print(
        f"\nrelative max errors, T = {TGT} (encoder-decoder: {SRC} source tokens), batch {BSZ} with padding; device float32 vs "
        f"CPU float64 (tolerance {TOL:g}); decode: step by step vs full pass on the device; autocast vs float32 on the "
        f"device, gradients of inputs and parameters (tolerance 8 unit roundoffs: bf16 {AMP_TOL[torch.bfloat16]:.2g}, "
        f"fp16 {AMP_TOL[torch.float16]:.2g})"
    )
    if args.speed:
        lengths = [int(t) for t in args.lengths.split(",") if t]
        kinds = [k for k, s in sorted(ATTENTION_REGISTRY.items()) if DECODER_SELF in s.placements]
        print(f"\n| kind | T | forward+backward (median of 5) | peak memory above inputs |")
        print("| --- | ---: | ---: | ---: |")
        for kind, length, ms, mb, error in speed(args.device, lengths, kinds):
            print(f"| {kind} | {length} | {error or f'{ms:.2f} ms'} | {'-' if mb is None else f'{mb:.0f} MB'} |")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"# {time.time() - started:.0f} s")
    sys.exit(code)
