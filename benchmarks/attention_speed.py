#!/usr/bin/env python
"""Speed and memory of one causal self-attention layer (CPU, or a CUDA device).

Compares, for one decoder self-attention layer (d = 512, 8 heads, batch 1,
float32; on ``--device``, by default ``cuda`` when available, else ``cpu``):

* ``softmax``: fairseq's MultiheadAttention as wrapped by our ``softmax`` kind,
  with fairseq's causal (future) mask;
* ``cosformer``: our cosFormer kind (chunked causal form);
* ``cosformer_reference_cumsum``: the public reference's causal formulation
  (the authors' ``cosformer.py``), which materialises the T x 2d x d cumulative
  sum of the cos/sin-weighted k v^T outer products; defined in this file;
* ``extractor_she``, ``extractor_he``, ``extractor_we``, ``extractor_me``: the
  Extractor kinds (Chen 2023) with a window of ``--extractor-lags`` lags
  (default 128, the paper's context window); they have no heads;
* ``bet``: the Bird-Eye Transformer's BET(SF) attention (Sha et al. 2022), when
  registered.

It reports forward+backward time (median of repeated runs after a warm-up),
peak memory (fresh subprocess per cell), achieved GFLOP/s (FLOPs counted per
kind from the algorithm that runs, see ``layer_flops``) against the device's
float32 matrix-multiply peak measured in the same run, the cost per generated
token of incremental decoding at several prefix lengths, ratios between the
kinds and the growth of the time per doubling of T against each kind's
complexity, all from the same run. With ``--output X.md`` it writes a markdown
report (command, versions, git revision, core count, device, tables, targets)
and, next to it, ``X_speed.png``: time and memory vs T, log-log.

    python benchmarks/attention_speed.py                      # full run (T = 256 .. 16384)
    python benchmarks/attention_speed.py --quick              # smoke run (a couple of minutes)
    python benchmarks/attention_speed.py --output docs/benchmarks.md   # + docs/benchmarks_speed.png
    python benchmarks/attention_speed.py --device cuda        # the same on a GPU

On CUDA, runs are timed with ``torch.cuda.synchronize()`` before and after,
and memory is ``torch.cuda.max_memory_allocated()`` above the allocation at
the reset (``reset_peak_memory_stats``); TF32 is off, so that every product
is float32 like the peak it is compared with.
"""
import argparse
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

if __package__ in (None, ""):  # run by path, not as python -m benchmarks.attention_speed: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.provenance import available_cores, git_revision, is_dirty, load_average  # noqa: E402
from fairseq_plugins.files import atomic_output  # noqa: E402

import fairseq_plugins.modules  # noqa: E402  (registers the kinds)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF  # noqa: E402
from fairseq_plugins.modules.extractors.costs import EXTRACTOR_KINDS, fft_flops  # noqa: E402,F401  (fft_flops: the FFT count the formulas use)

# Baselines defined in this file, not registered kinds: each is timed next to the kind it reimplements.
BASELINES = {"cosformer_reference_cumsum": "cosformer"}
# Every registered kind of causal self-attention, in registration order, each followed by its baselines.
KINDS = tuple(
    k
    for name, spec in ATTENTION_REGISTRY.items()
    if DECODER_SELF in spec.placements
    for k in (name, *(b for b, of in BASELINES.items() if of == name))
)
# Kinds with incremental decoding (the baselines have none).
DECODE_KINDS = tuple(k for k in KINDS if k not in BASELINES)
DEFAULT_EXTRACTOR_LAGS = 128  # the Extractor paper's context window l
EMBED_DIM = 512
HEADS = 8
HORIZON = 16384  # cosFormer's M (--cosformer-max-positions): covers the longest T
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)  # cells whose estimate does not fit are skipped
DEFAULT_PREFIXES = (128, 1024, 4096)
# --quick: a smoke run of a couple of minutes (options given explicitly still win)
QUICK = {"lengths": "256,1024", "repeats": 2, "decode_prefixes": "128,1024", "decode_steps": 10, "chunk_sweep": ""}
FULL = {"lengths": ",".join(map(str, DEFAULT_LENGTHS)), "repeats": 5, "decode_prefixes": ",".join(map(str, DEFAULT_PREFIXES)),
        "decode_steps": 50, "chunk_sweep": "32,64,128"}
MEMORY_LIMIT_BYTES = 16e9  # CPU: cells estimated above this are skipped with a note (and above 85 % of MemAvailable)
DEVICE_MEMORY_FRACTION = 0.85  # CUDA: cells estimated above this fraction of the free device memory are skipped
# The time(2T) / time(T) targets allow the growth of each kind's fastest-growing term plus this margin.
GROWTH_MARGIN = 1.05
# Matrix products timed for the float32 peak: (M, K, N) of (M x K) @ (K x N). The first is the layer's own
# projection at T = 4096; on CUDA larger ones are needed to fill the device.
PEAK_SHAPES = {"cpu": ((4096, EMBED_DIM, EMBED_DIM), (2048, 2048, 2048)),
               "cuda": ((4096, EMBED_DIM, EMBED_DIM), (4096, 4096, 4096), (8192, 8192, 8192))}
CELL_BUDGET_S = 15.0  # timed runs of a cell are cut to stay near this budget (at least 2)
# glibc keeps freed blocks below its (dynamically raised) mmap threshold resident, so the peak RSS of a
# default process also measures that caching, which varies by tens of MB from run to run. The second
# memory measurement holds the threshold at glibc's initial 128 KiB, so that RSS follows the live
# allocations.
FIXED_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


# ---------------------------------------------------------------------------
# The reference cumulative-sum formulation (the authors' causal path)
# ---------------------------------------------------------------------------


def cosformer_reference_cumsum(q, k, v, angle, eps=1e-6):
    """Causal cosFormer as in the authors' ``cosformer.py``: q, k (after ReLU), v: (N, L, d)
    with N = batch * heads; angle: (N or 1, L, 1). Materialises (N, L, 2d, d) tensors."""
    # (N, L, 2d): [x sin, x cos] features, as in the reference.
    q_ = torch.cat([q * torch.sin(angle), q * torch.cos(angle)], dim=-1)
    k_ = torch.cat([k * torch.sin(angle), k * torch.cos(angle)], dim=-1)
    # (N, L, 2d) (N, L, d) -> (N, L, 2d, d)
    kv_ = torch.einsum("nld,nlm->nldm", k_, v)
    # (N, L, 2d, d) -> (N, L, 2d, d)
    kv_cum = torch.cumsum(kv_, dim=1)
    # (N, L, 2d) (N, L, 2d, d) -> (N, L, d)
    qkv = torch.einsum("nld,nldm->nlm", q_, kv_cum)
    # (N, L, 2d) -> (N, L, 2d)
    k_cum = torch.cumsum(k_, dim=1)
    # (N, L, 2d) (N, L, 2d) -> (N, L)
    denom = torch.clamp_min(torch.einsum("nlm,nlm->nl", q_, k_cum), eps)
    return qkv / denom.unsqueeze(-1)


class ReferenceCumsumAttention(torch.nn.Module):
    """The projections, ReLU feature map and output projection of a cosFormer module, with the
    reference's cumulative-sum causal attention in between. Positions and horizon follow our module
    (angle = pi/2 * i / M, i from 0), so both compute the same function; the authors' 1-based index
    with M = T changes only constants, not cost."""

    def __init__(self, cosformer_module):
        super().__init__()
        m = cosformer_module
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = m.q_proj, m.k_proj, m.v_proj, m.out_proj
        self.num_heads, self.head_dim, self.horizon, self.eps = m.num_heads, m.head_dim, m.horizon, m.eps

    def forward(self, query, key=None, value=None, **unused):
        tgt_len, bsz, embed_dim = query.shape

        def split(x):  # (L, B, E) -> (B * h, L, d)
            return x.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)

        q = split(torch.relu(self.q_proj(query)))
        k = split(torch.relu(self.k_proj(query)))
        v = split(self.v_proj(query))
        angle = (math.pi / 2) * torch.arange(tgt_len, dtype=q.dtype, device=q.device).view(1, -1, 1) / self.horizon
        out = cosformer_reference_cumsum(q, k, v, angle, self.eps)
        out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


# ---------------------------------------------------------------------------
# Worker side: measurements in fresh processes
# ---------------------------------------------------------------------------


class _Cfg:
    cosformer_max_positions = HORIZON
    max_target_positions = HORIZON
    extractor_lags = DEFAULT_EXTRACTOR_LAGS


def build(kind, chunk_size=None, seed=0, lags=None, device="cpu", embed_dim=EMBED_DIM, heads=HEADS):
    from fairseq_plugins.modules import build_attention

    cfg = _Cfg()
    if lags is not None:
        cfg.extractor_lags = lags
    torch.manual_seed(seed)
    if kind == "cosformer_reference_cumsum":
        return ReferenceCumsumAttention(build_attention("cosformer", "decoder_self", embed_dim, heads, cfg)).to(device)
    module = build_attention(kind, "decoder_self", embed_dim, heads, cfg)
    if chunk_size is not None:
        module.chunk_size = chunk_size
    return module.to(device)


def future_mask(length, device="cpu"):
    """fairseq's future mask (-inf above the diagonal), built without a transient copy."""
    return torch.full((length, length), float("-inf"), device=device).triu_(1)


def synchronize(device):
    """Wait for the device's queued work (CUDA kernels run asynchronously); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def setup_device(device):
    """float32 products on CUDA (no TF32), so that achieved and peak FLOP/s are both float32."""
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


class Cell:
    """One layer and its input for forward+backward runs."""

    def __init__(self, kind, length, chunk_size=None, lags=None, device="cpu"):
        self.kind = kind
        self.device = device
        self.module = build(kind, chunk_size, lags=lags, device=device)
        self.x = torch.randn(length, 1, EMBED_DIM, device=device, requires_grad=True)
        # fairseq's decoder builds its future mask once and reuses it: an input here. Kinds that are
        # causal by construction get none (the mixed decoder does not build it for them).
        self.mask = future_mask(length, device) if getattr(self.module, "uses_future_mask", False) else None

    def step(self):
        out, _ = self.module(self.x, self.x, self.x, attn_mask=self.mask, need_weights=False)
        out.sum().backward()
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)

    def timed_step(self):
        synchronize(self.device)
        t0 = time.perf_counter()
        self.step()
        synchronize(self.device)
        return time.perf_counter() - t0


def _warm_up_libraries(kind, lags=None, device="cpu"):
    """A tiny forward+backward, so that thread pools and BLAS buffers (on CUDA: the context, cuBLAS and
    cuDNN handles) exist before any baseline."""
    Cell(kind, 16, lags=min(lags or DEFAULT_EXTRACTOR_LAGS, 16), device=device).step()
    synchronize(device)


def _reset_peak_rss():
    """Reset the kernel's peak-RSS mark (and so ru_maxrss) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes():
    """The kernel's peak-RSS mark of this process. VmHWM where /proc has it: ru_maxrss is the same mark
    but also carries over the RSS of the process that spawned this one (fork + exec keeps it), which
    hides the peaks of small cells; elsewhere ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker_memory(spec):
    """Peak RSS of forward+backward above the RSS after building module and input (CPU); on CUDA the peak
    of torch's allocations above those at the reset."""
    device = spec.get("device", "cpu")
    _warm_up_libraries(spec["kind"], spec.get("lags"), device)
    cell = Cell(spec["kind"], spec["length"], spec.get("chunk_size"), spec.get("lags"), device)
    gc.collect()
    if torch.device(device).type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        for _ in range(spec.get("runs", 2)):
            cell.step()
        synchronize(device)
        return {"peak_bytes": torch.cuda.max_memory_allocated(device) - baseline, "peak_reset": True}
    reset = _reset_peak_rss()
    baseline = _peak_rss_bytes() if reset else _rss_bytes()
    for _ in range(spec.get("runs", 2)):
        cell.step()
    return {"peak_bytes": _peak_rss_bytes() - baseline, "peak_reset": reset}


def worker_time(spec):
    """Forward+backward times of several kinds (or chunk sizes) at one T, run round-robin so that all
    see the same machine load: one warm-up each, then timed runs until each has its count."""
    device = spec.get("device", "cpu")
    cells = {}
    for key in spec["cells"]:
        kind, _, chunk = key.partition(":")
        _warm_up_libraries(kind, spec.get("lags"), device)
        cells[key] = Cell(kind, spec["length"], int(chunk) if chunk else None, spec.get("lags"), device)
    warm = {key: cell.timed_step() for key, cell in cells.items()}
    budget = spec.get("budget_s", CELL_BUDGET_S)
    wanted = {key: max(2, min(spec["repeats"], int(budget / max(w, 1e-4)))) for key, w in warm.items()}
    times = {key: [] for key in cells}
    while any(len(times[key]) < wanted[key] for key in cells):
        for key, cell in cells.items():
            if len(times[key]) < wanted[key]:
                times[key].append(cell.timed_step())
    return {"times": times, "warmup": warm}


def worker_decode(spec):
    """Cost per new token with incremental_state after prefixes of several lengths. Every (kind, prefix)
    pair first takes its prefix; then the pairs take single-token steps in turn, so that all see the
    same machine load."""
    device = spec.get("device", "cpu")
    modules = {kind: build(kind, lags=spec.get("lags"), device=device).eval() for kind in spec["kinds"]}
    states, results = {}, {kind: {} for kind in modules}
    with torch.no_grad():
        for prefix in spec["prefixes"]:
            x = torch.randn(prefix, 1, EMBED_DIM, device=device)
            for kind, module in modules.items():
                states[kind, prefix] = {}
                mask = future_mask(prefix, device) if getattr(module, "uses_future_mask", False) else None
                module(x, x, x, incremental_state=states[kind, prefix], attn_mask=mask, need_weights=False)
                results[kind][str(prefix)] = []
        for step in range(spec["warmup_steps"] + spec["steps"]):
            tok = torch.randn(1, 1, EMBED_DIM, device=device)
            for (kind, prefix), state in states.items():
                synchronize(device)
                t0 = time.perf_counter()
                modules[kind](tok, tok, tok, incremental_state=state, need_weights=False)
                synchronize(device)
                if step >= spec["warmup_steps"]:
                    results[kind][str(prefix)].append(time.perf_counter() - t0)
    return {"per_token": results}


def worker_peak(spec):
    """The device's float32 matrix-multiply peak: for each shape, the best of repeated (M x K) @ (K x N)
    products (at least 5, and at least ``min_s`` seconds in all, after one warm-up); and what the device is."""
    device = spec.get("device", "cpu")
    is_cuda = torch.device(device).type == "cuda"
    info = {}
    if is_cuda:  # before this process allocates anything (its own context counts as used)
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info(device)
        props = torch.cuda.get_device_properties(device)
        info.update(name=torch.cuda.get_device_name(device), total_bytes=total, free_bytes=free,
                    cuda=torch.version.cuda, capability=f"{props.major}.{props.minor}")
    products = []
    for m, k, n in spec["shapes"]:
        a = torch.randn(m, k, device=device)
        b = torch.randn(k, n, device=device)
        out = torch.empty(m, n, device=device)
        torch.mm(a, b, out=out)  # warm-up
        times = []
        while len(times) < 5 or (sum(times) < spec.get("min_s", 0.5) and len(times) < 200):
            synchronize(device)
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            synchronize(device)
            times.append(time.perf_counter() - t0)
        best = min(times)
        products.append({"shape": [m, k, n], "best_s": best, "runs": len(times), "gflops": 2 * m * k * n / best / 1e9})
        del a, b, out
    info.update(products=products, peak_gflops=max(p["gflops"] for p in products))
    return info


def run_worker(spec):
    torch.set_num_threads(spec["threads"])
    setup_device(spec.get("device", "cpu"))
    workers = {"memory": worker_memory, "time": worker_time, "decode": worker_decode, "peak": worker_peak}
    return workers[spec["mode"]](spec)


# ---------------------------------------------------------------------------
# Driver side
# ---------------------------------------------------------------------------


def mem_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def estimate_bytes(kind, length, lags=DEFAULT_EXTRACTOR_LAGS):
    """Rough peak estimate (float32, on the high side), to skip cells that cannot fit."""
    head_dim = EMBED_DIM // HEADS
    activations = 40 * length * EMBED_DIM * 4
    if kind == "extractor_she":
        # l d x d extraction weights and their gradient, the activations, and for the direct path conv1d's
        # T x l d im2col buffer (2.73 GB measured at T = 8192, l = 128); for the FFT path the (n/2+1) x d x d
        # complex kernel spectrum, its gradient and the product.
        weights = 2 * lags * EMBED_DIM * EMBED_DIM * 4 + 60 * length * EMBED_DIM * 4
        if extractor_conv_impl(kind, length, lags) == "fft":
            from fairseq_plugins.modules.extractors.conv import fft_length

            return weights + 3 * (fft_length(length + min(lags, length) - 1) // 2 + 1) * EMBED_DIM * EMBED_DIM * 8
        return weights + length * min(lags, length) * EMBED_DIM * 4
    if kind == "bet":
        # fused scaled_dot_product_attention (no T x T tensors kept; 388 MB measured at T = 8192 on CPU)
        # with a T^2 allowance for the kernels' buffers
        return 8 * length * length + 1.6 * activations
    if kind == "cosformer_reference_cumsum":
        # kv_, kv_cum and their gradients: ~4.5 tensors of (h, T, 2d, d) (4.7 GB measured at T = 4096).
        return 4.5 * HEADS * length * 2 * head_dim * head_dim * 4
    if kind == "softmax":
        # fairseq's T x T float future mask, and fused scaled_dot_product_attention, which keeps no (h, T, T)
        # tensors (fairseq's explicit path would need about (3 h + 1) T^2 floats)
        return 4 * length * length + 1.6 * activations
    return activations


def extractor_conv_impl(kind, length, lags=DEFAULT_EXTRACTOR_LAGS, embed_dim=EMBED_DIM):
    """The convolution path (``direct`` or ``fft``) that an extractor kind's cost rule takes for a full pass
    over T tokens of one sequence (``--extractor-conv-impl auto``)."""
    from fairseq_plugins.modules.extractors.conv import choose_conv_impl

    return choose_conv_impl(EXTRACTOR_LAG_SHAPES[kind], 1, length, min(lags, length), embed_dim)


# ---------------------------------------------------------------------------
# FLOPs per kind, counted from the algorithm that runs
# ---------------------------------------------------------------------------

# Each Extractor's lag weights' shape, read from its class.
EXTRACTOR_LAG_SHAPES = {kind: ATTENTION_REGISTRY[kind].cls.lag_shape for kind in EXTRACTOR_KINDS}


def layer_flops(kind, length, lags=DEFAULT_EXTRACTOR_LAGS, conv_impl=None, embed_dim=EMBED_DIM, heads=HEADS, chunk=None):
    """(forward, backward) FLOPs of one forward+backward of the layer on T tokens of one sequence, counted
    from the algorithm that runs: each kind's registered ``implementation_flops`` (settings: ``chunk``,
    ``conv_impl``), the baselines' here.

    Products count 2 FLOPs per multiply-add (an outer product, K = 1, one per element), complex
    multiply-adds 8, complex products 6, FFTs as ``fft_flops``, a cumulative sum one per element.
    Element-wise work (ReLU, softmax, cos/sin weights, biases, the adjustment product) is not counted.
    The backward of every autograd product is counted as the products it runs: the gradients of both
    operands, i.e. twice the forward; fused attention (scaled_dot_product_attention) recomputes the
    scores in its backward: 5 products per 2 of the forward; cosFormer's hand-written backward is
    counted product by product. ``LAYER_FLOP_FORMULAS`` states the same in words."""
    T, d, h = length, embed_dim, heads
    dh = d // h
    proj = 2 * T * d * d  # one d x d linear map
    if kind == "cosformer_reference_cumsum":
        # per head and token: the 2 d_h x d_h outer product k_ v^T (1 FLOP each), its cumulative sum (1 each),
        # the (1 x 2 d_h) (2 d_h x d_h) read (2 each); denominator: cumsum of k_ and a 2 d_h dot product
        core = h * T * (2 * dh * dh + 2 * dh * dh + 2 * 2 * dh * dh + 2 * dh + 2 * 2 * dh)
        return 4 * proj + core, 8 * proj + 2 * core
    spec = ATTENTION_REGISTRY.get(kind)
    if spec is None or spec.costs is None:
        raise ValueError(f"no FLOP count for {kind}")
    options = _cost_options(lags)
    if spec.costs.implementation_flops is not None:
        return spec.costs.implementation_flops(T, d, h, options, chunk=chunk, conv_impl=conv_impl)
    # a kind without a count of its implementation: its registered count of the definition
    # (modules/costs.py: the defined products, backward twice the forward)
    args = (DECODER_SELF, d, h, T, T, d, options)
    return spec.costs.forward_flops(*args), spec.costs.backward_flops(*args)


def _cost_options(lags):
    from fairseq_plugins.modules.costs import AttentionOptions

    return AttentionOptions(lags=lags)


BASELINE_FLOP_FORMULAS = {
    "cosformer_reference_cumsum": "8 T d^2; per head and token the 2 d_h x d_h outer product k_ v^T and its cumulative "
    "sum (1 FLOP per element each) and the read q_ (k v)_cum (2 per element): 8 T d d_h (+ the denominator, 6 T d). "
    "Backward twice the forward",
}
LAYER_FLOP_FORMULAS = {
    kind: BASELINE_FLOP_FORMULAS[kind] if kind in BASELINES
    else (ATTENTION_REGISTRY[kind].costs.implementation_flops_text or "the definition's products (modules/costs.py)")
    for kind in KINDS
}


def growth_bound(kind, t1, t2, lags=DEFAULT_EXTRACTOR_LAGS):
    """The largest time(t2) / time(t1) expected from a kind's complexity: the growth of its fastest-growing
    term, times ``GROWTH_MARGIN``; and the reason in words. Terms: O(T d^2) projections and linear forms grow
    by t2 / t1; softmax's and BET's O(T^2 d) attention by (t2 / t1)^2; the extractors' FFT convolution by
    n2 log n2 / (n1 log n1), n the FFT length (5-smooth >= T + l - 1), about 2 log(2T) / log(T) per doubling."""
    r = t2 / t1
    spec = ATTENTION_REGISTRY.get(kind)
    if spec is not None and spec.costs is not None and spec.costs.asymptotic_class == "O(T^2)":
        return GROWTH_MARGIN * r * r, "O(T^2 d) attention core"
    if kind in EXTRACTOR_KINDS:
        impls = {extractor_conv_impl(kind, t, lags) for t in (t1, t2)}
        if "fft" in impls:
            from fairseq_plugins.modules.extractors.conv import fft_length

            n1, n2 = (fft_length(t + min(lags, t) - 1) for t in (t1, t2))
            fft = (n2 * math.log2(n2)) / (n1 * math.log2(n1))
            return GROWTH_MARGIN * max(r, fft), f"FFT path: O(n log n), n = {n1} -> {n2}"
        return GROWTH_MARGIN * r, "direct path: O(T l d^2)" if kind == "extractor_she" else "direct path: O(T l d)"
    if kind == "cosformer":
        return GROWTH_MARGIN * r, "chunked form: O(T (C + d_h) d)"
    return GROWTH_MARGIN * r, "cumulative sums: O(T d d_h)"


def launch(spec, timeout, env=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    full_env = dict(os.environ, **(env or {}))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        why = "killed (out of memory?)" if proc.returncode in (-9, 137) else f"exit {proc.returncode}: {tail[0][:200]}"
        return {"error": why}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "no result from worker"}


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_mem(nbytes):
    if nbytes is None:
        return "-"
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:.2f} GB"
    if nbytes < 1e6:
        return "< 1 MB"
    return f"{nbytes / 1e6:.0f} MB"


def fmt_ratio(a, b):
    """a / b as 'N.Nx' (None if either is missing)."""
    if a is None or b is None or b <= 0:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 1 else f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def environment():
    try:
        import fairseq

        fairseq_version = fairseq.__version__
    except Exception as exc:  # pragma: no cover
        fairseq_version = f"unavailable ({exc})"
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    rev = git_revision()
    try:
        with open("/proc/self/autogroup") as f:
            autogroup = f.read().strip()
    except OSError:
        autogroup = None
    return {
        "nice": os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None,
        "autogroup": autogroup,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": fairseq_version,
        "git": rev,
        "cpu": cpu,
        "cores": available_cores(),
        "load": load_average(),
    }


def _self_check():
    """The benchmarked reference form must compute the same function as our module."""
    module = build("cosformer").double()
    module.chunk_size = 16
    reference = ReferenceCumsumAttention(module)
    x = torch.randn(50, 1, EMBED_DIM, dtype=torch.float64)
    with torch.no_grad():
        err = (module(x, x, x, need_weights=False)[0] - reference(x)[0]).abs().max().item()
    print(f"# self-check: reference cumsum form vs cosformer (float64, T=50): max |diff| = {err:.1e}")
    if err > 1e-8:
        raise SystemExit("the reference cumsum form does not match the cosformer module")
    return err


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def plot_path_for(output):
    """The plot written next to the markdown report: X.md -> X_speed.png."""
    return os.path.splitext(output)[0] + "_speed.png"


def memory_fields(device_type, quick=False):
    """(result field, label, extra environment of the measuring process) of the memory measurements; --quick
    on the CPU measures only the stable fixed-threshold peak (each measurement is a fresh process)."""
    if device_type == "cuda":
        return [("peak", "torch.cuda.max_memory_allocated", None)]
    fields = [("peak_fixed", "fixed threshold", FIXED_MALLOC_ENV), ("peak", "default malloc", None)]
    return fields[:1] if quick else fields


def skip_reason(est, device_type, device_free):
    """Why a cell estimated at ``est`` bytes cannot run here (None: it fits)."""
    if device_type == "cuda":
        if device_free is not None and est > DEVICE_MEMORY_FRACTION * device_free:
            return f"skipped: needs ~{fmt_mem(est)} (only {fmt_mem(device_free)} free on the device)"
        return None
    avail = mem_available_bytes()
    if est > MEMORY_LIMIT_BYTES:
        return f"skipped: needs ~{fmt_mem(est)} (> {fmt_mem(MEMORY_LIMIT_BYTES)} limit)"
    if avail is not None and est > 0.85 * avail:
        return f"skipped: needs ~{fmt_mem(est)} (only {fmt_mem(avail)} available)"
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", help=f"sequence lengths T, comma-separated (default: {FULL['lengths']}; cells that do not fit in memory are skipped with a note)")
    parser.add_argument("--repeats", type=int, help=f"timed forward+backward runs per cell after one warm-up, fewer for slow cells (default: {FULL['repeats']})")
    parser.add_argument("--kinds", default=None, help=f"comma-separated subset of {','.join(KINDS)} (default: all that are registered)")
    parser.add_argument("--extractor-lags", type=int, default=DEFAULT_EXTRACTOR_LAGS, help="window l of the extractor kinds (default: %(default)s, the paper's)")
    parser.add_argument("--decode-prefixes", help=f"prefix lengths for the per-token decoding cost ('' to skip; default: {FULL['decode_prefixes']})")
    parser.add_argument("--decode-steps", type=int, help=f"timed single-token steps per prefix (default: {FULL['decode_steps']})")
    parser.add_argument("--chunk-sweep", help=f"cosformer chunk sizes to time at the largest T ('' to skip; default: {FULL['chunk_sweep']})")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (default: the cores available)")
    parser.add_argument("--device", default=default_device(), help="cpu or cuda[:i] (default: cuda when available, else cpu: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="smoke run (a couple of minutes): T = 256, 1024; 2 repeats; short decoding; no chunk sweep (explicit options still apply)")
    parser.add_argument("--output", help="write the markdown report to this path, and the plot next to it (X.md -> X_speed.png)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0

    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    lengths = [int(t) for t in args.lengths.split(",") if t]
    try:
        device_type = torch.device(args.device).type
    except RuntimeError as exc:
        parser.error(f"--device {args.device}: {exc}")
    if device_type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:i], got {args.device}")
    if device_type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    registered = list(KINDS)
    kinds = [k for k in args.kinds.split(",") if k] if args.kinds else registered
    unknown = [k for k in kinds if k not in registered]
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {','.join(registered)}")
    if args.extractor_lags < 1:
        parser.error("--extractor-lags must be >= 1")
    prefixes = [int(p) for p in args.decode_prefixes.split(",") if p]
    sweep = [int(c) for c in args.chunk_sweep.split(",") if c] if "cosformer" in kinds else []

    env = environment()
    command = " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] + (argv if argv is not None else sys.argv[1:]))
    print(f"# {command}")
    print(f"# torch {env['torch']}, fairseq {env['fairseq']}, {env['cores']} cores ({env['cpu']}), {args.threads} threads, git {env['git']}, load {env['load']}")
    started = time.time()
    self_check = _self_check()

    base = {"threads": args.threads, "lags": args.extractor_lags, "device": args.device}
    # The device's float32 matrix-multiply peak (and, on CUDA, its name and free memory), in a fresh process.
    peak = launch(dict(base, mode="peak", shapes=PEAK_SHAPES[device_type], min_s=0.2 if args.quick else 1.0), timeout=600)
    notes = []
    if "error" in peak:
        notes.append(f"matrix-multiply peak: {peak['error']}")
        print(f"# matrix-multiply peak: {peak['error']}", flush=True)
    else:
        for prod in peak["products"]:
            m, k, n = prod["shape"]
            print(f"# float32 ({m} x {k}) @ ({k} x {n}) on {args.device}: {prod['gflops']:.1f} GFLOP/s (best of {prod['runs']})", flush=True)
    device = {"name": args.device, "type": device_type}
    if device_type == "cuda" and "name" in peak:
        device.update(name=f"{args.device} ({peak['name']}, compute capability {peak['capability']}, CUDA {peak['cuda']}, "
                           f"{fmt_mem(peak['total_bytes'])})")
    device_free = peak.get("free_bytes")
    fields = memory_fields(device_type, args.quick)

    train = {}  # (kind, T) -> {"times": [...], "peak": bytes, "peak_fixed": bytes} or {"error": ...}
    for length in lengths:
        runnable = []
        for kind in kinds:
            why = skip_reason(estimate_bytes(kind, length, args.extractor_lags), device_type, device_free)
            if why:
                train[(kind, length)] = {"error": why}
                notes.append(f"{kind} at T={length}: {why}")
                print(f"{kind:28s} T={length:5d}  {why}", flush=True)
            else:
                runnable.append(kind)
                train[(kind, length)] = {}
        if not runnable:
            continue
        res = launch(dict(base, mode="time", cells=runnable, length=length, repeats=args.repeats), timeout=1800)
        for kind in runnable:
            cell = train[(kind, length)]
            if "error" in res:
                cell["error"] = f"timing failed: {res['error']}"
            else:
                cell["times"] = res["times"][kind]
            # The first run is the peak; a second one (for fast cells) catches a later one.
            runs = 2 if (_median(cell) or 0) < 2.0 else 1
            for field, _, env_extra in fields:
                mem = launch(dict(base, mode="memory", kind=kind, length=length, runs=runs), timeout=1800, env=env_extra)
                if "error" in mem:
                    cell.setdefault("error", f"memory measurement failed: {mem['error']}")
                else:
                    cell[field] = mem["peak_bytes"]
            if "error" in cell:
                notes.append(f"{kind} at T={length}: {cell['error']}")
            print(
                f"{kind:28s} T={length:5d}  "
                + (f"median {fmt_time(_median(cell)):>9s} (min {fmt_time(min(cell['times']))}, {len(cell['times'])} runs)  " if "times" in cell else "")
                + "peak " + " / ".join(f"{fmt_mem(cell.get(field))} ({label})" for field, label, _ in fields)
                + (f"  [{cell['error']}]" if "error" in cell else ""),
                flush=True,
            )

    # Chunk-size sweep of the causal cosFormer at the largest T, round-robin in one process.
    sweep_results = {}
    if sweep:
        length = max(lengths)
        res = launch(dict(base, mode="time", cells=[f"cosformer:{c}" for c in sweep], length=length, repeats=args.repeats), timeout=1800)
        for chunk in sweep:
            sweep_results[chunk] = {"error": res["error"]} if "error" in res else {"times": res["times"][f"cosformer:{chunk}"]}
            msg = sweep_results[chunk].get("error") or f"median {fmt_time(_median(sweep_results[chunk]))}"
            print(f"cosformer chunk={chunk:4d}          T={length:5d}  {msg}", flush=True)

    # Incremental decoding.
    decode = {}
    dkinds = [k for k in DECODE_KINDS if k in kinds]
    if prefixes and dkinds:
        res = launch(dict(base, mode="decode", kinds=dkinds, prefixes=prefixes, steps=args.decode_steps, warmup_steps=5), timeout=1800)
        if "error" in res:
            decode = {"error": res["error"]}
            print(f"decode: {res['error']}", flush=True)
        else:
            decode = res["per_token"]
            for kind in dkinds:
                for prefix in prefixes:
                    print(f"decode {kind:14s} prefix={prefix:5d}  {fmt_time(statistics.median(decode[kind][str(prefix)]))} per token", flush=True)

    env["load_end"] = load_average()
    elapsed = time.time() - started
    plot_name = None
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        plot_path = plot_path_for(args.output)
        try:
            write_plot(plot_path, lengths, kinds, train, fields[0][0], device, fields[0][1])
            plot_name = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(args.output)))
            print(f"# wrote {plot_path}")
        except Exception as exc:  # the measurements are worth more than the plot: report, do not lose them
            notes.append(f"plot not written: {type(exc).__name__}: {exc}")
            print(f"# plot not written: {exc}", flush=True)
    report = render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_check,
                    device=device, peak=peak, plot_name=plot_name)
    print()
    print(report)
    if args.output:
        with atomic_output(args.output) as f:
            f.write(report)
        print(f"# wrote {args.output}")
    return 0


def _median(cell):
    return statistics.median(cell["times"]) if cell and cell.get("times") else None


def gflops_per_s(kind, length, seconds, lags=DEFAULT_EXTRACTOR_LAGS):
    """Achieved GFLOP/s of one forward+backward that took ``seconds`` (None if not measured)."""
    if not seconds:
        return None
    fwd, bwd = layer_flops(kind, length, lags)
    return (fwd + bwd) / seconds / 1e9


def doublings(lengths):
    """Consecutive pairs (T, 2T) among the lengths."""
    ordered = sorted(set(lengths))
    return [(t, 2 * t) for t in ordered if 2 * t in ordered]


def write_plot(path, lengths, kinds, train, memory_field, device, memory_label=None):
    """Two log-log panels, forward+backward time and peak memory vs T, one line per kind (Agg backend, no
    global pyplot state)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging setup would print its debug lines
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8))
    FigureCanvasAgg(fig)
    ax_time, ax_mem = fig.subplots(1, 2)
    markers = "os^vDP*Xh<>"
    for i, kind in enumerate(kinds):
        style = dict(marker=markers[i % len(markers)], label=kind, linestyle="--" if kind in BASELINES else "-")
        times = [(t, _median(train.get((kind, t)))) for t in lengths]
        times = [(t, v) for t, v in times if v]
        if times:
            ax_time.plot([t for t, _ in times], [v for _, v in times], **style)
        mems = [(t, train.get((kind, t), {}).get(memory_field)) for t in lengths]
        mems = [(t, v / 1e6) for t, v in mems if v is not None and v > 0]
        if mems:
            ax_mem.plot([t for t, _ in mems], [v for _, v in mems], **style)
    where = device.get("name", "cpu")
    for ax, ylabel, title in (
        (ax_time, "forward + backward time (s, median)", f"Time, one layer, d = {EMBED_DIM}, batch 1 ({where})"),
        (ax_mem, "peak memory above the baseline (MB)", f"Peak memory of forward + backward ({memory_label or memory_field})"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ticks = sorted(set(lengths))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks], rotation=45)
    handles, labels = ax_time.get_legend_handles_labels()
    if not handles:
        handles, labels = ax_mem.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    fig.savefig(path, dpi=110)


def render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_check,
           device=None, peak=None, plot_name=None):
    from fairseq_plugins.modules.extractors.conv import fft_length

    device = device or {"name": "cpu", "type": "cpu"}
    peak = peak or {}
    on_cuda = device["type"] == "cuda"
    fields = memory_fields(device["type"], getattr(args, "quick", False))
    lags = args.extractor_lags
    lines = []
    add = lines.append

    def row(cells):
        add("| " + " | ".join(cells) + " |")

    def cell_text(kind, length, value, fmt):
        cell = train.get((kind, length), {})
        if value is not None:
            return fmt(value)
        return "skipped" if "skipped" in cell.get("error", "") else "failed"

    add(f"# Attention speed and memory ({'CUDA' if on_cuda else 'CPU'})")
    add("")
    add("Generated by `benchmarks/attention_speed.py` (rerun the command below to refresh; edit the script, not this file).")
    add("")
    add("```")
    add(command)
    add("```")
    add("")
    add(f"- torch {env['torch']}, fairseq {env['fairseq']}, Python {env['python']}; git {env['git']}")
    if is_dirty(env["git"]):
        add("- **measured with uncommitted changes**: the revision above does not contain the code that ran; "
            "re-measure on a clean checkout")
    add(f"- {env['cores']} cores ({env['cpu']}), `torch.set_num_threads({args.threads})`")
    add(f"- device: {device['name']}" + ("; TF32 off (`torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False`)" if on_cuda else ""))
    sched = f"nice {env['nice']}" + (f", scheduler autogroup `{env['autogroup']}`" if env.get("autogroup") else "")
    add(f"- load average {env['load']} at the start and {env['load_end']} at the end (other processes share the machine); {sched}; run time {elapsed / 60:.1f} min")
    add(
        f"- one causal self-attention layer (`decoder_self`): d = {EMBED_DIM}, {HEADS} heads, batch 1, float32; "
        f"input x (T x 1 x {EMBED_DIM}) with `requires_grad=True`, loss = `output.sum()`; cosFormer horizon M = {HORIZON}, "
        f"chunk size C = {_default_chunk()}; extractors: l = {lags} lags, convolution path chosen by "
        "their cost rule (`--extractor-conv-impl auto`); extractors have no heads"
    )
    add("")
    if plot_name:
        add(f"![forward+backward time and peak memory vs T, log-log]({plot_name})")
        add("")
        add(f"[`{plot_name}`]({plot_name}): time (left) and peak memory ({fields[0][1]}, right) vs T, log-log.")
        add("")
    add("Method:")
    add("")
    if on_cuda:
        add(
            "- **Time**: forward+backward of the layer, `time.perf_counter` with `torch.cuda.synchronize()` before and "
            f"after each run, median over the timed runs after one warm-up run (at most {args.repeats} runs, fewer for "
            f"slow cells to keep each near {CELL_BUDGET_S:.0f} s, at least 2). All kinds at one T run in one fresh "
            "process, round-robin (one run of each in turn)."
        )
        add(
            "- **Peak memory**: a fresh process per (kind, T). After a tiny warm-up call (CUDA context, cuBLAS and "
            "cuDNN handles and workspaces) and building the module and the input, `torch.cuda.reset_peak_memory_stats()`; "
            "reported is `torch.cuda.max_memory_allocated()` after two forward+backward runs (one for cells slower than "
            "2 s) minus `torch.cuda.memory_allocated()` at the reset: the extra memory torch's allocator handed out for "
            "the layer (the caching allocator's unused reserve and the CUDA context are not counted). softmax's T x T "
            "future mask is an input built before the reset, as fairseq's decoder builds it once and caches it."
        )
    else:
        add(
            "- **Time**: forward+backward of the layer, `time.perf_counter`, median over the timed runs after one "
            f"warm-up run (at most {args.repeats} runs, fewer for slow cells to keep each near {CELL_BUDGET_S:.0f} s, "
            "at least 2). All kinds at one T run in one fresh process, round-robin (one run of each in turn), so "
            "that they see the same machine load."
        )
        add(
            "- **Peak memory**: a fresh subprocess per (kind, T). After a tiny warm-up call (thread pools, BLAS "
            "buffers) and building the module and the input, the kernel's peak-RSS mark is reset to the current "
            "RSS (`/proc/self/clear_refs`); reported is the peak-RSS mark after two forward+backward runs (one for "
            "cells slower than 2 s) minus that "
            "baseline: the extra resident memory the layer needed (`tracemalloc` does not see torch's allocations). "
            "The mark is read as `VmHWM` from `/proc/self/status`: `getrusage(RUSAGE_SELF).ru_maxrss` reports the "
            "same mark but, after fork + exec, never less than the spawning process's RSS, which hid the peaks of "
            "small cells. Two columns: the default process (*default malloc*), and the same with "
            "`MALLOC_MMAP_THRESHOLD_=131072` (*fixed threshold*): glibc otherwise raises its mmap threshold as "
            "large blocks are freed and keeps freed blocks below it resident, so the default peak also measures "
            "that caching and moves from run to run; with the threshold fixed, RSS follows the "
            "live allocations" + (" (`--quick` measures only this one)" if len(fields) == 1 else "") + ". softmax's T x T "
            "future mask is an input built before the baseline, as fairseq's "
            f"decoder builds it once and caches it (it would add 4 T^2 bytes: {fmt_mem(4 * max(lengths) ** 2)} at "
            f"T = {max(lengths)})."
        )
    add(
        "- **GFLOP/s**: FLOPs of one forward+backward counted per kind from the algorithm that runs (formulas below; "
        "`layer_flops` in the script, checked against a count of the executed products in "
        "`tests/benchmarks/test_attention_speed.py`) divided by the median time, and its share of the device's "
        "float32 matrix-multiply peak measured in the same run (below)."
    )
    add(
        "- **Decoding**: `incremental_state` decoding in `eval()` / `no_grad`: each (kind, P) takes a prefix of P tokens "
        f"in one call, then all take {args.decode_steps} timed single-token steps (after 5 untimed) in turn, in one "
        "process; median per token" + (" (`torch.cuda.synchronize()` around each step)." if on_cuda else ".")
    )
    add(
        "- `cosformer_reference_cumsum` is the authors' causal formulation (`einsum('nld,nlm->nldm', k_, v)`, "
        "`cumsum` over L, `einsum('nld,nldm->nlm', q_, kv_cum)`, the denominator likewise) between the same "
        f"projections; the run starts by checking that it computes the same function as `cosformer` "
        f"(float64, max |diff| = {self_check:.0e})."
    )
    add("")

    # Time table.
    others = [k for k in kinds if k != "softmax"]
    add("## Forward + backward time (median)")
    add("")
    header = ["T"] + list(kinds)
    if "softmax" in kinds:
        header += [f"softmax / {k}" for k in others]
    both = "cosformer" in kinds and "cosformer_reference_cumsum" in kinds
    if both:
        header.append("reference / cosformer")
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)] + [cell_text(k, length, _median(train.get((k, length))), fmt_time) for k in kinds]
        if "softmax" in kinds:
            cells += [fmt_ratio(_median(train.get(("softmax", length))), _median(train.get((k, length)))) for k in others]
        if both:
            cells.append(fmt_ratio(_median(train.get(("cosformer_reference_cumsum", length))), _median(train.get(("cosformer", length)))))
        row(cells)
    add("")
    add("Ratios are speed-ups (how many times faster the second kind is). Timed runs per cell (median / min):")
    add("")
    for length in lengths:
        parts = []
        for k in kinds:
            cell = train.get((k, length), {})
            if cell.get("times"):
                parts.append(f"{k} {len(cell['times'])} ({fmt_time(_median(cell))} / {fmt_time(min(cell['times']))})")
        if parts:
            add(f"- T={length}: " + "; ".join(parts))
    add("")

    # Achieved FLOP rate.
    add("## Achieved GFLOP/s (forward + backward) and share of the matrix-multiply peak")
    add("")
    peak_gflops = peak.get("peak_gflops")
    if peak.get("products"):
        shapes = "; ".join(
            f"({p['shape'][0]} x {p['shape'][1]}) @ ({p['shape'][1]} x {p['shape'][2]}): {p['gflops']:.1f} GFLOP/s"
            for p in peak["products"]
        )
        add(
            f"Peak: **{peak_gflops:.1f} GFLOP/s**, the best float32 `torch.mm` on {device['name']} (same thread count, "
            f"fresh process, best of at least 5 runs after a warm-up; the first shape is the layer's projection at "
            f"T = 4096): {shapes}."
        )
    else:
        add(f"Peak: not measured ({peak.get('error', 'no result')}); only GFLOP/s below.")
    add("")
    header = ["T"] + list(kinds)
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)]
        for k in kinds:
            rate = gflops_per_s(k, length, _median(train.get((k, length))), lags)
            if rate is None:
                cells.append(cell_text(k, length, None, str))
            elif peak_gflops:
                cells.append(f"{rate:.1f} ({100 * rate / peak_gflops:.0f} %)")
            else:
                cells.append(f"{rate:.1f}")
        row(cells)
    add("")
    add("GFLOP counted per forward + backward:")
    add("")
    row(["T"] + list(kinds))
    row(["---:"] * (len(kinds) + 1))
    for length in lengths:
        row([str(length)] + [f"{sum(layer_flops(k, length, lags)) / 1e9:.3g}" for k in kinds])
    add("")
    add(
        f"FLOPs per kind (T tokens, d = {EMBED_DIM}, h = {HEADS} heads of d_h = {EMBED_DIM // HEADS}; products count "
        "2 FLOPs per multiply-add, an "
        "outer product 1 per element, complex multiply-adds 8 and complex products 6, a real FFT of n points "
        "2.5 n log2 n and a complex one 5 n log2 n; element-wise work (ReLU, softmax, cos/sin weights, biases, "
        "the extractors' adjustment product) is not counted. Autograd backward = twice the forward (the "
        "gradients of both operands of every product) unless stated:"
    )
    add("")
    for k in kinds:
        text = LAYER_FLOP_FORMULAS[k].format(chunk=_default_chunk())
        if k in EXTRACTOR_KINDS:
            impls = sorted({extractor_conv_impl(k, t, lags) for t in lengths})
            text += f" (path taken here: {', '.join(impls)})"
        add(f"- `{k}`: {text}.")
    add("")
    add(
        "The share is of the arithmetic actually counted: time spent on uncounted element-wise work, memory "
        "traffic, copies and per-call overheads lowers it."
    )
    add("")

    # Memory tables: one per memory measurement, a column per kind.
    add("## Peak memory of forward + backward (above the baseline)")
    add("")
    for field, label, _ in fields:
        title = {"peak_fixed": "fixed mmap threshold (follows the live allocations)", "peak": "default malloc"}.get(field, label)
        if on_cuda:
            title = "`torch.cuda.max_memory_allocated()` above the allocation at the reset"
        add(f"{title[0].upper()}{title[1:]}:")
        add("")
        header = ["T"] + list(kinds)
        if "softmax" in kinds:
            header += [f"{k} / softmax" for k in others]
        row(header)
        row(["---:"] * len(header))
        for length in lengths:
            cells = [str(length)] + [cell_text(k, length, train.get((k, length), {}).get(field), fmt_mem) for k in kinds]
            if "softmax" in kinds:
                base_peak = train.get(("softmax", length), {}).get(field)
                for k in others:
                    peak_k = train.get((k, length), {}).get(field)
                    cells.append(f"{peak_k / base_peak:.2f}" if peak_k is not None and base_peak else "-")
            row(cells)
        add("")
    above = cosformer_above_softmax(train, lengths, fields[0][0])
    if above and not on_cuda:
        add(
            f"cosFormer needs more memory than softmax at T = {', '.join(map(str, above))} ({fields[0][1]}): there "
            "its own temporaries (one segment of chunks, see below) outweigh its O(T d) tensors."
        )
    add(
        "The extractors' memory is O(T d) plus, for SHE, its l d x d weights' gradient (l = "
        f"{lags}: {fmt_mem(lags * EMBED_DIM * EMBED_DIM * 4)}) and, on its direct path, conv1d's T x l d "
        "unfolded input."
    )
    add("")

    # Decoding table.
    if decode:
        add("## Incremental decoding: cost per new token (median)")
        add("")
        if "error" in decode:
            add(f"Failed: {decode['error']}")
        else:
            dkinds = [k for k in DECODE_KINDS if k in decode]
            dothers = [k for k in dkinds if k != "softmax"] if "softmax" in dkinds else []
            header = ["prefix P"] + dkinds + [f"{k} / softmax" for k in dothers]
            row(header)
            row(["---:"] * len(header))
            for prefix in prefixes:
                vals = {k: statistics.median(decode[k][str(prefix)]) for k in dkinds}
                cells = [str(prefix)] + [fmt_time(vals[k]) for k in dkinds]
                cells += [f"{vals[k] / vals['softmax']:.2f}" for k in dothers]
                row(cells)
            add("")
            add(
                "Ratios are costs relative to softmax (below 1: cheaper per token). The extractors keep the last "
                f"l = {lags} inputs, so their cost stops growing once the prefix exceeds l."
            )
        add("")

    # Growth per doubling.
    pairs = doublings(lengths)
    if pairs:
        add("## Growth of the time per doubling of T, against each kind's complexity")
        add("")
        add(
            "time(2T) / time(T), measured, and the bound from the kind's complexity (below): the growth of its "
            f"fastest-growing term times {GROWTH_MARGIN:.2f}. Short T are dominated by fixed costs and grow less."
        )
        add("")
        row(["kind", "complexity"] + [f"{t2} / {t1}" for t1, t2 in pairs])
        row(["---", "---"] + ["---:"] * len(pairs))
        for k in kinds:
            cells, reason = [], ""
            for t1, t2 in pairs:
                bound, reason = growth_bound(k, t1, t2, lags)
                a, b = _median(train.get((k, t1))), _median(train.get((k, t2)))
                cells.append(f"{b / a:.2f} (<= {bound:.2f})" if a and b else f"- (<= {bound:.2f})")
            row([k, reason.split(", n =")[0]] + cells)
        add("")
        add(
            "Bounds: the projections (O(T d^2)) and the linear forms (cosFormer's chunked form, O(T (C + d_h) d); "
            "the reference's O(T d d_h) cumulative sums; the extractors' direct conv1d, O(T l d^2) for SHE, O(T l d) "
            f"for the depthwise kinds) double with T, so `<= 2 x {GROWTH_MARGIN:g} = {2 * GROWTH_MARGIN:g}`. The "
            f"extractors' FFT path ({fft_kinds_text(kinds, lengths, lags)}) convolves over n points, n the smallest "
            "5-smooth number >= T + l - 1, at O(n log n): "
            f"`<= {GROWTH_MARGIN:g} x n2 log n2 / (n1 log n1)` (the FFT lengths n1, n2 of the two T; "
            f"{GROWTH_MARGIN:g} x 2 log(2T) / log(T) when n doubles exactly, as from 4096 (n = {fft_length(4096 + lags - 1)}) "
            f"to 8192 (n = {fft_length(8192 + lags - 1)}): "
            f"{growth_bound('extractor_he', 4096, 8192, lags)[0]:.2f} for l = {lags}); the former flat "
            f"{2 * GROWTH_MARGIN:g} ignored the log factor. softmax's and BET's attention core is O(T^2 d): "
            f"`<= 4 x {GROWTH_MARGIN:g} = {4 * GROWTH_MARGIN:g}` "
            "(with the O(T d^2) projections their growth should lie between 2 and 4). "
            "The margin covers run-to-run noise, not memory effects: a working set that falls out of a cache "
            "level between T and 2T can exceed a bound on a CPU."
        )
        add("")

    # Chunk sweep.
    if sweep_results:
        length = max(lengths)
        add(f"## cosFormer chunk size (T = {length}, forward + backward, median, one process round-robin)")
        add("")
        row(["chunk C", "time", "time / time at C = %d" % _default_chunk()])
        row(["---:"] * 3)
        ref = _median(sweep_results.get(_default_chunk(), {}))
        for chunk, res in sweep_results.items():
            t = _median(res)
            row([str(chunk), fmt_time(t) if t else res.get("error", "failed"), f"{t / ref:.2f}" if t and ref else "-"])
        add("")

    # Targets.
    add("## Targets")
    add("")
    row(["target", "measured", "met?"])
    row(["---", "---", "---"])
    for text, value, ok in targets(train, decode, lengths, kinds, lags, fields):
        row([text, value, "yes" if ok else ("**NO**" if ok is not None else "not measured")])
    add("")
    add(
        "Time growth targets per kind (`time(2T) / time(T)` for the doublings from T = 4096 on) are the bounds of "
        "the growth table above, from each algorithm's complexity. The reference cumulative-sum form is a baseline, "
        "not a target."
    )
    add("")
    if not on_cuda:
        add(
            f"Medians over few runs on a machine with {env['cores']} cores that other processes may share (load "
            "averages above): a cell's runs that coincide with another job are slower (compare the per-cell minima "
            "above). The *default malloc* peaks include glibc's caching of freed blocks, which differs from run to "
            "run; the *fixed threshold* peaks follow the live allocations: compare kinds on those."
        )
        add("")
    if notes:
        add("Notes:")
        add("")
        for note in notes:
            add(f"- {note}")
        add("")
    add(implementation_notes(max(lengths)))
    return "\n".join(lines) + "\n"


def fft_kinds_text(kinds, lengths, lags):
    """Which extractor kinds took the FFT path at which of the measured lengths (their cost rule decides)."""
    parts = []
    for kind in kinds:
        if kind in EXTRACTOR_KINDS:
            on_fft = [t for t in lengths if extractor_conv_impl(kind, t, lags) == "fft"]
            if on_fft:
                parts.append(kind if len(on_fft) == len(lengths) else f"{kind} at T = {', '.join(map(str, on_fft))}")
    return "taken here by " + ", ".join(parts) if parts else "not taken at these lengths"


def cosformer_above_softmax(train, lengths, field):
    """The lengths at which cosFormer's measured peak memory exceeds softmax's (in this run's ``field``)."""
    above = []
    for length in lengths:
        ours, theirs = (train.get((kind, length), {}).get(field) for kind in ("cosformer", "softmax"))
        if ours is not None and theirs is not None and ours > theirs:
            above.append(length)
    return above


def _default_chunk():
    from fairseq_plugins.modules.cosformer.chunked import DEFAULT_CHUNK_SIZE

    return DEFAULT_CHUNK_SIZE


def targets(train, decode, lengths=DEFAULT_LENGTHS, kinds=KINDS, lags=DEFAULT_EXTRACTOR_LAGS, fields=None):
    """(target, measured, met: True / False / None if not measured) rows."""
    fields = fields if fields is not None else memory_fields("cpu")
    out = []

    def med(kind, length):
        return _median(train.get((kind, length), {}))

    def mem(kind, length, field):
        return train.get((kind, length), {}).get(field)

    s8, c8 = med("softmax", 8192), med("cosformer", 8192)
    r = s8 / c8 if s8 and c8 else None
    out.append(("cosformer vs softmax at T=8192: >= 8x faster", f"{r:.1f}x" if r else "-", r >= 8 if r else None))
    for field, label, _ in fields:
        a, b = mem("cosformer", 8192, field), mem("softmax", 8192, field)
        out.append((
            f"cosformer peak memory <= softmax's at T=8192 ({label})",
            f"{fmt_mem(a)} vs {fmt_mem(b)}" if a and b else "-",
            a <= b if a and b else None,
        ))
    r4, c4 = med("cosformer_reference_cumsum", 4096), med("cosformer", 4096)
    r = r4 / c4 if r4 and c4 else None
    out.append(("cosformer vs reference cumsum at T=4096: >= 25x faster", f"{r:.0f}x" if r else "-", r >= 25 if r else None))
    for field, label, _ in fields:
        a, b = mem("cosformer_reference_cumsum", 4096, field), mem("cosformer", 4096, field)
        r = a / b if a and b else None
        out.append((f"cosformer vs reference cumsum at T=4096: >= 6x less peak memory ({label})", f"{r:.0f}x" if r else "-", r >= 6 if r else None))
    # Time growth per doubling from T = 4096 on, bounded by each kind's complexity (growth_bound); decoding cost
    # per token constant for the linear kinds (cosFormer's state; the extractors' window of l inputs).
    pairs = [(t1, t2) for t1, t2 in doublings(lengths) if t1 >= 4096] or [(4096, 8192)]
    for kind in [k for k in KINDS if k in kinds and k not in BASELINES]:
        for t1, t2 in pairs:
            bound, reason = growth_bound(kind, t1, t2, lags)
            a, b = med(kind, t1), med(kind, t2)
            r = b / a if a and b else None
            out.append((f"{kind} time({t2}) / time({t1}) <= {bound:.2f} ({reason})", f"{r:.2f}" if r else "-", r <= bound if r else None))
        if ATTENTION_REGISTRY[kind].costs.decoding_state_growth in ("constant", "window"):
            dec = decode.get(kind, {}) if isinstance(decode, dict) else {}
            text = f"{kind} decoding cost per token, prefix 4096 / prefix 128 <= 1.2"
            if "128" in dec and "4096" in dec:
                r = statistics.median(dec["4096"]) / statistics.median(dec["128"])
                out.append((text, f"{r:.2f}", r <= 1.2))
            else:
                out.append((text, "-", None))
    return out


def implementation_notes(length):
    """How the two linear kinds are computed; the sizes quoted are computed from the code's constants at the
    report's longest T (no measurement lives here: the chunk-size table above is this run's)."""
    from fairseq_plugins.modules.cosformer.chunked import SEGMENT_BYTES

    head_dim = EMBED_DIM // HEADS
    chunk = _default_chunk()
    per_chunk = HEADS * chunk * head_dim * 4  # batch 1: one chunk of one (B*H, tokens, d) slice, float32
    segment_tokens = max(1, SEGMENT_BYTES // per_chunk) * chunk
    segments = -(-length // segment_tokens)
    return IMPLEMENTATION_NOTES.format(segment_mb=SEGMENT_BYTES / 2 ** 20, segments=segments, length=length,
                                       head_dim=head_dim, chunk=chunk)


IMPLEMENTATION_NOTES = """\
## How the causal cosFormer is computed

`fairseq_plugins/modules/cosformer/chunked.py`: `_ChunkedCausalCosformer` (a `torch.autograd.Function`), used by the
module and by `cosformer_causal`.

- **Chunked form.** Tokens are cut into chunks of C. Inside a chunk, the exact quadratic form
  `(Q K^T * decay) V` with one shared C x C matrix `decay[i, j] = cos(pi/2 (i - j) / M)` (i >= j). Across chunks,
  each query reads the sums over all earlier chunks, `S = sum_j k_j [cos a_j; sin a_j] v_j^T`, through its
  `q cos a_i` and `q sin a_i` features. No T x d x d tensor exists (the reference form keeps T of them).
- **Layout.** Tensors are chunked as (n, B, H, C, d), chunk index outermost: each per-chunk product is one batched
  matrix product over all chunks and heads, a range of chunks is a contiguous slice, and per-chunk states fill
  slots 1..n of a contiguous (2, n+1, B*H, d, d) tensor whose running sum (one product with a triangular matrix
  of ones per segment, which ran faster than `cumsum` over that dimension) turns slot i into the state before
  chunk i. Chunk 0's
  inter-chunk products are skipped when there is no incoming state.
- **No doubled or odd-sized products.** The cos and sin halves are separate tensors, and the denominator (the ones
  column of `v1`) has its own small d x 1 states, so every large product is {head_dim} x {head_dim} x C (products
  with one or d_h more output columns, i.e. the ones column appended or cos and sin side by side, ran slower per
  flop in micro-benchmarks). phi = ReLU of q and k, and the zeroing of padded keys, are fused into the
  copies that chunk them (the module hands over the raw projections).
- **Segments and a hand-written backward.** Forward and backward run over segments of whole chunks of at most
  {segment_mb:g} MB per (B*H, tokens, d) slice ({segments} segments at T = {length} in this report's layer), which
  keeps the working set in cache and the temporaries bounded whatever T is. The backward walks the segments in reverse and recomputes a segment's chunked inputs,
  intra-chunk weights and states from the state saved at its start, so the layer keeps only q, k, v, the output,
  the clamped denominator and one state per segment: memory O(T d) per head. Gradients are accumulated with
  in-place `baddbmm_`; since nothing but the layer holds its raw q, k, v projections, their gradients overwrite
  them (backpropagating twice through one graph of the layer is refused with an error), and output and gradients
  are written straight in fairseq's time-major layout, so the reshapes around the layer are free.
- **Decoding** (one new token with `incremental_state`) skips the chunk machinery: one outer product updates the
  2d x (d+1) state per head and one product reads it, so the cost per token does not depend on the prefix.
- **Chunk size.** `DEFAULT_CHUNK_SIZE = {chunk}`: a smaller C slows the per-chunk state products (their inner
  dimension is C), a larger one doubles the intra-chunk part (2 T C d per head and pass) with every doubling of C.
  The chunk-size table above times the whole layer at several C in this run; the four d x d projections
  (forward and backward) take much of the layer's time, so the differences there are small. Any C gives the same
  result.

## How the extractors are computed

`fairseq_plugins/modules/extractors/conv.py`: the extraction (eqs. 23, 26, 28, 29 of Chen 2023) is a causal
convolution over time with a kernel of l lags: d -> d channels for SHE, depthwise for WE and HE, one kernel
shared by all channels for ME. A full pass takes `conv1d` (direct) or an FFT convolution, whichever the cost rule
(`choose_conv_impl`: multiplications times a measured cost per multiplication) estimates faster for the batch,
length and l; both are exact. Time and memory are O(T l d^2) / O(T l d) for the direct path and O(T log T d) for
the FFT path: linear in T for a fixed window. Decoding keeps the last l inputs per layer, so a token costs
O(l d^2) (SHE) or O(l d) whatever the prefix.
"""


if __name__ == "__main__":
    sys.exit(main())
