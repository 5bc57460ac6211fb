#!/usr/bin/env python
"""Speed and memory of one causal self-attention layer on CPU.

Compares, for one decoder self-attention layer (d = 512, 8 heads, batch 1,
float32, CPU):

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
peak memory (fresh subprocess per cell), the cost per generated token of
incremental decoding at several prefix lengths, and ratios between the kinds,
all from the same run. With ``--output`` it writes a markdown report (command,
versions, git revision, core count, tables, targets).

    python benchmarks/attention_speed.py                      # full run (about 7 min on 2 idle cores)
    python benchmarks/attention_speed.py --quick              # smoke run (about 1 min)
    python benchmarks/attention_speed.py --output docs/benchmarks.md
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

EXTRACTOR_KINDS = ("extractor_she", "extractor_he", "extractor_we", "extractor_me")
KINDS = ("softmax", "cosformer", "cosformer_reference_cumsum") + EXTRACTOR_KINDS + ("bet",)
# Kinds with incremental decoding (the reference form has none).
DECODE_KINDS = tuple(k for k in KINDS if k != "cosformer_reference_cumsum")
DEFAULT_EXTRACTOR_LAGS = 128  # the Extractor paper's context window l
EMBED_DIM = 512
HEADS = 8
HORIZON = 16384  # cosFormer's M (--cosformer-max-positions): covers the longest T
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
DEFAULT_PREFIXES = (128, 1024, 4096)
MEMORY_LIMIT_BYTES = 16e9  # cells estimated above this are skipped with a note
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
        angle = (math.pi / 2) * torch.arange(tgt_len, dtype=q.dtype).view(1, -1, 1) / self.horizon
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


def build(kind, chunk_size=None, seed=0, lags=None):
    from fairseq_plugins.modules import build_attention

    cfg = _Cfg()
    if lags is not None:
        cfg.extractor_lags = lags
    torch.manual_seed(seed)
    if kind == "cosformer_reference_cumsum":
        return ReferenceCumsumAttention(build_attention("cosformer", "decoder_self", EMBED_DIM, HEADS, cfg))
    module = build_attention(kind, "decoder_self", EMBED_DIM, HEADS, cfg)
    if chunk_size is not None:
        module.chunk_size = chunk_size
    return module


def future_mask(length):
    """fairseq's future mask (-inf above the diagonal), built without a transient copy."""
    return torch.full((length, length), float("-inf")).triu_(1)


class Cell:
    """One layer and its input for forward+backward runs."""

    def __init__(self, kind, length, chunk_size=None, lags=None):
        self.kind = kind
        self.module = build(kind, chunk_size, lags=lags)
        self.x = torch.randn(length, 1, EMBED_DIM, requires_grad=True)
        # fairseq's decoder builds its future mask once and reuses it: an input here. Kinds that are
        # causal by construction get none (the mixed decoder does not build it for them).
        self.mask = future_mask(length) if getattr(self.module, "uses_future_mask", False) else None

    def step(self):
        out, _ = self.module(self.x, self.x, self.x, attn_mask=self.mask, need_weights=False)
        out.sum().backward()
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)

    def timed_step(self):
        t0 = time.perf_counter()
        self.step()
        return time.perf_counter() - t0


def _warm_up_libraries(kind, lags=None):
    """A tiny forward+backward, so that thread pools and BLAS buffers exist before any baseline."""
    Cell(kind, 16, lags=min(lags or DEFAULT_EXTRACTOR_LAGS, 16)).step()


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
    """Peak RSS of forward+backward above the RSS after building module and input."""
    _warm_up_libraries(spec["kind"], spec.get("lags"))
    cell = Cell(spec["kind"], spec["length"], spec.get("chunk_size"), spec.get("lags"))
    gc.collect()
    reset = _reset_peak_rss()
    baseline = _peak_rss_bytes() if reset else _rss_bytes()
    for _ in range(spec.get("runs", 2)):
        cell.step()
    return {"peak_bytes": _peak_rss_bytes() - baseline, "peak_reset": reset}


def worker_time(spec):
    """Forward+backward times of several kinds (or chunk sizes) at one T, run round-robin so that all
    see the same machine load: one warm-up each, then timed runs until each has its count."""
    cells = {}
    for key in spec["cells"]:
        kind, _, chunk = key.partition(":")
        _warm_up_libraries(kind, spec.get("lags"))
        cells[key] = Cell(kind, spec["length"], int(chunk) if chunk else None, spec.get("lags"))
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
    modules = {kind: build(kind, lags=spec.get("lags")).eval() for kind in spec["kinds"]}
    states, results = {}, {kind: {} for kind in modules}
    with torch.no_grad():
        for prefix in spec["prefixes"]:
            x = torch.randn(prefix, 1, EMBED_DIM)
            for kind, module in modules.items():
                states[kind, prefix] = {}
                mask = future_mask(prefix) if getattr(module, "uses_future_mask", False) else None
                module(x, x, x, incremental_state=states[kind, prefix], attn_mask=mask, need_weights=False)
                results[kind][str(prefix)] = []
        for step in range(spec["warmup_steps"] + spec["steps"]):
            tok = torch.randn(1, 1, EMBED_DIM)
            for (kind, prefix), state in states.items():
                t0 = time.perf_counter()
                modules[kind](tok, tok, tok, incremental_state=state, need_weights=False)
                if step >= spec["warmup_steps"]:
                    results[kind][str(prefix)].append(time.perf_counter() - t0)
    return {"per_token": results}


def run_worker(spec):
    torch.set_num_threads(spec["threads"])
    return {"memory": worker_memory, "time": worker_time, "decode": worker_decode}[spec["mode"]](spec)


# ---------------------------------------------------------------------------
# Driver side
# ---------------------------------------------------------------------------


def available_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
    """Rough peak estimate (float32), to skip cells that cannot fit."""
    head_dim = EMBED_DIM // HEADS
    if kind == "extractor_she":
        # l d x d extraction weights and their gradient, plus the activations and FFT buffers
        return 2 * lags * EMBED_DIM * EMBED_DIM * 4 + 60 * length * EMBED_DIM * 4
    if kind == "bet":
        # two score matrices (M_dp and M') with their softmaxes and gradients, per head
        return (6 * HEADS + 1) * length * length * 4
    if kind == "cosformer_reference_cumsum":
        # kv_, kv_cum and their gradients: ~4.5 tensors of (h, T, 2d, d) (4.7 GB measured at T = 4096).
        return 4.5 * HEADS * length * 2 * head_dim * head_dim * 4
    if kind == "softmax":
        # worst case, fairseq's explicit path: weights, probabilities and their gradient (h, T, T), and the mask
        return (3 * HEADS + 1) * length * length * 4
    return 40 * length * EMBED_DIM * 4


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


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


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
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        rev = (rev or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        rev = "unknown"
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="sequence lengths T (comma-separated)")
    parser.add_argument("--repeats", type=int, default=5, help="timed forward+backward runs per cell after one warm-up (fewer for slow cells)")
    parser.add_argument("--kinds", default=None, help=f"comma-separated subset of {','.join(KINDS)} (default: all that are registered)")
    parser.add_argument("--extractor-lags", type=int, default=DEFAULT_EXTRACTOR_LAGS, help="window l of the extractor kinds (default: %(default)s, the paper's)")
    parser.add_argument("--decode-prefixes", default=",".join(map(str, DEFAULT_PREFIXES)), help="prefix lengths for the per-token decoding cost ('' to skip)")
    parser.add_argument("--decode-steps", type=int, default=50, help="timed single-token steps per prefix")
    parser.add_argument("--chunk-sweep", default="32,64,128", help="cosformer chunk sizes to time at the largest T ('' to skip)")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (default: the cores available)")
    parser.add_argument("--quick", action="store_true", help="smoke run: T = 256, 1024; 2 repeats; short decoding; no chunk sweep")
    parser.add_argument("--output", help="write the markdown report to this path")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0

    if args.quick:
        args.lengths, args.repeats = "256,1024", 2
        args.decode_prefixes, args.decode_steps, args.chunk_sweep = "128,1024", 10, ""
    lengths = [int(t) for t in args.lengths.split(",") if t]
    from fairseq_plugins.modules import ATTENTION_REGISTRY

    registered = [k for k in KINDS if k == "cosformer_reference_cumsum" or k in ATTENTION_REGISTRY]
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

    train = {}  # (kind, T) -> {"times": [...], "peak": bytes, "peak_fixed": bytes} or {"error": ...}
    notes = []
    base = {"threads": args.threads, "lags": args.extractor_lags}
    for length in lengths:
        runnable = []
        for kind in kinds:
            est, avail = estimate_bytes(kind, length, args.extractor_lags), mem_available_bytes()
            if est > MEMORY_LIMIT_BYTES or (avail is not None and est > 0.85 * avail):
                limit = f"> {fmt_mem(MEMORY_LIMIT_BYTES)} limit" if est > MEMORY_LIMIT_BYTES else f"only {fmt_mem(avail)} available"
                train[(kind, length)] = {"error": f"skipped: needs ~{fmt_mem(est)} ({limit})"}
                notes.append(f"{kind} at T={length}: {train[(kind, length)]['error']}")
                print(f"{kind:28s} T={length:5d}  {train[(kind, length)]['error']}", flush=True)
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
            for field, env_extra in (("peak", None), ("peak_fixed", FIXED_MALLOC_ENV)):
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
                + f"peak {fmt_mem(cell.get('peak'))} / {fmt_mem(cell.get('peak_fixed'))} (fixed mmap threshold)"
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
    report = render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_check)
    print()
    print(report)
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(report)
        print(f"# wrote {args.output}")
    return 0


def _median(cell):
    return statistics.median(cell["times"]) if cell and cell.get("times") else None


def render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_check):
    lines = []
    add = lines.append

    def row(cells):
        add("| " + " | ".join(cells) + " |")

    def cell_text(kind, length, value, fmt):
        cell = train.get((kind, length), {})
        if value is not None:
            return fmt(value)
        return "skipped" if "skipped" in cell.get("error", "") else "failed"

    add("# Attention speed and memory (CPU)")
    add("")
    add("Generated by `benchmarks/attention_speed.py` (rerun the command below to refresh; edit the script, not this file).")
    add("")
    add("```")
    add(command)
    add("```")
    add("")
    add(f"- torch {env['torch']}, fairseq {env['fairseq']}, Python {env['python']}; git {env['git']}")
    add(f"- {env['cores']} cores ({env['cpu']}), `torch.set_num_threads({args.threads})`")
    sched = f"nice {env['nice']}" + (f", scheduler autogroup `{env['autogroup']}`" if env.get("autogroup") else "")
    add(f"- load average {env['load']} at the start and {env['load_end']} at the end (other processes share the machine); {sched}; run time {elapsed / 60:.1f} min")
    add(
        f"- one causal self-attention layer (`decoder_self`): d = {EMBED_DIM}, {HEADS} heads, batch 1, float32; "
        f"input x (T x 1 x {EMBED_DIM}) with `requires_grad=True`, loss = `output.sum()`; cosFormer horizon M = {HORIZON}, "
        f"chunk size C = {_default_chunk()}; extractors: l = {args.extractor_lags} lags, convolution path chosen by "
        "their cost rule (`--extractor-conv-impl auto`); extractors have no heads"
    )
    add("")
    add("Method:")
    add("")
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
        "that caching and moves by tens of MB from run to run; with the threshold fixed, RSS follows the "
        "live allocations. softmax's T x T future mask is an input built before the baseline, as fairseq's "
        "decoder builds it once and caches it (it would add 4 T^2 bytes: 268 MB at T = 8192)."
    )
    add(
        "- **Decoding**: `incremental_state` decoding in `eval()` / `no_grad`: each (kind, P) takes a prefix of P tokens "
        f"in one call, then all take {args.decode_steps} timed single-token steps (after 5 untimed) in turn, in one "
        "process; median per token."
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

    # Memory tables: one per allocator setting, a column per kind.
    add("## Peak memory of forward + backward (above the baseline)")
    add("")
    for field, title in (("peak_fixed", "fixed mmap threshold (follows the live allocations)"), ("peak", "default malloc")):
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
                    peak = train.get((k, length), {}).get(field)
                    cells.append(f"{peak / base_peak:.2f}" if peak is not None and base_peak else "-")
            row(cells)
        add("")
    add(
        "Below T = 4096 cosFormer's own temporaries (one segment of chunks, up to about 30 MB, see below) "
        "outweigh its O(T d) tensors, hence more memory than softmax there. The extractors' memory is "
        "O(T d) plus, for SHE, its l d x d weights' gradient (l = "
        f"{args.extractor_lags}: {fmt_mem(args.extractor_lags * EMBED_DIM * EMBED_DIM * 4)})."
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
                f"l = {args.extractor_lags} inputs, so their cost stops growing once the prefix exceeds l."
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
    for text, value, ok in targets(train, decode):
        row([text, value, "yes" if ok else ("**NO**" if ok is not None else "not measured")])
    add("")
    add(
        "Medians over few runs on a shared 2-core machine: a cell's runs that coincide with another job can be "
        "several times slower (see the per-cell minima above). The *default malloc* peaks move by +-30 MB from "
        "run to run with glibc's caching (repeated runs at T = 8192 gave 173-222 MB for cosformer and 172-225 MB "
        "for softmax); the *fixed threshold* peaks, which follow the live allocations, are stable to a few MB "
        "(and torch's profiler counts 135 MB of live tensors for cosformer against 153 MB for softmax at T = 8192)."
    )
    add("")
    if notes:
        add("Notes:")
        add("")
        for note in notes:
            add(f"- {note}")
        add("")
    add(IMPLEMENTATION_NOTES)
    return "\n".join(lines) + "\n"


def _default_chunk():
    from fairseq_plugins.modules.cosformer import DEFAULT_CHUNK_SIZE

    return DEFAULT_CHUNK_SIZE


def targets(train, decode):
    out = []

    def med(kind, length):
        return _median(train.get((kind, length), {}))

    def peaks(kind, length):
        cell = train.get((kind, length), {})
        return cell.get("peak"), cell.get("peak_fixed")

    s8, c8 = med("softmax", 8192), med("cosformer", 8192)
    r = s8 / c8 if s8 and c8 else None
    out.append(("cosformer vs softmax at T=8192: >= 8x faster", f"{r:.1f}x" if r else "-", r >= 8 if r else None))
    (ps, psf), (pc, pcf) = peaks("softmax", 8192), peaks("cosformer", 8192)
    for label, a, b in (("default malloc", pc, ps), ("fixed threshold", pcf, psf)):
        out.append((
            f"cosformer peak memory <= softmax's at T=8192 ({label})",
            f"{fmt_mem(a)} vs {fmt_mem(b)}" if a and b else "-",
            a <= b if a and b else None,
        ))
    r4, c4 = med("cosformer_reference_cumsum", 4096), med("cosformer", 4096)
    r = r4 / c4 if r4 and c4 else None
    out.append(("cosformer vs reference cumsum at T=4096: >= 25x faster", f"{r:.0f}x" if r else "-", r >= 25 if r else None))
    (pr, prf), (pc, pcf) = peaks("cosformer_reference_cumsum", 4096), peaks("cosformer", 4096)
    for label, a, b in (("default malloc", pr, pc), ("fixed threshold", prf, pcf)):
        r = a / b if a and b else None
        out.append((f"cosformer vs reference cumsum at T=4096: >= 6x less peak memory ({label})", f"{r:.0f}x" if r else "-", r >= 6 if r else None))
    r = c8 / c4 if c4 and c8 else None
    out.append(("cosformer time(8192) / time(4096) <= 2.1", f"{r:.2f}" if r else "-", r <= 2.1 if r else None))
    # Linear kinds: constant decoding cost per token (cosFormer's state; the extractors' window of l inputs)
    # and linear training time.
    for kind in ("cosformer",) + EXTRACTOR_KINDS:
        if kind != "cosformer" and not any(k == kind for k, _ in train):
            continue
        if kind != "cosformer":
            t4, t8 = med(kind, 4096), med(kind, 8192)
            r = t8 / t4 if t4 and t8 else None
            out.append((f"{kind} time(8192) / time(4096) <= 2.1", f"{r:.2f}" if r else "-", r <= 2.1 if r else None))
        dec = decode.get(kind, {}) if isinstance(decode, dict) else {}
        text = f"{kind} decoding cost per token, prefix 4096 / prefix 128 <= 1.2"
        if "128" in dec and "4096" in dec:
            r = statistics.median(dec["4096"]) / statistics.median(dec["128"])
            out.append((text, f"{r:.2f}", r <= 1.2))
        else:
            out.append((text, "-", None))
    return out


IMPLEMENTATION_NOTES = """\
## How the causal cosFormer is computed

`fairseq_plugins/modules/cosformer.py`: `_ChunkedCausalCosformer` (a `torch.autograd.Function`), used by the
module and by `cosformer_causal`.

- **Chunked form.** Tokens are cut into chunks of C. Inside a chunk, the exact quadratic form
  `(Q K^T * decay) V` with one shared C x C matrix `decay[i, j] = cos(pi/2 (i - j) / M)` (i >= j). Across chunks,
  each query reads the sums over all earlier chunks, `S = sum_j k_j [cos a_j; sin a_j] v_j^T`, through its
  `q cos a_i` and `q sin a_i` features. No T x d x d tensor exists (the reference form keeps T of them).
- **Layout.** Tensors are chunked as (n, B, H, C, d), chunk index outermost: each per-chunk product is one batched
  matrix product over all chunks and heads, a range of chunks is a contiguous slice, and per-chunk states fill
  slots 1..n of a contiguous (2, n+1, B*H, d, d) tensor whose running sum (one product with a triangular matrix
  of ones per segment; `cumsum` over that dimension is several times slower) turns slot i into the state before
  chunk i. Chunk 0's
  inter-chunk products are skipped when there is no incoming state.
- **No doubled or odd-sized products.** The cos and sin halves are separate tensors, and the denominator (the ones
  column of `v1`) has its own small d x 1 states, so every large product is 64 x 64 x C (products with 65 or
  130 output columns, i.e. the ones column appended or cos and sin side by side, ran 20-40 % slower per flop in
  micro-benchmarks). phi = ReLU of q and k, and the zeroing of padded keys, are fused into the
  copies that chunk them (the module hands over the raw projections).
- **Segments and a hand-written backward.** Forward and backward run over segments of whole chunks of about 2 MB per
  (B*H, tokens, d) slice (8 segments at T = 8192), which keeps the working set in cache and temporaries at a few
  MB whatever T is. The backward walks the segments in reverse and recomputes a segment's chunked inputs,
  intra-chunk weights and states from the state saved at its start, so the layer keeps only q, k, v, the output,
  the clamped denominator and one state per segment: memory O(T d) per head. Gradients are accumulated with
  in-place `baddbmm_`; since nothing but the layer holds its raw q, k, v projections, their gradients overwrite
  them (backpropagating twice through one graph of the layer is refused with an error), and output and gradients
  are written straight in fairseq's time-major layout, so the reshapes around the layer are free.
- **Decoding** (one new token with `incremental_state`) skips the chunk machinery: one outer product updates the
  2d x (d+1) state per head and one product reads it, so the cost per token does not depend on the prefix.
- **Chunk size.** `DEFAULT_CHUNK_SIZE = 64`, from timing the batched products alone (the 21 of one
  forward+backward, single thread, T = 8192): about 130 ms at C = 64 against 145 ms at C = 32 (the per-chunk
  state products, with an inner dimension of C, run slower) and 180 ms at C = 128 (the intra-chunk part,
  2 T C d per head and pass, doubles, and the 128 x 128 score products ran slowly), and from repeated
  round-robin timings of the whole layer with 2 threads, where C = 64 came out 3-8 % ahead of 32 and 128. For the
  whole layer the differences are small (a single sweep like the one above is within its noise), because the
  four 512 x 512 projections (forward and backward) take most of its time. Any C gives the same result.

## How the extractors are computed

`fairseq_plugins/modules/extractors.py`: the extraction (eqs. 23, 26, 28, 29 of Chen 2023) is a causal
convolution over time with a kernel of l lags: d -> d channels for SHE, depthwise for WE and HE, one kernel
shared by all channels for ME. A full pass takes `conv1d` (direct) or an FFT convolution, whichever the cost rule
(`choose_conv_impl`: multiplications times a measured cost per multiplication) estimates faster for the batch,
length and l; both are exact. Time and memory are O(T l d^2) / O(T l d) for the direct path and O(T log T d) for
the FFT path: linear in T for a fixed window. Decoding keeps the last l inputs per layer, so a token costs
O(l d^2) (SHE) or O(l d) whatever the prefix.
"""


if __name__ == "__main__":
    sys.exit(main())
