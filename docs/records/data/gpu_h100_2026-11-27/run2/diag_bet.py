"""Which gradient of bet[no_diag_free] differs under CUDA autocast, and which sdpa backend causes it."""
import copy, sys, os, contextlib
sys.path.insert(0, os.getcwd())
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import benchmarks.device_check as dc
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, build_attention
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

def grads(module, x, pad, dtype=None, backends=None):
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    ctx = sdpa_kernel(backends) if backends else contextlib.nullcontext()
    with ctx, torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out, _ = module(x, x, x, key_padding_mask=pad, need_weights=False)
    real = (~pad).T.unsqueeze(-1) if pad is not None else torch.ones_like(out[..., :1], dtype=torch.bool)
    out = out.double() * real
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(out.device)
    (out * up).sum().backward()
    g = {"out": out.detach(), "x": x.grad}
    g.update({n: p.grad for n, p in module.named_parameters()})
    return {k: (v.double().cpu() if v is not None else None) for k, v in g.items()}

def rel(a, b):
    if a is None or b is None:
        return f"{a is None}/{b is None}"
    return f"{((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item():.1e}"

for variant in ("no_diag_free", None):
    overrides = ATTENTION_REGISTRY["bet"].conformance_variants[variant].overrides if variant else {}
    for T, padded in ((200, True), (200, False), (64, False), (16, False)):
        torch.manual_seed(0)
        ref = build_attention("bet", DECODER_SELF, dc.EMBED, dc.HEADS, dc._Cfg(**overrides)).double().train()
        x = torch.randn(T, dc.BSZ, dc.EMBED, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        pad = dc._pad(DECODER_SELF, T) if padded else None
        # parameters rounded to fp16 so every dtype sees the same numbers
        with torch.no_grad():
            for p in ref.parameters():
                p.copy_(p.to(torch.float16))
        x = x.to(torch.float16).double()
        r = grads(ref, x, pad)
        dev = copy.deepcopy(ref).float().cuda()
        xd, pd = x.float().cuda(), None if pad is None else pad.cuda()
        rows = [("fp32 default", None, None), ("fp32 MATH", None, [SDPBackend.MATH]), ("fp32 EFFICIENT", None, [SDPBackend.EFFICIENT_ATTENTION]),
                ("fp32 CUDNN", None, [SDPBackend.CUDNN_ATTENTION]),
                ("fp16 default", torch.float16, None), ("fp16 MATH", torch.float16, [SDPBackend.MATH]), ("fp16 FLASH", torch.float16, [SDPBackend.FLASH_ATTENTION]),
                ("fp16 EFFICIENT", torch.float16, [SDPBackend.EFFICIENT_ATTENTION]), ("fp16 CUDNN", torch.float16, [SDPBackend.CUDNN_ATTENTION]),
                ("bf16 default", torch.bfloat16, None), ("bf16 FLASH", torch.bfloat16, [SDPBackend.FLASH_ATTENTION])]
        for name, dtype, backends in rows:
            try:
                g = grads(dev, xd, pd, dtype, backends)
                print(f"bet[{variant}] T={T} pad={padded} {name}: " + " ".join(f"{k}={rel(g[k], r[k])}" for k in r), flush=True)
            except Exception as exc:
                print(f"bet[{variant}] T={T} pad={padded} {name}: {type(exc).__name__}: {str(exc)[:150]}", flush=True)
