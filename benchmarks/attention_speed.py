#!/usr/bin/env python
"""Speed and memory of one causal self-attention layer (CPU, or a CUDA device).

Compares, for one decoder self-attention layer (d = 512, 8 heads, batch 1, float32; on ``--device``, by
default ``cuda`` when available, else ``cpu``), every registered kind of causal self-attention (``--help``
lists them with their descriptions) and the baselines the kinds declare with their costs: other
implementations of a kind's function (e.g. a paper's public code), each timed next to its kind and first
checked against it. What the benchmark needs of a kind comes from its registered costs
(``fairseq_plugins/modules/costs.py``: ``AttentionCosts`` and its ``SpeedBenchmark``): the FLOPs of what
runs, a peak-memory estimate and the expected time growth, the model options it is built with (e.g. a
paper's window; ``--kind-option NAME=VALUE`` overrides them), the implementation settings to time
(``--sweep``), its targets and its words in the report.

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
    python benchmarks/attention_speed.py --output docs/records/benchmarks.md   # + docs/records/benchmarks_speed.png
    python benchmarks/attention_speed.py --device cuda        # the same on a GPU

On CUDA, runs are timed with ``torch.cuda.synchronize()`` before and after,
and memory is ``torch.cuda.max_memory_allocated()`` above the allocation at
the reset (``reset_peak_memory_stats``); TF32 is off, so that every product
is float32 like the peak it is compared with.
"""
import argparse
import gc
import json
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

from benchmarks.plotting import new_figure, save_png  # noqa: E402
from benchmarks.provenance import available_cores, git_revision, is_dirty, load_average  # noqa: E402
from fairseq_plugins.files import atomic_output  # noqa: E402

import fairseq_plugins.modules  # noqa: E402  (registers the kinds)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, AttentionConfigError  # noqa: E402
from fairseq_plugins.modules.costs import BenchmarkRun, SpeedBenchmark, format_bytes  # noqa: E402
from fairseq_plugins.modules.options import AttentionContext, flag, parse_option  # noqa: E402


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
# glibc keeps freed blocks below its (dynamically raised) mmap threshold resident, so the peak RSS of a
# default process also measures that caching, which varies by tens of MB from run to run. The second
# memory measurement holds the threshold at glibc's initial 128 KiB, so that RSS follows the live
# allocations.
FIXED_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


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


def kind_descriptions(kinds):
    """(kind, description) of each of ``kinds``: a registered kind's, a baseline's with its kind."""
    return [(kind, f"{BASELINES[kind][1].description} (a baseline of {BASELINES[kind][0]})" if kind in BASELINES
             else ATTENTION_REGISTRY[kind].description) for kind in kinds]


def _command_line_type(parse):
    """``parse`` as an argparse type: its ValueError is the option's error."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


# ---------------------------------------------------------------------------
# Worker side: measurements in fresh processes
# ---------------------------------------------------------------------------


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
    reset = _reset_peak_rss()
    baseline = _peak_rss_bytes() if reset else _rss_bytes()
    for _ in range(spec.get("runs", 2)):
        cell.step()
    return {"peak_bytes": _peak_rss_bytes() - baseline, "peak_reset": reset}


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
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


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


def fmt_time(seconds):
    """At least 3 significant digits: compare_speed_reports.py reads these cells back, and a 2-digit cell
    ("1.8 ms") alone moves a ratio by up to 3 %."""
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-2:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-4:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e6:.1f} us"


fmt_mem = format_bytes  # the kinds' report notes quote sizes alike


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
    epilog = "kinds:\n" + "\n".join(f"  {kind}: {text}" for kind, text in kind_descriptions(KINDS))
    declared = " ".join(sweep_text(kind, setting, sweep.values) for kind, setting, sweep in declared_sweeps(REGISTERED_KINDS))
    options = ", ".join(f"{option}={value}" for option, value in MODEL_OPTIONS.items())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", help=f"sequence lengths T, comma-separated (default: {FULL['lengths']}; cells that do not fit in memory are skipped with a note)")
    parser.add_argument("--repeats", type=int, help=f"timed forward+backward runs per cell after one warm-up, fewer for slow cells (default: {FULL['repeats']})")
    parser.add_argument("--kinds", default=None, help=f"comma-separated subset of {','.join(KINDS)} (default: all that are registered)")
    parser.add_argument("--kind-option", dest="kind_options", action="append", type=_command_line_type(parse_option),
                        metavar="NAME=VALUE", help="a model option of a kind, typed as the kind's options declare it "
                        f"(repeatable), over the values the kinds declare for this benchmark ({options or 'none'}); "
                        f"replaces the former flags of those ({', '.join(map(flag, MODEL_OPTIONS)) or 'none'})")
    parser.add_argument("--decode-prefixes", help=f"prefix lengths for the per-token decoding cost ('' to skip; default: {FULL['decode_prefixes']})")
    parser.add_argument("--decode-steps", type=int, help=f"timed single-token steps per prefix (default: {FULL['decode_steps']})")
    parser.add_argument("--sweep", action="append", type=_command_line_type(lambda text: parse_sweep(text) if text.strip() else None),
                        metavar="KIND:SETTING=V1,V2", help="values of a kind's implementation setting to time at the "
                        f"largest T (repeatable; '' to skip; default: the kinds' own, {declared or 'none'}); replaces "
                        "the former --chunk-sweep")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (default: the cores available)")
    parser.add_argument("--device", default=default_device(), help="cpu or cuda[:i] (default: cuda when available, else cpu: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="smoke run (a couple of minutes): T = 256, 1024; 2 repeats; short decoding; no sweep (explicit options still apply)")
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
    model_options = dict(args.kind_options or ())
    try:
        kind_options(kinds, model_options)
        cost_options(model_options)
    except AttentionConfigError as exc:
        parser.error(f"--kind-option: {exc}")
    prefixes = [int(p) for p in args.decode_prefixes.split(",") if p]
    if args.sweep is None:
        sweeps = [(kind, setting, sweep.values) for kind, setting, sweep in declared_sweeps(kinds)]
    else:  # the sweeps of kinds not measured are left out, as their cells are
        sweeps = [entry for entry in args.sweep if entry is not None and entry[0] in kinds]

    env = environment()
    command = " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] + (argv if argv is not None else sys.argv[1:]))
    print(f"# {command}")
    print(f"# torch {env['torch']}, fairseq {env['fairseq']}, {env['cores']} cores ({env['cpu']}), {args.threads} threads, git {env['git']}, load {env['load']}")
    started = time.time()
    self_checks = {name: check_baseline(name) for name in kinds if name in BASELINES}

    base = {"threads": args.threads, "model_options": model_options, "device": args.device}
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
            why = skip_reason(estimate_bytes(kind, length, model_options), device_type, device_free)
            if why:
                train[(kind, length)] = {"error": why}
                notes.append(f"{kind} at T={length}: {why}")
                print(f"{kind:28s} T={length:5d}  {why}", flush=True)
            else:
                runnable.append(kind)
                train[(kind, length)] = {}
        if not runnable:
            continue
        res = launch(dict(base, mode="time", cells={kind: {"kind": kind} for kind in runnable}, length=length,
                          repeats=args.repeats), timeout=1800)
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

    # Sweeps of the kinds' implementation settings at the largest T, each round-robin in one process.
    sweep_results = {}  # (kind, setting) -> {value: {"times": [...]} or {"error": ...}}
    length = max(lengths)
    for kind, setting, values in sweeps:
        cells = {sweep_text(kind, setting, [value]): {"kind": kind, "settings": {setting: value}} for value in values}
        res = launch(dict(base, mode="time", cells=cells, length=length, repeats=args.repeats), timeout=1800)
        results = sweep_results[(kind, setting)] = {}
        for key, value in zip(cells, values):
            results[value] = {"error": res["error"]} if "error" in res else {"times": res["times"][key]}
            msg = results[value].get("error") or f"median {fmt_time(_median(results[value]))}"
            print(f"{key:28s} T={length:5d}  {msg}", flush=True)

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
    report = render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_checks,
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


def gflops_per_s(kind, length, seconds, model_options=None):
    """Achieved GFLOP/s of one forward+backward that took ``seconds`` (None if not measured)."""
    if not seconds:
        return None
    fwd, bwd = layer_flops(kind, length, model_options)
    return (fwd + bwd) / seconds / 1e9


def doublings(lengths):
    """Consecutive pairs (T, 2T) among the lengths."""
    ordered = sorted(set(lengths))
    return [(t, 2 * t) for t in ordered if 2 * t in ordered]


def write_plot(path, lengths, kinds, train, memory_field, device, memory_label=None):
    """Two log-log panels, forward+backward time and peak memory vs T, one line per kind (Agg backend, no
    global pyplot state)."""
    fig, (ax_time, ax_mem) = new_figure(1, 2, figsize=(12, 4.8))
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
    save_png(fig, path)


def benchmark_run(kinds, lengths, model_options=None):
    """What the kinds' report notes read of this run (``BenchmarkRun``)."""
    return BenchmarkRun(kinds=tuple(kinds), lengths=tuple(lengths), embed_dim=EMBED_DIM, heads=HEADS,
                        options=cost_options(model_options), kind_options=kind_options(kinds, model_options),
                        context=AttentionContext.from_args(model_config(model_options)), growth_margin=GROWTH_MARGIN)


def kind_notes(section, run):
    """The measured kinds' notes for a section of the report (``SpeedBenchmark.notes``), each text once."""
    texts = (speed_benchmark(kind).notes[section](kind, run) for kind in run.kinds
             if kind in ATTENTION_REGISTRY and section in speed_benchmark(kind).notes)
    return list(dict.fromkeys(texts))


def ratio_reference(kinds):
    """The measured kind the report's ratios are to (``SpeedBenchmark.ratio_reference``), or None."""
    return next((k for k in kinds if k in ATTENTION_REGISTRY and speed_benchmark(k).ratio_reference), None)


def above_reference(train, lengths, kind, reference, field):
    """The lengths at which ``kind``'s measured peak memory exceeds ``reference``'s (in this run's ``field``)."""
    above = []
    for length in lengths:
        ours, theirs = (train.get((k, length), {}).get(field) for k in (kind, reference))
        if ours is not None and theirs is not None and ours > theirs:
            above.append(length)
    return above


def render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_checks,
           device=None, peak=None, plot_name=None):
    """The markdown report. ``sweep_results``: (kind, setting) -> {value: cell}; ``self_checks``: baseline -> the
    largest difference from its kind in the check (``check_baseline``)."""
    device = device or {"name": "cpu", "type": "cpu"}
    peak = peak or {}
    on_cuda = device["type"] == "cuda"
    fields = memory_fields(device["type"], getattr(args, "quick", False))
    model_options = dict(getattr(args, "kind_options", None) or ())
    run = benchmark_run(kinds, lengths, model_options)
    reference = ratio_reference(kinds)
    others = [k for k in kinds if k != reference] if reference else []
    baselines = [k for k in kinds if k in BASELINES]
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
        f"input x (T x 1 x {EMBED_DIM}) with `requires_grad=True`, loss = `output.sum()`"
        + "".join(f"; {note}" for note in kind_notes("setup", run))
    )
    add("")
    add("Kinds (the registered kinds' descriptions; baselines: other implementations of a kind's function that the kind "
        "declares):")
    add("")
    for kind, text in kind_descriptions(kinds):
        add(f"- `{kind}`: {text}")
    add("")
    if plot_name:
        add(f"![forward+backward time and peak memory vs T, log-log]({plot_name})")
        add("")
        add(f"[`{plot_name}`]({plot_name}): time (left) and peak memory ({fields[0][1]}, right) vs T, log-log.")
        add("")
    add("Method:")
    add("")
    # kinds that take fairseq's explicit future mask (Cell builds it once, outside the measurement)
    mask_owners = " and ".join(f"{k}'s" for k in kinds if getattr(ATTENTION_REGISTRY.get(k), "cls", None) is not None
                               and getattr(ATTENTION_REGISTRY[k].cls, "uses_future_mask", False))
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
            "the layer (the caching allocator's unused reserve and the CUDA context are not counted)."
            + (f" {mask_owners} T x T future mask is an input built before the reset, as fairseq's decoder builds it "
               "once and caches it." if mask_owners else "")
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
            "live allocations" + (" (`--quick` measures only this one)" if len(fields) == 1 else "") + "."
            + (f" {mask_owners} T x T future mask is an input built before the baseline, as fairseq's decoder builds it "
               f"once and caches it (it would add 4 T^2 bytes: {fmt_mem(4 * max(lengths) ** 2)} at T = {max(lengths)})."
               if mask_owners else "")
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
    for name in baselines:
        err = self_checks.get(name)
        add(
            f"- **Baseline** `{name}`: computes the same function as `{of_kind(name)}`; the run starts by checking it "
            "(float64, T = 50" + (f", max |diff| = {err:.0e})." if err is not None else "; not checked in this run).")
        )
    add("")

    # Time table: ratios to the reference kind, and of each baseline to its kind.
    compared = [k for k in baselines if of_kind(k) in kinds]
    add("## Forward + backward time (median)")
    add("")
    header = ["T"] + list(kinds) + [f"{reference} / {k}" for k in others] + [f"{k} / {of_kind(k)}" for k in compared]
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)] + [cell_text(k, length, _median(train.get((k, length))), fmt_time) for k in kinds]
        cells += [fmt_ratio(_median(train.get((reference, length))), _median(train.get((k, length)))) for k in others]
        cells += [fmt_ratio(_median(train.get((k, length))), _median(train.get((of_kind(k), length)))) for k in compared]
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
            rate = gflops_per_s(k, length, _median(train.get((k, length))), model_options)
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
        row([str(length)] + [f"{sum(layer_flops(k, length, model_options)) / 1e9:.3g}" for k in kinds])
    add("")
    add(
        f"FLOPs per kind (T tokens, d = {EMBED_DIM}, h = {HEADS} heads of d_h = {EMBED_DIM // HEADS}; products count "
        "2 FLOPs per multiply-add, an "
        "outer product 1 per element, complex multiply-adds 8 and complex products 6, a real FFT of n points "
        "2.5 n log2 n and a complex one 5 n log2 n; element-wise work (activations, normalisations, position weights, "
        "biases, element-wise products) is not counted. Autograd backward = twice the forward (the "
        "gradients of both operands of every product) unless stated:"
    )
    add("")
    for k in kinds:
        text = LAYER_FLOP_FORMULAS[k]
        path = None if k in BASELINES else ATTENTION_REGISTRY[k].costs.implementation_path
        if path is not None:
            text += f" (path taken here: {', '.join(sorted({path(t, EMBED_DIM, HEADS, run.options) for t in lengths}))})"
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
        header = ["T"] + list(kinds) + [f"{k} / {reference}" for k in others]
        row(header)
        row(["---:"] * len(header))
        for length in lengths:
            cells = [str(length)] + [cell_text(k, length, train.get((k, length), {}).get(field), fmt_mem) for k in kinds]
            base_peak = train.get((reference, length), {}).get(field)
            for k in others:
                peak_k = train.get((k, length), {}).get(field)
                cells.append(f"{peak_k / base_peak:.2f}" if peak_k is not None and base_peak else "-")
            row(cells)
        add("")
    if reference and not on_cuda:
        for k in others:
            sentence = speed_benchmark(k).memory_above_reference if k in ATTENTION_REGISTRY else ""
            above = above_reference(train, lengths, k, reference, fields[0][0])
            if sentence and above:
                add(sentence.format(reference=reference, lengths=", ".join(map(str, above)), measure=fields[0][1]))
    for note in kind_notes("memory", run):
        add(note)
    add("")

    # Decoding table.
    if decode:
        add("## Incremental decoding: cost per new token (median)")
        add("")
        if "error" in decode:
            add(f"Failed: {decode['error']}")
        else:
            dkinds = [k for k in DECODE_KINDS if k in decode]
            dothers = [k for k in dkinds if k != reference] if reference in dkinds else []
            header = ["prefix P"] + dkinds + [f"{k} / {reference}" for k in dothers]
            row(header)
            row(["---:"] * len(header))
            for prefix in prefixes:
                vals = {k: statistics.median(decode[k][str(prefix)]) for k in dkinds}
                cells = [str(prefix)] + [fmt_time(vals[k]) for k in dkinds]
                cells += [f"{vals[k] / vals[reference]:.2f}" for k in dothers]
                row(cells)
            add("")
            add(" ".join(([f"Ratios are costs relative to {reference} (below 1: cheaper per token)."] if dothers else [])
                         + kind_notes("decoding", run)))
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
                bound, reason = growth_bound(k, t1, t2, model_options)
                a, b = _median(train.get((k, t1))), _median(train.get((k, t2)))
                cells.append(f"{b / a:.2f} (<= {bound:.2f})" if a and b else f"- (<= {bound:.2f})")
            row([k, reason.split(", n =")[0]] + cells)
        add("")
        add(" ".join(
            [f"Bounds: a term linear in T (the projections, O(T d^2), and the linear forms of the complexity column) "
             f"doubles with T, so `<= 2 x {GROWTH_MARGIN:g} = {2 * GROWTH_MARGIN:g}`; an attention core over all T x T "
             f"pairs, O(T^2 d), quadruples: `<= 4 x {GROWTH_MARGIN:g} = {4 * GROWTH_MARGIN:g}` (with the O(T d^2) "
             "projections, the growth of such a kind should lie between 2 and 4)."]
            + kind_notes("growth", run)
            + ["The margin covers run-to-run noise, not memory effects: a working set that falls out of a cache level "
               "between T and 2T can exceed a bound on a CPU."]
        ))
        add("")

    # Sweeps of the kinds' implementation settings.
    for (kind, setting), results in sweep_results.items():
        length, default = max(lengths), speed_benchmark(kind).sweeps[setting].default
        add(f"## `{kind}`: implementation setting `{setting}` (T = {length}, forward + backward, median, one process "
            "round-robin)")
        add("")
        row([f"`{setting}`", "time", f"time / time at {setting} = {default}"])
        row(["---:"] * 3)
        ref = _median(results.get(default, {}))
        for value, res in results.items():
            t = _median(res)
            row([str(value), fmt_time(t) if t else res.get("error", "failed"), f"{t / ref:.2f}" if t and ref else "-"])
        add("")

    # Targets.
    add("## Targets")
    add("")
    row(["target", "measured", "met?"])
    row(["---", "---", "---"])
    for text, value, ok in targets(train, decode, lengths, kinds, model_options, fields):
        row([text, value, "yes" if ok else ("**NO**" if ok is not None else "not measured")])
    add("")
    add(
        "Time growth targets per kind (`time(2T) / time(T)` for the doublings from T = 4096 on) are the bounds of "
        "the growth table above, from each algorithm's complexity."
        + (f" The baselines ({', '.join(baselines)}) are compared with, not targets." if baselines else "")
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
    for note in kind_notes("implementation", run):
        add(note.rstrip("\n"))
        add("")
    return "\n".join(lines) + "\n"


def targets(train, decode, lengths=DEFAULT_LENGTHS, kinds=KINDS, model_options=None, fields=None):
    """(target, measured, met: True / False / None if not measured) rows."""
    fields = fields if fields is not None else memory_fields("cpu")
    out = []

    def med(kind, length):
        return _median(train.get((kind, length), {}))

    def mem(kind, length, field):
        return train.get((kind, length), {}).get(field)

    measured = [k for k in KINDS if k in kinds and k not in BASELINES]
    # The kinds' own goals against another kind or a baseline (SpeedBenchmark.targets).
    for kind in measured:
        for target in speed_benchmark(kind).targets:
            other, length, factor = target.other, target.length, target.factor
            if target.measure == "time":
                a, b = med(kind, length), med(other, length)
                r = b / a if a and b else None
                out.append((f"{kind} vs {other} at T={length}: >= {factor:g}x faster", fmt_ratio(b, a), r >= factor if r else None))
                continue
            for field, label, _ in fields:
                a, b = mem(kind, length, field), mem(other, length, field)
                r = b / a if a and b else None
                if factor == 1:
                    text, value = f"{kind} peak memory <= {other}'s at T={length} ({label})", f"{fmt_mem(a)} vs {fmt_mem(b)}" if a and b else "-"
                else:
                    text, value = f"{kind} vs {other} at T={length}: >= {factor:g}x less peak memory ({label})", fmt_ratio(b, a)
                out.append((text, value, r >= factor if r else None))
    # Time growth per doubling from T = 4096 on, bounded by each kind's complexity (growth_bound); decoding cost
    # per token constant for the kinds whose decoding state is (a constant state, a window of inputs).
    pairs = [(t1, t2) for t1, t2 in doublings(lengths) if t1 >= 4096] or [(4096, 8192)]
    for kind in measured:
        for t1, t2 in pairs:
            bound, reason = growth_bound(kind, t1, t2, model_options)
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


if __name__ == "__main__":
    sys.exit(main())
