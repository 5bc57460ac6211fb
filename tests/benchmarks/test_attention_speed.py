"""The pure parts of benchmarks/attention_speed.py (its measuring and reporting modules, speed_measure.py and
speed_report.py): FLOP counts, growth bounds, memory guard, plot and
report rendering, and what the kinds declare for it (baselines, sweeps, model options). No timings are
asserted (the script's measurements are a benchmark, not a test)."""
import argparse
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import attention_speed as bench
from benchmarks import common
from benchmarks import speed_measure as measure
from benchmarks import speed_report
from fairseq_plugins.modules import ATTENTION_REGISTRY
from fairseq_plugins.modules.extractors import EXTRACTOR_KINDS

aten = torch.ops.aten


# ---------------------------------------------------------------------------
# A direct count of the products that actually run
# ---------------------------------------------------------------------------


def _named_args(func, args, kwargs):
    named = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            named[arg.name] = args[i]
        elif arg.name in kwargs:
            named[arg.name] = kwargs[arg.name]
        else:
            named[arg.name] = arg.default_value if arg.has_default_value() else None
    return named


class ExecutedFlops(TorchDispatchMode):
    """Counts the FLOPs of the aten products, convolutions, fused attentions, FFTs, complex products and
    cumulative sums that run (every overload, in-place and out= variants included), with the conventions of
    ``layer_flops``; records any other product-like operator it does not know."""

    PRODUCTS = (aten.mm, aten.addmm, aten.bmm, aten.baddbmm)

    def __init__(self):
        super().__init__()
        self.flops = 0.0
        self.unknown = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet, a = func.overloadpacket, _named_args(func, args, kwargs)
        name = str(func)
        if packet in self.PRODUCTS or name.startswith("aten.baddbmm_"):
            x, y = (a["mat1"], a["mat2"]) if "mat1" in a else (a["batch1"], a["batch2"]) if "batch1" in a else (a["self"], a["mat2"])
            batch = x.shape[0] if x.dim() == 3 else 1
            m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
            per = (6 if k == 1 else 8 * k) if x.is_complex() else (1 if k == 1 else 2 * k)
            self.flops += batch * m * n * per
        elif packet is aten.convolution:
            w = a["weight"]
            self.flops += 2 * out.numel() * w.shape[1] * math.prod(w.shape[2:])
        elif packet is aten.convolution_backward:
            w, g = a["weight"], a["grad_output"]
            self.flops += 2 * g.numel() * w.shape[1] * math.prod(w.shape[2:]) * (int(a["output_mask"][0]) + int(a["output_mask"][1]))
        elif "scaled_dot_product" in name:
            q, k = a["query"], a["key"]
            b, h, length, e = q.shape
            s = k.shape[2]
            pairs = sum(min(i + 1, s) for i in range(length)) if a.get("is_causal") else length * s
            self.flops += (10 if "backward" in name else 4) * b * h * pairs * e
            if not any(w in name for w in ("flash_attention_for_cpu", "efficient_attention", "flash_attention")):
                self.unknown.add(name)
        elif packet in (aten._fft_r2c, aten._fft_c2c):
            x = a["self"]
            n = x.shape[a["dim"][-1]]
            self.flops += (5 if packet is aten._fft_c2c else 2.5) * n * math.log2(n) * x.numel() / n
        elif packet is aten._fft_c2r:
            n = a["last_dim_size"]
            self.flops += 2.5 * n * math.log2(n) * out.numel() / n
        elif func is aten.mul.Tensor and out.is_complex() and torch.is_tensor(a["other"]) and a["other"].dim() > 0:
            self.flops += 6 * out.numel()
        elif packet is aten.cumsum:
            self.flops += out.numel()
        elif any(w in name for w in ("mm", "conv", "attention", "fft", "einsum", "matmul", "linear")):
            self.unknown.add(name)
        return out


def _executed(module, length, embed_dim):
    x = torch.randn(length, 1, embed_dim, requires_grad=True)
    mask = measure.future_mask(length) if getattr(module, "uses_future_mask", False) else None
    with ExecutedFlops() as fwd:
        out, _ = module(x, x, x, attn_mask=mask, need_weights=False)
    with ExecutedFlops() as bwd:
        out.sum().backward()
    assert not (fwd.unknown | bwd.unknown), f"uncounted operators: {fwd.unknown | bwd.unknown}"
    return fwd.flops, bwd.flops


# (kind, T, lags, forced convolution path, d, heads): the layer's own size where it is cheap; cosFormer at a
# ragged T of two segments (1024 tokens each at d = 512, 8 heads) with a zero-padded last chunk.
CASES = [
    ("softmax", 256, 128, None, 512, 8),
    ("bet", 200, 128, None, 512, 8),
    ("cosformer", 1100, 128, None, 512, 8),
    ("cosformer_reference_cumsum", 64, 128, None, 512, 8),
    ("extractor_she", 128, 8, None, 512, 8),  # direct conv1d (the cost rule's choice)
    ("extractor_she", 64, 16, "fft", 64, 4),
    ("extractor_he", 256, 128, None, 512, 8),  # FFT (the cost rule's choice)
    ("extractor_we", 256, 128, None, 512, 8),
    ("extractor_me", 256, 128, None, 512, 8),
    ("extractor_we", 128, 16, "direct", 512, 8),
    ("extractor_me", 100, 16, "direct", 64, 4),
]


@pytest.mark.parametrize("kind,length,lags,impl,dim,heads", CASES, ids=[f"{c[0]}-T{c[1]}-{c[3] or 'auto'}" for c in CASES])
def test_layer_flops_match_the_executed_products(kind, length, lags, impl, dim, heads):
    options = {"extractor_lags": lags}
    module = measure.build(kind, model_options=options, embed_dim=dim, heads=heads)
    if impl is not None:
        module.conv_impl = impl
    elif kind in EXTRACTOR_KINDS:
        path = ATTENTION_REGISTRY[kind].costs.implementation_path
        assert module.conv_impl_for(1, length) == path(length, dim, heads, measure.cost_options(options))
    fwd, bwd = _executed(module, length, dim)
    if kind == "cosformer_reference_cumsum":
        # einsum lowers the k_ v^T outer product (1 FLOP per element in layer_flops) and its backward (the
        # gradients of k_ and v: a product and a sum per element each) to element-wise mul + sum, not counted here
        outer = heads * length * 2 * (dim // heads) ** 2
        fwd, bwd = fwd + outer, bwd + 4 * outer
    expected_fwd, expected_bwd = measure.layer_flops(kind, length, options, conv_impl=impl, embed_dim=dim, heads=heads)
    assert expected_fwd == pytest.approx(fwd, rel=1e-3)
    assert expected_bwd == pytest.approx(bwd, rel=1e-3)


# (kind, forced path, T, lags) where the cost rule (auto) would choose the other path, at d = 64
FORCED = [("extractor_she", "direct", 512, 256), ("extractor_she", "fft", 64, 16),
          ("extractor_we", "direct", 256, 128), ("extractor_we", "fft", 64, 16)]


@pytest.mark.parametrize("kind,impl,length,lags", FORCED)
def test_a_forced_convolution_path_is_the_one_the_costs_count(kind, impl, length, lags):
    # --kind-option extractor_conv_impl=...: what runs (the module's path) is what the costs assume
    costs = ATTENTION_REGISTRY[kind].costs
    assert costs.implementation_path(length, 64, 4, measure.cost_options({"extractor_lags": lags})) != impl
    options = {"extractor_lags": lags, "extractor_conv_impl": impl}
    module = measure.build(kind, model_options=options, embed_dim=64, heads=4)
    assert module.conv_impl_for(1, length) == costs.implementation_path(length, 64, 4, measure.cost_options(options)) == impl
    assert measure.layer_flops(kind, length, options, embed_dim=64, heads=4) == measure.layer_flops(
        kind, length, {"extractor_lags": lags}, conv_impl=impl, embed_dim=64, heads=4)


def test_flop_formulas_in_words_for_every_kind():
    assert set(measure.LAYER_FLOP_FORMULAS) == set(measure.KINDS)
    # the leading terms stated in words
    T, d = 8192, measure.EMBED_DIM
    fwd, bwd = measure.layer_flops("softmax", T)
    assert fwd == 8 * T * d * d + 4 * T * T * d
    assert bwd == 16 * T * d * d + 10 * T * T * d
    assert sum(measure.layer_flops("bet", T)) == pytest.approx(fwd + bwd, rel=1e-3)


# ---------------------------------------------------------------------------
# Growth bounds and the memory guard
# ---------------------------------------------------------------------------


def test_growth_bounds_follow_each_kinds_complexity():
    from fairseq_plugins.modules.extractors.conv import fft_length

    assert measure.growth_bound("cosformer", 4096, 8192)[0] == pytest.approx(2.1)
    assert measure.growth_bound("extractor_she", 4096, 8192)[0] == pytest.approx(2.1)  # direct path
    assert measure.growth_bound("softmax", 4096, 8192)[0] == pytest.approx(4.2)
    assert measure.growth_bound("bet", 8192, 16384)[0] == pytest.approx(4.2)
    n1, n2 = fft_length(4096 + 127), fft_length(8192 + 127)
    assert (n1, n2) == (4320, 8640)
    bound, reason = measure.growth_bound("extractor_he", 4096, 8192)
    assert bound == pytest.approx(1.05 * 2 * math.log(8640) / math.log(4320))
    assert 2.1 < bound < 2.3 and "FFT" in reason
    # never below the linear growth of the projections, even where the FFT length grows less than T
    assert measure.growth_bound("extractor_we", 256, 512)[0] >= 2.1


def test_longest_length_is_default_and_only_the_reference_is_too_big():
    assert 16384 in measure.DEFAULT_LENGTHS
    assert measure.estimate_bytes("cosformer_reference_cumsum", 16384) > measure.MEMORY_LIMIT_BYTES
    assert "skipped" in measure.skip_reason(measure.estimate_bytes("cosformer_reference_cumsum", 16384), "cpu", None)
    for kind in measure.KINDS:
        if kind != "cosformer_reference_cumsum":
            assert measure.estimate_bytes(kind, 16384) < 8e9, kind
    assert measure.skip_reason(1e9, "cuda", 80e9) is None
    assert "free on the device" in measure.skip_reason(70e9, "cuda", 80e9)


def test_peak_worker_reports_the_products():
    info = measure.run_worker({"mode": "peak", "threads": 1, "device": "cpu", "shapes": [[32, 16, 8]], "min_s": 0})
    (prod,) = info["products"]
    assert prod["shape"] == [32, 16, 8] and prod["runs"] >= 5
    assert info["peak_gflops"] == prod["gflops"] > 0


# ---------------------------------------------------------------------------
# Plot and report from a tiny fake result set
# ---------------------------------------------------------------------------

LENGTHS = [4096, 8192, 16384]


def _fake_results(fields=("peak", "peak_fixed")):
    train = {}
    for i, kind in enumerate(measure.KINDS):
        for length in LENGTHS:
            if kind == "cosformer_reference_cumsum" and length == 16384:
                train[(kind, length)] = {"error": "skipped: needs ~19.33 GB (> 16.00 GB limit)"}
                continue
            growth = 2.5 if kind == "extractor_he" else 2.0  # HE above its FFT bound of 2.27, the rest within theirs
            cell = {"times": [0.01 * (i + 1) * growth ** math.log2(length / 4096)] * 3}
            for field in fields:
                cell[field] = (i + 1) * 1e6 * length / 4096
            train[(kind, length)] = cell
    decode = {k: {"128": [1e-3, 1e-3], "4096": [1.1e-3] * 2} for k in measure.DECODE_KINDS}
    return train, decode


def _args(kind_options=(("extractor_lags", 128),), **extra):
    return argparse.Namespace(kind_options=list(kind_options), threads=2, repeats=5, decode_steps=50, quick=False, **extra)


SELF_CHECKS = {name: 1e-15 for name in measure.BASELINES}


ENV = {"torch": torch.__version__, "fairseq": "x", "python": "3", "git": "abc", "cores": 2, "cpu": "test cpu",
       "nice": 0, "autogroup": None, "load": "0 0 0", "load_end": "0 0 0"}
PEAK = {"products": [{"shape": [4096, 512, 512], "best_s": 0.05, "runs": 5, "gflops": 80.0}], "peak_gflops": 80.0}


def test_write_plot(tmp_path):
    train, _ = _fake_results()
    train[("softmax", 16384)] = {"error": "timing failed: killed"}  # a missing point
    path = tmp_path / "bench_speed.png"
    speed_report.write_plot(str(path), LENGTHS, list(measure.KINDS), train, "peak_fixed", {"name": "cpu", "type": "cpu"}, "fixed threshold")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert speed_report.plot_path_for("docs/records/benchmarks.md") == "docs/records/benchmarks_speed.png"


def test_render_cpu_report():
    train, decode = _fake_results()
    report = speed_report.render("python benchmarks/attention_speed.py", ENV, _args(), LENGTHS, list(measure.KINDS), [128, 4096],
                          train, {}, decode, ["cosformer_reference_cumsum at T=16384: skipped"], 60.0, SELF_CHECKS,
                          device={"name": "cpu", "type": "cpu"}, peak=PEAK, plot_name="benchmarks_speed.png")
    assert "![forward+backward time and peak memory vs T, log-log](benchmarks_speed.png)" in report
    assert "Peak: **80.0 GFLOP/s**" in report
    # softmax at T = 4096: FLOPs / 10 ms, as GFLOP/s and share of the peak
    rate = sum(measure.layer_flops("softmax", 4096)) / 0.01 / 1e9
    assert f"| 4096 | {rate:.1f} ({100 * rate / 80:.0f} %) |" in report
    for kind in measure.KINDS:
        assert f"- `{kind}`: " in report
    assert "Default malloc:" in report and "Fixed mmap threshold" in report
    assert "| extractor_he time(8192) / time(4096) <= 2.27 (FFT path: O(n log n), n = 4320 -> 8640) | 2.50 | **NO** |" in report
    assert "| extractor_we time(8192) / time(4096) <= 2.27 (FFT path: O(n log n), n = 4320 -> 8640) | 2.00 | yes |" in report
    assert "| cosformer time(16384) / time(8192) <= 2.10 (chunked form: O(T (C + d_h) d)) | 2.00 | yes |" in report
    assert "| softmax time(8192) / time(4096) <= 4.20 (O(T^2 d) attention core) | 2.00 | yes |" in report
    assert "cosformer_reference_cumsum time(" not in report  # a baseline, not a target
    assert "skipped" in report  # the reference at T = 16384


def test_render_cuda_report():
    train, decode = _fake_results(fields=("peak",))
    device = {"name": "cuda (NVIDIA Test GPU, compute capability 9.0, CUDA 12.4, 80.00 GB)", "type": "cuda"}
    report = speed_report.render("python benchmarks/attention_speed.py --device cuda", ENV, _args(), LENGTHS, list(measure.KINDS),
                          [128, 4096], train, {}, decode, [], 60.0, SELF_CHECKS, device=device, peak=PEAK, plot_name=None)
    assert report.startswith("# Attention speed and memory (CUDA)")
    assert "NVIDIA Test GPU" in report and "torch.cuda.synchronize()" in report
    assert "max_memory_allocated" in report and "Default malloc" not in report and "default malloc" not in report
    assert "![" not in report


def _cpu_report(train, decode, env=ENV, args=None, sweep_results=None):
    return speed_report.render("python benchmarks/attention_speed.py", env, args or _args(), LENGTHS, list(measure.KINDS), [128, 4096],
                        train, sweep_results or {}, decode, [], 60.0, SELF_CHECKS, device={"name": "cpu", "type": "cpu"},
                        peak=PEAK, plot_name=None)


def test_report_states_only_what_this_run_measured_or_computed():
    """No fixed string that reads as a measurement: the memory comparison follows the run's own numbers, sizes
    are computed from the lengths and the code's constants, and the numbers of other runs are gone."""
    train, decode = _fake_results()
    report = _cpu_report(train, decode)
    # the fake cosFormer peaks are above softmax's at every T
    assert "cosFormer needs more memory than softmax at T = 4096, 8192, 16384 (fixed threshold)" in report
    assert "4 T^2 bytes: 1.07 GB at T = 16384" in report  # the mask at the longest T of this report
    assert "(16 segments at T = 16384 in this report's layer)" in report  # 2 MB segments of 1,024 tokens
    assert "taken here by extractor_he, extractor_we, extractor_me" in report and "(n = 4320)" in report
    for other_runs in ("173-222", "172-225", "135 MB", "about 30 MB", "130 ms", "145 ms", "180 ms", "20-40 %",
                       "3-8 %", "268 MB", "+-30 MB", "Below T = 4096"):
        assert other_runs not in report, other_runs
    # where cosFormer needs less memory, the sentence goes
    for length in LENGTHS:
        train[("cosformer", length)]["peak_fixed"] = train[("softmax", length)]["peak_fixed"] / 2
    assert "cosFormer needs more memory than softmax" not in _cpu_report(train, decode)


def test_report_marks_a_run_with_uncommitted_changes():
    train, decode = _fake_results()
    assert "uncommitted" not in _cpu_report(train, decode)
    dirty = dict(ENV, git="abc123def456 (with uncommitted changes)")
    assert "**measured with uncommitted changes**" in _cpu_report(train, decode, env=dirty)


# ---------------------------------------------------------------------------
# What the kinds declare: baselines, model options, sweeps, targets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(measure.BASELINES))
def test_every_baseline_computes_its_kinds_function(name):
    kind, baseline = measure.BASELINES[name]
    assert name in measure.KINDS and measure.KINDS.index(name) > measure.KINDS.index(kind)  # listed after its kind
    assert name not in measure.DECODE_KINDS
    assert measure.check_baseline(name) < 1e-8
    assert name in measure.LAYER_FLOP_FORMULAS and baseline.description


def test_kind_option_refuses_an_unknown_option_listing_the_registered_ones(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--kind-option", "no_such_option=1"])
    err = capsys.readouterr().err
    assert "argument --kind-option: unknown option 'no_such_option'" in err and "extractor_lags" in err


@pytest.mark.parametrize("value,message", [
    ("extractor_lags=many", "argument --kind-option: extractor_lags is an optional int, got 'many'"),
    ("extractor_lags", "argument --kind-option: expected NAME=VALUE, got 'extractor_lags'"),
    ("extractor_lags=0", "--kind-option: --extractor-lags must be >= 1, got 0"),  # the kind's own check
])
def test_kind_option_values_are_typed_and_checked_by_the_kind(capsys, value, message):
    with pytest.raises(SystemExit):
        bench.main(["--kind-option", value, "--lengths", "64"])
    assert message in capsys.readouterr().err


def test_kind_options_reach_the_layers_the_counts_and_the_report():
    from fairseq_plugins.modules.options import parse_option

    assert parse_option("extractor_lags=64") == ("extractor_lags", 64)
    assert parse_option("bet_no_diag_free=yes") == ("bet_no_diag_free", True)
    assert measure.MODEL_OPTIONS == {"extractor_lags": 128}  # declared by the Extractors: the paper's window
    assert measure.build("extractor_me").lags == 128
    assert measure.build("extractor_me", model_options={"extractor_lags": 16}).lags == 16
    assert measure.layer_flops("extractor_she", 1024, {"extractor_lags": 16}) != measure.layer_flops("extractor_she", 1024)
    assert measure.estimate_bytes("extractor_she", 1024, {"extractor_lags": 16}) < measure.estimate_bytes("extractor_she", 1024)
    train, decode = _fake_results()
    report = _cpu_report(train, decode, args=_args(kind_options=[("extractor_lags", 64)]))
    assert "extractors: l = 64 lags" in report and "The extractors keep the last l = 64 inputs" in report
    assert "extractors: l = 128 lags" in _cpu_report(train, decode)


def test_sweeps_are_declared_by_the_kinds_and_overridable():
    assert [(k, s, sweep.values) for k, s, sweep in measure.declared_sweeps(measure.KINDS)] == [("cosformer", "chunk_size", (32, 64, 128))]
    assert measure.parse_sweep("cosformer:chunk_size=16,32") == ("cosformer", "chunk_size", (16, 32))
    with pytest.raises(ValueError, match="cosformer:chunk is not a setting a registered kind declares; declared: cosformer:chunk_size"):
        measure.parse_sweep("cosformer:chunk=16")
    with pytest.raises(ValueError, match="takes int values"):
        measure.parse_sweep("cosformer:chunk_size=big")
    assert measure.build("cosformer", {"chunk_size": 32}).chunk_size == 32
    with pytest.raises(ValueError, match="no implementation setting 'no_such_setting'"):
        measure.build("cosformer", {"no_such_setting": 1})
    train, decode = _fake_results()
    results = {("cosformer", "chunk_size"): {32: {"times": [0.2]}, 64: {"times": [0.1]}}}
    report = _cpu_report(train, decode, sweep_results=results)
    assert "implementation setting `chunk_size` (T = 16384" in report and "| 32 | 200.0 ms | 2.00 |" in report


def test_declarations_name_what_exists():
    """Every declared sweep sets an attribute of its kind's module, every target compares with something measured,
    every declared model option is one of a registered kind."""
    from fairseq_plugins.modules.options import parse_option

    for kind, setting, sweep in measure.declared_sweeps(measure.KINDS):
        assert getattr(measure.build(kind), setting) == sweep.default, (kind, setting)
    for kind in measure.DECODE_KINDS:
        for target in measure.speed_benchmark(kind).targets:
            assert target.other in measure.KINDS, (kind, target)
    for option, value in measure.MODEL_OPTIONS.items():
        assert parse_option(f"{option}={value}") == (option, value)


@pytest.mark.parametrize("seconds, text", [(2.345, "2.35 s"), (0.2625, "262.5 ms"), (0.01234, "12.3 ms"), (0.001834, "1.83 ms"),
                                           (0.000338, "338 us"), (0.0000456, "45.6 us"), (None, "-")])
def test_times_keep_three_significant_digits_for_the_comparison_tool(seconds, text):
    from benchmarks.compare_speed_reports import seconds as read_back

    assert common.fmt_time(seconds) == text
    if seconds is not None:
        assert read_back(text) == pytest.approx(seconds, rel=0.005)


@pytest.mark.parametrize("argv, message", [
    (["--lengths", "256,x"], "--lengths: expected comma-separated whole numbers of at least 1, got '256,x'"),
    (["--lengths", ","], "--lengths: expected comma-separated whole numbers of at least 1, got ','"),
    (["--decode-prefixes", "128,0"], "--decode-prefixes: expected comma-separated whole numbers of at least 1 (or an empty "
     "string: none), got '128,0'"),
    (["--decode-steps", "0"], "--decode-steps: expected at least 1, got 0"),
    (["--repeats", "1"], "--repeats: expected at least 2, got 1"),
    (["--threads", "0"], "--threads: expected at least 1, got 0"),
    (["--kinds", "softmax", "--sweep", "cosformer:chunk_size=64"], "--sweep: cosformer is not measured (--kinds softmax)"),
    (["--kinds", "softmax", "--kind-option", "extractor_lags=64"],
     "--kind-option extractor_lags: an option of no kind measured (--kinds softmax)"),
], ids=["lengths-not-numbers", "lengths-empty", "prefix-zero", "decode-steps", "repeats", "threads", "sweep-unmeasured",
        "kind-option-unread"])
def test_bad_settings_are_usage_errors_before_any_timing(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main(["--quick", *argv])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_whole_numbers_of_a_comma_separated_option():
    parser = argparse.ArgumentParser()
    assert common.whole_numbers(parser, "--x", "256, 1024,") == [256, 1024]
    assert common.whole_numbers(parser, "--x", "", empty_ok=True) == []
    assert common.whole_numbers(parser, "--x", "0,3", least=0) == [0, 3]
