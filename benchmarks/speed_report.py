"""The reporting half of ``attention_speed.py``: the markdown report, its plot and the targets, from what
``speed_measure.py`` measured."""
import os
import statistics
import sys

if __package__ in (None, ""):  # run by path, not as python -m: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt_time  # noqa: E402
from benchmarks.plotting import new_figure, save_png  # noqa: E402
from benchmarks.provenance import is_dirty  # noqa: E402
from benchmarks.speed_measure import (BASELINES, CELL_BUDGET_S, DECODE_KINDS, DEFAULT_LENGTHS, EMBED_DIM,  # noqa: E402
                                      GROWTH_MARGIN, HEADS, KINDS, LAYER_FLOP_FORMULAS, cost_options, growth_bound,
                                      kind_descriptions, kind_options, layer_flops, memory_fields, model_config,
                                      of_kind, speed_benchmark)
from fairseq_plugins.modules import ATTENTION_REGISTRY  # noqa: E402
from fairseq_plugins.modules.costs import BenchmarkRun, format_bytes as fmt_mem  # noqa: E402
from fairseq_plugins.modules.options import AttentionContext  # noqa: E402

def fmt_ratio(a, b):
    """a / b as 'N.Nx' (None if either is missing)."""
    if a is None or b is None or b <= 0:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 1 else f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def plot_path_for(output):
    """The plot written next to the markdown report: X.md -> X_speed.png."""
    return os.path.splitext(output)[0] + "_speed.png"


def median_time(cell):
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
        times = [(t, median_time(train.get((kind, t)))) for t in lengths]
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


def _header_section(report):
    """The title, the command, the machine, the kinds and the plot."""
    command, env, args, kinds, elapsed, device = report.values("command", "env", "args", "kinds", "elapsed", "device")
    plot_name, on_cuda, fields, run, add = report.values("plot_name", "on_cuda", "fields", "run", "add")
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


def _method_section(report):
    """How each quantity was measured."""
    args, lengths, kinds, self_checks, on_cuda = report.values("args", "lengths", "kinds", "self_checks", "on_cuda")
    fields, baselines, add = report.values("fields", "baselines", "add")
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


def _time_section(report):
    """Forward + backward time: ratios to the reference kind, and of each baseline to its kind."""
    lengths, kinds, train, reference, others = report.values("lengths", "kinds", "train", "reference", "others")
    baselines, add, row, cell_text = report.values("baselines", "add", "row", "cell_text")
    compared = [k for k in baselines if of_kind(k) in kinds]
    add("## Forward + backward time (median)")
    add("")
    header = ["T"] + list(kinds) + [f"{reference} / {k}" for k in others] + [f"{k} / {of_kind(k)}" for k in compared]
    row(header)
    row(["---:"] * len(header))
    for length in lengths:
        cells = [str(length)] + [cell_text(k, length, median_time(train.get((k, length))), fmt_time) for k in kinds]
        cells += [fmt_ratio(median_time(train.get((reference, length))), median_time(train.get((k, length)))) for k in others]
        cells += [fmt_ratio(median_time(train.get((k, length))), median_time(train.get((of_kind(k), length)))) for k in compared]
        row(cells)
    add("")
    add("Ratios are speed-ups (how many times faster the second kind is). Timed runs per cell (median / min):")
    add("")
    for length in lengths:
        parts = []
        for k in kinds:
            cell = train.get((k, length), {})
            if cell.get("times"):
                parts.append(f"{k} {len(cell['times'])} ({fmt_time(median_time(cell))} / {fmt_time(min(cell['times']))})")
        if parts:
            add(f"- T={length}: " + "; ".join(parts))
    add("")


def _flops_section(report):
    """Achieved FLOP rate against the measured matrix-multiply peak, and the counts behind it."""
    lengths, kinds, train, device, peak = report.values("lengths", "kinds", "train", "device", "peak")
    model_options, run, add, row, cell_text = report.values("model_options", "run", "add", "row", "cell_text")
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
            rate = gflops_per_s(k, length, median_time(train.get((k, length))), model_options)
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


def _memory_section(report):
    """Peak memory: one table per memory measurement, a column per kind."""
    lengths, kinds, train, on_cuda, fields, run = report.values("lengths", "kinds", "train", "on_cuda", "fields", "run")
    reference, others, add, row, cell_text = report.values("reference", "others", "add", "row", "cell_text")
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


def _decoding_section(report):
    """Incremental decoding: cost per new token."""
    prefixes, decode, run, reference, add, row = report.values("prefixes", "decode", "run", "reference", "add", "row")
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


def _growth_section(report):
    """Growth of the time per doubling of T, against each kind's complexity."""
    lengths, kinds, train, model_options, run = report.values("lengths", "kinds", "train", "model_options", "run")
    add, row = report.values("add", "row")
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
                a, b = median_time(train.get((k, t1))), median_time(train.get((k, t2)))
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


def _sweeps_section(report):
    """The kinds' implementation settings, timed at the largest T."""
    lengths, sweep_results, add, row = report.values("lengths", "sweep_results", "add", "row")
    for (kind, setting), results in sweep_results.items():
        length, default = max(lengths), speed_benchmark(kind).sweeps[setting].default
        add(f"## `{kind}`: implementation setting `{setting}` (T = {length}, forward + backward, median, one process "
            "round-robin)")
        add("")
        row([f"`{setting}`", "time", f"time / time at {setting} = {default}"])
        row(["---:"] * 3)
        ref = median_time(results.get(default, {}))
        for value, res in results.items():
            t = median_time(res)
            row([str(value), fmt_time(t) if t else res.get("error", "failed"), f"{t / ref:.2f}" if t and ref else "-"])
        add("")


def _targets_section(report):
    """The targets, how to read the numbers, the run's notes and the kinds' implementation notes."""
    env, lengths, kinds, train, decode, notes = report.values("env", "lengths", "kinds", "train", "decode", "notes")
    on_cuda, fields, model_options, run = report.values("on_cuda", "fields", "model_options", "run")
    baselines, add, row = report.values("baselines", "add", "row")
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


class _ReportContext:
    """What every section of the report reads: the run's inputs and results, what follows from them, and the
    lines written so far (``add`` one, ``row`` a table row, ``cell_text`` a measured cell or why it is missing)."""

    def __init__(self, **values):
        self.__dict__.update(values)
        self.lines = []
        self.add = self.lines.append

    def values(self, *names):
        """The named values, in order (what a section reads)."""
        return tuple(getattr(self, name) for name in names)

    def row(self, cells):
        self.add("| " + " | ".join(cells) + " |")

    def cell_text(self, kind, length, value, fmt):
        cell = self.train.get((kind, length), {})
        if value is not None:
            return fmt(value)
        return "skipped" if "skipped" in cell.get("error", "") else "failed"


SECTIONS = (_header_section, _method_section, _time_section, _flops_section, _memory_section, _decoding_section,
            _growth_section, _sweeps_section, _targets_section)


def render(command, env, args, lengths, kinds, prefixes, train, sweep_results, decode, notes, elapsed, self_checks,
           device=None, peak=None, plot_name=None):
    """The markdown report, section by section. ``sweep_results``: (kind, setting) -> {value: cell};
    ``self_checks``: baseline -> the largest difference from its kind in the check (``check_baseline``)."""
    device = device or {"name": "cpu", "type": "cpu"}
    model_options = dict(getattr(args, "kind_options", None) or ())
    reference = ratio_reference(kinds)
    report = _ReportContext(
        command=command, env=env, args=args, lengths=lengths, kinds=kinds, prefixes=prefixes, train=train,
        sweep_results=sweep_results, decode=decode, notes=notes, elapsed=elapsed, self_checks=self_checks,
        device=device, peak=peak or {}, plot_name=plot_name, on_cuda=device["type"] == "cuda",
        fields=memory_fields(device["type"], getattr(args, "quick", False)), model_options=model_options,
        run=benchmark_run(kinds, lengths, model_options), reference=reference,
        others=[k for k in kinds if k != reference] if reference else [],
        baselines=[k for k in kinds if k in BASELINES])
    for section in SECTIONS:
        section(report)
    return "\n".join(report.lines) + "\n"


def targets(train, decode, lengths=DEFAULT_LENGTHS, kinds=KINDS, model_options=None, fields=None):
    """(target, measured, met: True / False / None if not measured) rows."""
    fields = fields if fields is not None else memory_fields("cpu")
    out = []

    def med(kind, length):
        return median_time(train.get((kind, length), {}))

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

