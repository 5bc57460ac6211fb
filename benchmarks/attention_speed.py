#!/usr/bin/env python
"""Speed and memory of one causal self-attention layer on CPU.

Compares, for one decoder self-attention layer (d = 512, 8 heads, batch 1,
float32):

* ``softmax``: fairseq's MultiheadAttention as wrapped by our ``softmax`` kind,
  with fairseq's causal (future) mask;
* ``cosformer``: our cosFormer kind (chunked causal form);
* ``cosformer_reference_cumsum``: the public reference's causal formulation
  (the authors' ``cosformer.py``), which materialises the T x 2d x d cumulative
  sum of the cos/sin-weighted k v^T outer products; defined in this file.

It reports forward+backward time (median of repeated runs after a warm-up),
peak memory (measured in a fresh subprocess per cell), the cost per generated
token of incremental decoding at several prefix lengths, and ratios between
the kinds, all from the same run. With ``--output`` it writes a markdown report
(command, versions, git revision, core count, tables, targets).

    python benchmarks/attention_speed.py                      # full run (~5-10 min on 2 cores)
    python benchmarks/attention_speed.py --quick              # smoke run (~1 min)
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

KINDS = ("softmax", "cosformer", "cosformer_reference_cumsum")
DECODE_KINDS = ("softmax", "cosformer")
EMBED_DIM = 512
HEADS = 8
HORIZON = 16384  # cosFormer's M (--cosformer-max-positions): covers the longest T
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
DEFAULT_PREFIXES = (128, 1024, 4096)
MEMORY_LIMIT_BYTES = 16e9  # cells estimated above this are skipped with a note
CELL_BUDGET_S = 20.0  # timed repeats per cell are cut to stay near this budget

TARGETS_TEXT = """\
| target | measured | met? |
|---|---|---|
"""


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


def _reference_module_class():
    from torch import nn

    class ReferenceCumsumAttention(nn.Module):
        """Projections, ReLU feature map and output projection of our cosFormer module, with the
        reference's cumulative-sum causal attention in between. Positions and horizon follow our
        module (angle = pi/2 * i / M, i from 0), so both compute the same function; the authors'
        1-based index with M = T changes only constants, not cost."""

        def __init__(self, cosformer_module):
            super().__init__()
            m = cosformer_module
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = m.q_proj, m.k_proj, m.v_proj, m.out_proj
            self.num_heads, self.head_dim, self.horizon, self.eps = m.num_heads, m.head_dim, m.horizon, m.eps

        def forward(self, query, key=None, value=None, **unused):
            tgt_len, bsz, embed_dim = query.shape
            heads, head_dim = self.num_heads, self.head_dim

            def split(x):  # (L, B, E) -> (B * h, L, d)
                return x.contiguous().view(tgt_len, bsz * heads, head_dim).transpose(0, 1)

            q = split(torch.relu(self.q_proj(query)))
            k = split(torch.relu(self.k_proj(query)))
            v = split(self.v_proj(query))
            angle = (math.pi / 2) * torch.arange(tgt_len, dtype=q.dtype).view(1, -1, 1) / self.horizon
            out = cosformer_reference_cumsum(q, k, v, angle, self.eps)
            out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
            return self.out_proj(out), None

    return ReferenceCumsumAttention


# ---------------------------------------------------------------------------
# Worker side: one measurement in a fresh process
# ---------------------------------------------------------------------------


class _Cfg:
    cosformer_max_positions = HORIZON
    max_target_positions = HORIZON


def build(kind, chunk_size=None):
    from fairseq_plugins.modules import build_attention

    if kind == "cosformer_reference_cumsum":
        return _reference_module_class()(build_attention("cosformer", "decoder_self", EMBED_DIM, HEADS, _Cfg()))
    module = build_attention(kind, "decoder_self", EMBED_DIM, HEADS, _Cfg())
    if chunk_size is not None:
        module.chunk_size = chunk_size
    return module


def future_mask(length):
    """fairseq's future mask (-inf above the diagonal), built without a transient copy."""
    return torch.full((length, length), float("-inf")).triu_(1)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss():
    """Reset the kernel's peak-RSS mark (and so ru_maxrss) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def worker_train(spec):
    kind, length = spec["kind"], spec["length"]
    torch.manual_seed(0)
    module = build(kind, spec.get("chunk_size"))
    # Warm up libraries (thread pools, BLAS buffers) on a short input before the baseline.
    small = torch.randn(16, 1, EMBED_DIM, requires_grad=True)
    module(small, small, small, attn_mask=future_mask(16) if kind == "softmax" else None, need_weights=False)[0].sum().backward()
    module.zero_grad(set_to_none=True)

    x = torch.randn(length, 1, EMBED_DIM, requires_grad=True)
    # fairseq's decoder builds its future mask once and reuses it: it is an input here.
    mask = future_mask(length) if kind == "softmax" else None
    gc.collect()
    reset = _reset_peak_rss()
    baseline = _maxrss_bytes() if reset else _rss_bytes()

    def step():
        out, _ = module(x, x, x, attn_mask=mask, need_weights=False)
        out.sum().backward()
        x.grad = None
        module.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()  # warm-up (also the first memory peak)
    warm = time.perf_counter() - t0
    repeats = max(spec.get("min_repeats", 2), min(spec["repeats"], int(spec.get("budget_s", CELL_BUDGET_S) / max(warm, 1e-3))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    peak = _maxrss_bytes() - baseline
    return {"times": times, "warmup": warm, "peak_bytes": peak, "peak_reset": reset}


def worker_decode(spec):
    kind = spec["kind"]
    torch.manual_seed(0)
    module = build(kind)
    module.eval()
    results = {}
    with torch.no_grad():
        for prefix in spec["prefixes"]:
            state = {}
            x = torch.randn(prefix, 1, EMBED_DIM)
            mask = future_mask(prefix) if kind == "softmax" else None
            module(x, x, x, incremental_state=state, attn_mask=mask, need_weights=False)
            times = []
            for step in range(spec["warmup_steps"] + spec["steps"]):
                tok = torch.randn(1, 1, EMBED_DIM)
                t0 = time.perf_counter()
                module(tok, tok, tok, incremental_state=state, need_weights=False)
                if step >= spec["warmup_steps"]:
                    times.append(time.perf_counter() - t0)
            results[str(prefix)] = times
    return {"per_token": results}


def run_worker(spec):
    torch.set_num_threads(spec["threads"])
    if spec["mode"] == "train":
        return worker_train(spec)
    if spec["mode"] == "decode":
        return worker_decode(spec)
    raise ValueError(spec["mode"])


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


def estimate_bytes(kind, length):
    """Rough peak estimate, to skip cells that cannot fit (float32)."""
    head_dim = EMBED_DIM // HEADS
    if kind == "cosformer_reference_cumsum":
        # kv_, kv_cum and their gradients: ~4.5 tensors of (h, T, 2d, d) (4.7 GB measured at T = 4096).
        return 4.5 * HEADS * length * 2 * head_dim * head_dim * 4
    if kind == "softmax":
        # Explicit attention path worst case: weights, probabilities and gradient (h, T, T), plus the mask.
        return (3 * HEADS + 1) * length * length * 4
    return 40 * length * EMBED_DIM * 4


def launch(spec, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
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
    return f"{nbytes / 1e6:.0f} MB"


def fmt_ratio(a, b):
    if a is None or b is None or b <= 0:
        return "-"
    r = a / b
    return f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


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
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"]
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": fairseq_version,
        "git": rev,
        "cpu": cpu,
        "cores": available_cores(),
        "load": " ".join(load),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="sequence lengths T (comma-separated)")
    parser.add_argument("--repeats", type=int, default=7, help="timed forward+backward runs per cell after one warm-up (fewer for slow cells)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--decode-prefixes", default=",".join(map(str, DEFAULT_PREFIXES)), help="prefix lengths for the per-token decoding cost ('' to skip)")
    parser.add_argument("--decode-steps", type=int, default=50, help="timed single-token steps per prefix")
    parser.add_argument("--chunk-sweep", default="16,32,64,128,256", help="cosformer chunk sizes to time at the largest T ('' to skip)")
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
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {KINDS}")
    prefixes = [int(p) for p in args.decode_prefixes.split(",") if p]
    sweep = [int(c) for c in args.chunk_sweep.split(",") if c] if "cosformer" in kinds else []

    env = environment()
    command = " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] + (argv if argv is not None else sys.argv[1:]))
    print(f"# {command}")
    print(f"# torch {env['torch']}, fairseq {env['fairseq']}, {env['cores']} cores ({env['cpu']}), {args.threads} threads, git {env['git']}, load {env['load']}")
    started = time.time()

    _self_check()

    # Forward + backward, one fresh process per (kind, T).
    train = {}
    notes = []
    for length in lengths:
        for kind in kinds:
            est = estimate_bytes(kind, length)
            avail = mem_available_bytes()
            if est > MEMORY_LIMIT_BYTES or (avail is not None and est > 0.9 * avail):
                why = f"skipped: needs ~{fmt_mem(est)}" + (f" (> {fmt_mem(MEMORY_LIMIT_BYTES)} limit)" if est > MEMORY_LIMIT_BYTES else f" (only {fmt_mem(avail)} available)")
                train[(kind, length)] = {"error": why}
                notes.append(f"{kind} at T={length}: {why}")
                print(f"{kind:28s} T={length:5d}  {why}", flush=True)
                continue
            spec = {"mode": "train", "kind": kind, "length": length, "repeats": args.repeats, "threads": args.threads}
            res = launch(spec, timeout=900)
            train[(kind, length)] = res
            if "error" in res:
                notes.append(f"{kind} at T={length}: {res['error']}")
                print(f"{kind:28s} T={length:5d}  {res['error']}", flush=True)
            else:
                print(
                    f"{kind:28s} T={length:5d}  median {fmt_time(statistics.median(res['times'])):>9s} "
                    f"(min {fmt_time(min(res['times']))}, {len(res['times'])} runs)  peak {fmt_mem(res['peak_bytes'])}",
                    flush=True,
                )

    # Chunk-size sweep of the causal cosFormer at the largest T.
    sweep_results = {}
    if sweep:
        length = max(lengths)
        for chunk in sweep:
            spec = {"mode": "train", "kind": "cosformer", "length": length, "repeats": args.repeats, "threads": args.threads, "chunk_size": chunk}
            sweep_results[chunk] = launch(spec, timeout=900)
            res = sweep_results[chunk]
            msg = res.get("error") or f"median {fmt_time(statistics.median(res['times']))}  peak {fmt_mem(res['peak_bytes'])}"
            print(f"cosformer chunk={chunk:4d}          T={length:5d}  {msg}", flush=True)

    # Incremental decoding.
    decode = {}
    if prefixes:
        for kind in [k for k in DECODE_KINDS if k in kinds]:
            spec = {"mode": "decode", "kind": kind, "prefixes": prefixes, "steps": args.decode_steps, "warmup_steps": 5, "threads": args.threads}
            decode[kind] = launch(spec, timeout=900)
            res = decode[kind]
            if "error" in res:
                print(f"decode {kind}: {res['error']}", flush=True)
                continue
            for prefix in prefixes:
                print(f"decode {kind:10s} prefix={prefix:5d}  {fmt_time(statistics.median(res['per_token'][str(prefix)]))} per token", flush=True)

    env["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    elapsed = time.time() - started
    report = render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed)
    print()
    print(report)
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(report)
        print(f"# wrote {args.output}")
    return 0


def _self_check():
    """The benchmarked reference form must compute the same function as our module."""
    torch.manual_seed(0)
    module = build("cosformer").double()
    module.chunk_size = 16
    reference = _reference_module_class()(module)
    x = torch.randn(50, 1, EMBED_DIM, dtype=torch.float64)
    with torch.no_grad():
        err = (module(x, x, x, need_weights=False)[0] - reference(x)[0]).abs().max().item()
    print(f"# self-check: reference cumsum form vs cosformer (float64, T=50): max |diff| = {err:.1e}")
    if err > 1e-8:
        raise SystemExit("the reference cumsum form does not match the cosformer module")


def _median(res):
    return statistics.median(res["times"]) if res and "times" in res else None


def _peak(res):
    return res["peak_bytes"] if res and "peak_bytes" in res else None


def render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed):
    lines = []
    add = lines.append
    add("# Attention speed and memory (CPU)")
    add("")
    add("Generated by `benchmarks/attention_speed.py`; do not edit by hand (rerun the command below).")
    add("")
    add("```")
    add(command)
    add("```")
    add("")
    add(
        f"- torch {env['torch']}, fairseq {env['fairseq']}, Python {env['python']}; git {env['git']}\n"
        f"- {env['cores']} cores ({env['cpu']}), `torch.set_num_threads({args.threads})`; "
        f"load average {env['load']} at the start, {env['load_end']} at the end; total run time {elapsed / 60:.1f} min\n"
        f"- one causal self-attention layer (`decoder_self`): d = {EMBED_DIM}, {HEADS} heads, batch 1, float32; "
        f"input x (T x 1 x {EMBED_DIM}) with `requires_grad=True`, loss = output.sum(); cosFormer horizon M = {HORIZON}"
    )
    add("")
    add("Method:")
    add("")
    add(
        "- **time**: forward+backward of the layer, median over repeated runs after one warm-up run "
        f"(at most {args.repeats} runs, fewer for slow cells to keep each cell near {CELL_BUDGET_S:.0f} s; at least 2), "
        "`time.perf_counter`, in the same fresh process as the memory measurement."
    )
    add(
        "- **peak memory**: every (kind, T) cell runs in a fresh subprocess. After building the module and the "
        "inputs (and a tiny warm-up call that initialises thread pools and BLAS buffers), the kernel's peak-RSS mark "
        "is reset to the current RSS (`/proc/self/clear_refs`); the reported value is "
        "`resource.getrusage(RUSAGE_SELF).ru_maxrss` after the warm-up and timed runs minus that baseline, i.e. the "
        "extra resident memory the forward+backward needed. `tracemalloc` does not see torch's allocations. "
        "softmax's T x T future mask is built once before the baseline, as fairseq's decoder caches it."
    )
    add(
        "- **decoding**: `incremental_state` decoding in `eval()`/`no_grad`: feed a prefix of P tokens in one call, "
        f"then time {args.decode_steps} single-token steps (after 5 untimed ones); median per token."
    )
    add(
        "- `cosformer_reference_cumsum` is the authors' causal formulation (`einsum('nld,nlm->nldm', k_, v)`, "
        "`cumsum` over L, `einsum('nld,nldm->nlm', q_, kv_cum)`, denominator likewise) between our projections; it is "
        "checked at startup to compute the same function as `cosformer` (float64)."
    )
    add("")

    def row(cells):
        add("| " + " | ".join(cells) + " |")

    # Time table.
    add("## Forward + backward time")
    add("")
    header = ["T"] + [f"{k}" for k in kinds]
    ratio_cols = []
    if "softmax" in kinds:
        ratio_cols += [(k, "softmax") for k in kinds if k != "softmax"]
    if "cosformer" in kinds and "cosformer_reference_cumsum" in kinds:
        ratio_cols.append(("cosformer", "cosformer_reference_cumsum"))
    header += [f"speed-up of {a} vs {b}" for a, b in ratio_cols]
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)]
        for k in kinds:
            res = train.get((k, length))
            cells.append(fmt_time(_median(res)) if res and "times" in res else "skipped" if res and "skipped" in res.get("error", "") else "failed")
        for a, b in ratio_cols:
            cells.append(fmt_ratio(_median(train.get((b, length))), _median(train.get((a, length)))))
        row(cells)
    add("")
    add("Runs per cell (median / min): " + "; ".join(
        f"{k} T={t}: {len(r['times'])} ({fmt_time(_median(r))} / {fmt_time(min(r['times']))})"
        for (k, t), r in train.items() if "times" in r
    ) + ".")
    add("")

    # Memory table.
    add("## Peak memory (forward + backward, above the baseline)")
    add("")
    header = ["T"] + list(kinds)
    mem_cols = []
    if "softmax" in kinds:
        mem_cols += [(k, "softmax") for k in kinds if k != "softmax"]
    if "cosformer" in kinds and "cosformer_reference_cumsum" in kinds:
        mem_cols.append(("cosformer_reference_cumsum", "cosformer"))
    header += [f"{a} / {b}" for a, b in mem_cols]
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)]
        for k in kinds:
            res = train.get((k, length))
            cells.append(fmt_mem(_peak(res)) if res and "peak_bytes" in res else "skipped" if res and "skipped" in res.get("error", "") else "failed")
        for a, b in mem_cols:
            pa, pb = _peak(train.get((a, length))), _peak(train.get((b, length)))
            cells.append(f"{pa / pb:.2f}" if pa is not None and pb else "-")
        row(cells)
    add("")

    # Decoding table.
    if decode:
        add("## Incremental decoding: cost per new token")
        add("")
        dkinds = [k for k in DECODE_KINDS if k in decode and "per_token" in decode[k]]
        header = ["prefix P"] + dkinds + (["cosformer / softmax"] if len(dkinds) == 2 else [])
        row(header)
        row(["---:"] * len(header))
        for prefix in prefixes:
            vals = [statistics.median(decode[k]["per_token"][str(prefix)]) for k in dkinds]
            cells = [str(prefix)] + [fmt_time(v) for v in vals]
            if len(dkinds) == 2:
                cells.append(f"{vals[1] / vals[0]:.2f}")
            row(cells)
        add("")
        for k in DECODE_KINDS:
            if k in decode and "error" in decode[k]:
                add(f"- decoding {k}: {decode[k]['error']}")
        add("")

    # Chunk sweep.
    if sweep_results:
        length = max(lengths)
        add(f"## cosFormer chunk size (T = {length})")
        add("")
        row(["chunk C", "forward+backward", "peak memory"])
        row(["---:"] * 3)
        for chunk, res in sweep_results.items():
            if "times" in res:
                row([str(chunk), fmt_time(_median(res)), fmt_mem(_peak(res))])
            else:
                row([str(chunk), res.get("error", "failed"), "-"])
        add("")

    # Targets.
    add("## Targets")
    add("")
    add(TARGETS_TEXT.rstrip("\n"))
    for text, value, ok in targets(train, decode):
        row([text, value, "yes" if ok else ("**NO**" if ok is not None else "not measured")])
    add("")
    if notes:
        add("Notes:")
        add("")
        for note in notes:
            add(f"- {note}")
        add("")
    add(IMPLEMENTATION_NOTES)
    return "\n".join(lines) + "\n"


def targets(train, decode):
    out = []

    def med(kind, length):
        return _median(train.get((kind, length)))

    def peak(kind, length):
        return _peak(train.get((kind, length)))

    s8, c8 = med("softmax", 8192), med("cosformer", 8192)
    speed = s8 / c8 if s8 and c8 else None
    out.append(("cosformer vs softmax at T=8192: >= 8x faster", f"{speed:.1f}x" if speed else "-", speed >= 8 if speed else None))
    ps8, pc8 = peak("softmax", 8192), peak("cosformer", 8192)
    out.append((
        "cosformer peak memory <= softmax's at T=8192",
        f"{fmt_mem(pc8)} vs {fmt_mem(ps8)}" if ps8 and pc8 else "-",
        pc8 <= ps8 if ps8 and pc8 else None,
    ))
    r4, c4 = med("cosformer_reference_cumsum", 4096), med("cosformer", 4096)
    speed = r4 / c4 if r4 and c4 else None
    out.append(("cosformer vs reference cumsum at T=4096: >= 25x faster", f"{speed:.0f}x" if speed else "-", speed >= 25 if speed else None))
    pr4, pc4 = peak("cosformer_reference_cumsum", 4096), peak("cosformer", 4096)
    ratio = pr4 / pc4 if pr4 and pc4 else None
    out.append(("cosformer vs reference cumsum at T=4096: >= 6x less peak memory", f"{ratio:.1f}x" if ratio else "-", ratio >= 6 if ratio else None))
    c4_, c8_ = med("cosformer", 4096), med("cosformer", 8192)
    ratio = c8_ / c4_ if c4_ and c8_ else None
    out.append(("cosformer time(8192) / time(4096) <= 2.1", f"{ratio:.2f}" if ratio else "-", ratio <= 2.1 if ratio else None))
    dec = decode.get("cosformer", {}).get("per_token", {})
    if "128" in dec and "4096" in dec:
        ratio = statistics.median(dec["4096"]) / statistics.median(dec["128"])
        out.append(("cosformer decoding cost per token, prefix 4096 / prefix 128 <= 1.2", f"{ratio:.2f}", ratio <= 1.2))
    else:
        out.append(("cosformer decoding cost per token, prefix 4096 / prefix 128 <= 1.2", "-", None))
    return out


IMPLEMENTATION_NOTES = """\
## How the causal cosFormer is computed

`fairseq_plugins/modules/cosformer.py`, `_ChunkedCausalCosformer` (used by `cosformer_causal` and the module):

- **Chunked form.** Tokens are cut into chunks of C. Inside a chunk, the exact quadratic form
  `(Q K^T * decay) V` with one shared C x C matrix `decay[i, j] = cos(pi/2 (i - j) / M)` (i >= j). Across chunks,
  each query reads the sums of all earlier chunks, `S = sum_j k_j [cos a_j; sin a_j] v_j^T`, through its
  `q cos a_i` and `q sin a_i` features. Memory is O(T (d + C)) per head plus T/C states of 2 x d x d;
  no T x d x d tensor exists (the reference cumsum form keeps T of them).
- **Layout.** Every tensor is chunked as (n, B, H, C, d), chunk index outermost: each per-chunk product is one
  batched matrix product over all chunks and heads, and the per-chunk states fill slots 1..n of one contiguous
  (n+1, B*H, d, d) tensor whose in-place running sum (a loop of n in-place adds, much faster than `cumsum`
  over that dimension) turns slot i into the state before chunk i. Chunk 0's inter-chunk products are skipped
  when there is no incoming state.
- **No doubled or odd-sized products.** cos and sin halves are kept in separate tensors, and the denominator
  (the ones column of `v1`) in separate small d x 1 states, so every large product is 64 x 64 x C and no
  temporary is larger than T x d per head (on glibc, tensors above 32 MB are fresh `mmap`s whose page faults
  cost as much as the arithmetic).
- **Hand-written backward** (`torch.autograd.Function`): it recomputes nothing expensive, accumulates with
  in-place `baddbmm_`, and writes the gradients straight into the time-major layout of the projections.
  The forward writes its output the same way, so the module's final reshape is free.
- **Decoding** (one new token with `incremental_state`) skips the chunk machinery: the state is updated with one
  outer product and read with one 1 x 2d by 2d x (d+1) product per head, so the cost per token does not depend on
  the prefix length.
- **Chunk size.** `DEFAULT_CHUNK_SIZE` was chosen from the sweep above: small chunks make the per-chunk
  products too small to run at full speed and multiply the states; large ones make the intra-chunk quadratic
  part (2 T C d per head and pass) dominate. Any C gives the same result.
"""


if __name__ == "__main__":
    sys.exit(main())
