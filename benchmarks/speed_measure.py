"""The measuring half of ``attention_speed.py``: what the kinds declare for the benchmark, the layers it
builds, the worker processes that time them (forward+backward, peak memory, decoding, the matrix-multiply
peak) and the driver's side of launching them. ``attention_speed.py`` is the command; ``speed_report.py``
renders what this measures. Run by path with ``--worker JSON``, it is the worker process."""
import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time

import torch

if __package__ in (None, ""):  # run by path, not as python -m: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import FIXED_MALLOC_ENV, peak_rss_bytes, proc_kib_field, reset_peak_rss, rss_bytes  # noqa: E402
from benchmarks.provenance import available_cores, git_revision, load_average  # noqa: E402

import fairseq_plugins.modules  # noqa: E402,F401  (registers the kinds)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF  # noqa: E402
from fairseq_plugins.modules.costs import SpeedBenchmark, format_bytes as fmt_mem  # noqa: E402


def speed_benchmark(kind):
    """What registered ``kind`` declares for this benchmark (nothing for a kind without costs)."""
    costs = ATTENTION_REGISTRY[kind].costs
    return costs.speed_benchmark if costs is not None else SpeedBenchmark()


# Every registered kind of causal self-attention: the one the ratios are to (``ratio_reference``) first, the
# others in registration order, so that tables and plots read from the reference onwards.
REGISTERED_KINDS = tuple(sorted(
    (name for name, spec in ATTENTION_REGISTRY.items() if DECODER_SELF in spec.placements),
    key=lambda name: not speed_benchmark(name).ratio_reference))


def declared_baselines():
    """The baselines the kinds declare (``SpeedBenchmark.baselines``), not registered kinds: name -> (its kind,
    its ``Baseline``)."""
    baselines = {}
    for kind in REGISTERED_KINDS:
        for baseline in speed_benchmark(kind).baselines:
            if baseline.name in ATTENTION_REGISTRY or baseline.name in baselines:
                raise ValueError(f"{kind} declares a baseline {baseline.name!r}: the name of a registered kind or of "
                                 "another baseline")
            baselines[baseline.name] = (kind, baseline)
    return baselines


BASELINES = declared_baselines()
# What is measured: every registered kind, each followed by its baselines.
KINDS = tuple(k for kind in REGISTERED_KINDS for k in (kind, *(b.name for b in speed_benchmark(kind).baselines)))
# Kinds with incremental decoding (the baselines have none).
DECODE_KINDS = tuple(k for k in KINDS if k not in BASELINES)
EMBED_DIM = 512
HEADS = 8
HORIZON = 16384  # the positions the layers are built for (max_target_positions): covers the longest T
WARM_UP_LENGTH = 16
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)  # cells whose estimate does not fit are skipped
DEFAULT_PREFIXES = (128, 1024, 4096)
# --quick: a smoke run of a couple of minutes (options given explicitly still win); sweep None: the kinds' own
QUICK = {"lengths": "256,1024", "repeats": 2, "decode_prefixes": "128,1024", "decode_steps": 10, "sweep": []}
FULL = {"lengths": ",".join(map(str, DEFAULT_LENGTHS)), "repeats": 5, "decode_prefixes": ",".join(map(str, DEFAULT_PREFIXES)),
        "decode_steps": 50, "sweep": None}
MEMORY_LIMIT_BYTES = 16e9  # CPU: cells estimated above this are skipped with a note (and above 85 % of MemAvailable)
DEVICE_MEMORY_FRACTION = 0.85  # CUDA: cells estimated above this fraction of the free device memory are skipped
# The time(2T) / time(T) targets allow the growth of each kind's fastest-growing term plus this margin.
GROWTH_MARGIN = 1.05
# Matrix products timed for the float32 peak: (M, K, N) of (M x K) @ (K x N). The first is the layer's own
# projection at T = 4096; on CUDA larger ones are needed to fill the device.
PEAK_SHAPES = {"cpu": ((4096, EMBED_DIM, EMBED_DIM), (2048, 2048, 2048)),
               "cuda": ((4096, EMBED_DIM, EMBED_DIM), (4096, 4096, 4096), (8192, 8192, 8192))}
CELL_BUDGET_S = 15.0  # timed runs of a cell are cut to stay near this budget (at least 2)


# ---------------------------------------------------------------------------
# What the kinds declare: model options, counts, settings
# ---------------------------------------------------------------------------


def declared_model_options():
    """model option -> value, as the kinds declare them for this benchmark (``SpeedBenchmark.model_options``)."""
    values, declared_by = {}, {}
    for kind in REGISTERED_KINDS:
        for option, value in speed_benchmark(kind).model_options.items():
            if option in values and values[option] != value:
                raise ValueError(f"{declared_by[option]} and {kind} declare different benchmark values of "
                                 f"{option}: {values[option]!r} and {value!r}")
            values.setdefault(option, value)
            declared_by.setdefault(option, kind)
    return values


MODEL_OPTIONS = declared_model_options()


def model_config(model_options=None):
    """The model options the layers are built with: HORIZON target positions, the kinds' declared values
    (``MODEL_OPTIONS``) and ``model_options`` (option -> value, ``--kind-option``) over them."""
    return argparse.Namespace(max_target_positions=HORIZON, **{**MODEL_OPTIONS, **(model_options or {})})


def cost_options(model_options=None):
    """The options the kinds' counts read (``AttentionOptions``), as the kinds read them from the model options."""
    from fairseq_plugins.cli.model_costs import attention_options

    return attention_options(model_config(model_options), kinds=REGISTERED_KINDS)


def costs_of(kind):
    """The counts of a registered kind (its ``AttentionCosts``) or of a baseline (its ``Baseline``), which
    answer ``training_flops``, ``training_flops_text``, ``training_peak_bytes`` and ``time_growth`` alike."""
    if kind in BASELINES:
        return BASELINES[kind][1]
    costs = ATTENTION_REGISTRY[kind].costs
    if costs is None:
        raise ValueError(f"{kind} registers no costs (register_attention(costs=...)): nothing to count it by")
    return costs


def of_kind(kind):
    """The registered kind that ``kind`` (a registered kind or a baseline) is."""
    return BASELINES[kind][0] if kind in BASELINES else kind


def declared_sweeps(kinds):
    """(kind, setting, SettingSweep) of the implementation settings the measured registered kinds declare."""
    return [(kind, setting, sweep) for kind in kinds if kind in ATTENTION_REGISTRY
            for setting, sweep in speed_benchmark(kind).sweeps.items()]


def parse_sweep(text):
    """``kind:setting=v1,v2`` -> (kind, setting, values), the values of the type of the setting's default;
    errors (ValueError) say what is expected."""
    kind, sep, rest = text.partition(":")
    setting, sep2, values = rest.partition("=")
    kind, setting = kind.strip(), setting.strip()
    if not (sep and sep2 and kind and setting):
        raise ValueError(f"expected kind:setting=v1,v2, got {text!r}")
    declared = {(k, s): sweep for k, s, sweep in declared_sweeps(REGISTERED_KINDS)}
    if (kind, setting) not in declared:
        known = ", ".join(f"{k}:{s}" for k, s in declared) or "(none)"
        raise ValueError(f"{kind}:{setting} is not a setting a registered kind declares; declared: {known}")
    kind_of_values = type(declared[kind, setting].default)
    try:
        return kind, setting, tuple(kind_of_values(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{kind}:{setting} takes {kind_of_values.__name__} values, got {values!r}") from None


def sweep_text(kind, setting, values):
    return f"{kind}:{setting}={','.join(map(str, values))}"


def kind_options(kinds, model_options=None):
    """registered kind -> its typed options (its ``KindOptions``, validated), for the kinds of ``kinds`` (of
    their baselines too) as ``model_config`` builds them."""
    cfg = model_config(model_options)
    return {kind: ATTENTION_REGISTRY[kind].options_class.from_args(cfg) for kind in dict.fromkeys(map(of_kind, kinds))}


def options_read(kinds):
    """The model options (``--kind-option`` names) the kinds of ``kinds`` (of their baselines too) read."""
    from fairseq_plugins.modules.options import option_fields

    return {f.name for kind in dict.fromkeys(map(of_kind, kinds)) for f in option_fields(ATTENTION_REGISTRY[kind].options_class)}


def kind_descriptions(kinds):
    """(kind, description) of each of ``kinds``: a registered kind's, a baseline's with its kind."""
    return [(kind, f"{BASELINES[kind][1].description} (a baseline of {BASELINES[kind][0]})" if kind in BASELINES
             else ATTENTION_REGISTRY[kind].description) for kind in kinds]


def build(kind, settings=None, seed=0, model_options=None, device="cpu", embed_dim=EMBED_DIM, heads=HEADS):
    """The layer of ``kind`` (a baseline: built from its kind's layer) with the implementation ``settings``
    (module attribute -> value) set; ``model_options``: as ``model_config``."""
    from fairseq_plugins.modules import build_attention

    torch.manual_seed(seed)
    module = build_attention(of_kind(kind), DECODER_SELF, embed_dim, heads, model_config(model_options))
    if kind in BASELINES:
        module = BASELINES[kind][1].build(module)
    for setting, value in (settings or {}).items():
        if not hasattr(module, setting):
            raise ValueError(f"{kind} has no implementation setting {setting!r} (no such attribute of {type(module).__name__})")
        setattr(module, setting, value)
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

    def __init__(self, kind, length, settings=None, model_options=None, device="cpu"):
        self.kind = kind
        self.device = device
        self.module = build(kind, settings, model_options=model_options, device=device)
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


def _warm_up_libraries(kind, model_options=None, device="cpu"):
    """A tiny forward+backward, so that thread pools and BLAS buffers (on CUDA: the context, cuBLAS and
    cuDNN handles) exist before any baseline. Integer model options (a window, a horizon) are capped at its
    length, so that the layer is tiny too."""
    tiny = {option: min(value, WARM_UP_LENGTH) if isinstance(value, int) and not isinstance(value, bool) else value
            for option, value in {**MODEL_OPTIONS, **(model_options or {})}.items()}
    Cell(kind, WARM_UP_LENGTH, model_options=tiny, device=device).step()
    synchronize(device)


def worker_memory(spec):
    """Peak RSS of forward+backward above the RSS after building module and input (CPU); on CUDA the peak
    of torch's allocations above those at the reset."""
    device = spec.get("device", "cpu")
    _warm_up_libraries(spec["kind"], spec.get("model_options"), device)
    cell = Cell(spec["kind"], spec["length"], spec.get("settings"), spec.get("model_options"), device)
    gc.collect()
    if torch.device(device).type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        for _ in range(spec.get("runs", 2)):
            cell.step()
        synchronize(device)
        return {"peak_bytes": torch.cuda.max_memory_allocated(device) - baseline, "peak_reset": True}
    reset = reset_peak_rss()
    baseline = peak_rss_bytes() if reset else rss_bytes()
    for _ in range(spec.get("runs", 2)):
        cell.step()
    return {"peak_bytes": peak_rss_bytes() - baseline, "peak_reset": reset}


def worker_time(spec):
    """Forward+backward times of several cells (key -> {"kind", "settings"}: kinds, or one kind at several
    implementation settings) at one T, run round-robin so that all see the same machine load: one warm-up
    each, then timed runs until each has its count."""
    device = spec.get("device", "cpu")
    cells = {}
    for key, cell in spec["cells"].items():
        _warm_up_libraries(cell["kind"], spec.get("model_options"), device)
        cells[key] = Cell(cell["kind"], spec["length"], cell.get("settings"), spec.get("model_options"), device)
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
    modules = {kind: build(kind, model_options=spec.get("model_options"), device=device).eval() for kind in spec["kinds"]}
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
    return proc_kib_field("/proc/meminfo", "MemAvailable")


def estimate_bytes(kind, length, model_options=None):
    """Rough peak of one forward+backward (float32, on the high side), to skip cells that cannot fit: the
    kind's own estimate (``training_peak_bytes``)."""
    return costs_of(kind).training_peak_bytes(length, EMBED_DIM, HEADS, cost_options(model_options))


# ---------------------------------------------------------------------------
# FLOPs per kind, counted from the algorithm that runs
# ---------------------------------------------------------------------------


def layer_flops(kind, length, model_options=None, embed_dim=EMBED_DIM, heads=HEADS, **settings):
    """(forward, backward) FLOPs of one forward+backward of the layer on T tokens of one sequence, counted
    from the algorithm that runs: each kind's registered ``implementation_flops`` (``settings``: the
    implementation's own, as its module attributes, e.g. a chunk size or a convolution path), a baseline's
    own count; a kind without one, the count of its definition.

    Products count 2 FLOPs per multiply-add (an outer product, K = 1, one per element), complex
    multiply-adds 8, complex products 6, FFTs 2.5 n log2 n (real) or 5 n log2 n (complex), a cumulative sum
    one per element. Element-wise work (activations, normalisations, position weights, biases, element-wise
    products) is not counted. The backward of every autograd product is counted as the products it runs:
    the gradients of both operands, i.e. twice the forward; fused attention (scaled_dot_product_attention)
    recomputes the scores in its backward: 5 products per 2 of the forward; a hand-written backward is
    counted product by product. ``LAYER_FLOP_FORMULAS`` states the same in words."""
    return costs_of(kind).training_flops(length, embed_dim, heads, cost_options(model_options), **settings)


LAYER_FLOP_FORMULAS = {kind: costs_of(kind).training_flops_text for kind in KINDS
                       if kind in BASELINES or ATTENTION_REGISTRY[kind].costs is not None}


def growth_bound(kind, t1, t2, model_options=None):
    """The largest time(t2) / time(t1) expected from a kind's complexity: the growth of its fastest-growing
    term (the kind's ``time_growth``, e.g. t2 / t1 for O(T d^2) projections and linear forms, (t2 / t1)^2 for
    an O(T^2 d) attention core), times ``GROWTH_MARGIN``; and that term in words."""
    growth, reason = costs_of(kind).time_growth(t1, t2, EMBED_DIM, HEADS, cost_options(model_options))
    return GROWTH_MARGIN * growth, reason


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


def check_baseline(name):
    """A benchmarked baseline must compute the same function as its kind's module (float64, T = 50, the
    kind's module with the baseline's ``check_settings``): the largest difference."""
    kind, baseline = BASELINES[name]
    module = build(kind, baseline.check_settings).double()
    reference = baseline.build(module)
    x = torch.randn(50, 1, EMBED_DIM, dtype=torch.float64)
    with torch.no_grad():
        err = (module(x, x, x, need_weights=False)[0] - reference(x, x, x, need_weights=False)[0]).abs().max().item()
    print(f"# self-check: {name} vs {kind} (float64, T=50): max |diff| = {err:.1e}")
    if err > 1e-8:
        raise SystemExit(f"the baseline {name} does not match the {kind} module (max |diff| = {err:.1e})")
    return err


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


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



if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--worker":
        sys.exit("usage: speed_measure.py --worker JSON (started by attention_speed.py)")
    print(json.dumps(run_worker(json.loads(sys.argv[2]))))
