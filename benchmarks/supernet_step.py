#!/usr/bin/env python
"""What a training step of the supernet costs against the same sub-network built standalone.

For the smallest and the largest architecture of a search space, one training step (forward, backward
and Adam's update) of

* the supernet (``mixed_supertransformer``) with that architecture active, and
* the standalone ``mixed_transformer`` model of that architecture (what ``export`` writes),

on the same random batch: the median time of the timed steps after warm-up steps, and the peak memory
of the steps above the memory after building model, optimizer and batch (CPU: the kernel's peak-RSS
mark, reset before the steps, with glibc's mmap threshold held at its initial value so that RSS follows
the live allocations; CUDA: ``torch.cuda.max_memory_allocated``). The times of one size come from one
process that alternates the two models' steps (each takes the first turn every other step), so that a
shared machine's load, which drifts over minutes, reaches both alike; every memory cell runs in a fresh
process.
The supernet's step also computes the gradients of its containers (full-size tensors that are zero
outside the sub-network's slices) and Adam updates every container it has state for: its cost beyond
the sub-network's is what this measures.

    python benchmarks/supernet_step.py                                  # multi30k_cpu space, prints a table
    python benchmarks/supernet_step.py --output docs/records/search.md          # ... and writes its section there
    python benchmarks/supernet_step.py --space search_spaces/wmt14_en_de.yaml --device cuda --json out.json
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Dict

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from benchmarks.common import FIXED_MALLOC_ENV, peak_rss_bytes, reset_peak_rss, rss_bytes  # noqa: E402
from benchmarks.provenance import REPO, available_cores, cpu_model, load_average, require_committed  # noqa: E402

REPORT_BEGIN = "<!-- supernet-step:begin (written by benchmarks/supernet_step.py; edit the script, not this section) -->"
REPORT_END = "<!-- supernet-step:end -->"

SIZES = ("smallest", "largest")
MODELS = ("standalone", "supernet")


def build(spec: Dict, model_name: str):
    """(model ``model_name`` of the cell's size, the dictionary), on the cell's device."""
    import argparse as ap

    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.search.supernet import MixedSuperTransformerModel
    from fairseq_plugins.search.space import SearchSpace

    dictionary = Dictionary()
    for i in range(spec["vocab"]):
        dictionary.add_symbol(f"w{i}")
    task = TranslationTask(TranslationConfig(), dictionary, dictionary)
    args = ap.Namespace(arch="mixed_supertransformer", search_space=spec["space"], share_all_embeddings=True, dropout=0.1,
                        max_source_positions=spec["length"] + 2, max_target_positions=spec["length"] + 2, seed=1)
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY["mixed_supertransformer"](args)
    torch.manual_seed(0)
    supernet = MixedSuperTransformerModel.build_model(args, task)
    space = SearchSpace.from_file(spec["space"])
    architecture = space.extreme(largest=spec["size"] == "largest")
    if model_name == "supernet":
        supernet.set_active(architecture)
        model = supernet
    else:
        model = supernet.subnetwork(architecture)
        del supernet
    return model.to(spec["device"]).train(), dictionary


def batch(spec: Dict, dictionary):
    gen = torch.Generator().manual_seed(1)
    sentences = max(1, spec["tokens"] // spec["length"])
    src = torch.randint(dictionary.nspecial, len(dictionary), (sentences, spec["length"]), generator=gen)
    tgt = torch.randint(dictionary.nspecial, len(dictionary), (sentences, spec["length"]), generator=gen)
    prev = torch.cat([torch.full((sentences, 1), dictionary.eos()), tgt[:, :-1]], 1)
    lengths = torch.full((sentences,), spec["length"])
    return [t.to(spec["device"]) for t in (src, lengths, prev, tgt)]


def step(model, optimizer, data):
    src, lengths, prev, tgt = data
    logits, _ = model(src, lengths, prev)
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(spec: Dict) -> Dict:
    """Both models of the cell's size in this process, their steps alternated: model -> {median_s, times_s,
    parameters}."""
    models, data = {}, None
    for name in MODELS:
        model, dictionary = build(spec, name)
        models[name] = (model, torch.optim.Adam(model.parameters(), lr=1e-4))
        if data is None:  # (both models have the same dictionary)
            data = batch(spec, dictionary)
    times = {name: [] for name in MODELS}
    for index in range(spec["warmup"] + spec["steps"]):
        for name in (MODELS if index % 2 == 0 else MODELS[::-1]):
            start = time.perf_counter()
            step(*models[name], data)
            synchronize(spec["device"])
            if index >= spec["warmup"]:
                times[name].append(time.perf_counter() - start)
    return {name: {"median_s": statistics.median(times[name]), "times_s": times[name],
                   "parameters": sum(p.numel() for p in models[name][0].parameters())} for name in MODELS}


def worker(spec: Dict) -> Dict:
    torch.set_num_threads(spec["threads"])
    if spec["measure"] == "time":
        return timed_steps(spec)
    model, dictionary = build(spec, spec["model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = batch(spec, dictionary)
    for _ in range(spec["warmup"]):  # (also creates Adam's state: memory the steps keep, not their peak)
        step(model, optimizer, data)
    synchronize(spec["device"])
    gc.collect()
    if torch.device(spec["device"]).type == "cuda":
        torch.cuda.reset_peak_memory_stats(spec["device"])
        baseline = torch.cuda.memory_allocated(spec["device"])
        step(model, optimizer, data)
        synchronize(spec["device"])
        return {"peak_bytes": torch.cuda.max_memory_allocated(spec["device"]) - baseline}
    reset = reset_peak_rss()
    baseline = peak_rss_bytes() if reset else rss_bytes()
    step(model, optimizer, data)
    return {"peak_bytes": peak_rss_bytes() - baseline, "peak_reset": reset}


def run_cell(spec: Dict) -> Dict:
    """``worker(spec)`` in a fresh interpreter (memory: with the fixed mmap threshold)."""
    import subprocess

    env = dict(os.environ, **(FIXED_MALLOC_ENV if spec["measure"] == "memory" else {}))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"cell {spec['size']}/{spec.get('model', 'both models')} ({spec['measure']}) failed:\n"
                           f"{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def shown_arguments(argv):
    """The command line as the report shows it: ``--json FILE`` (a copy of the results, not a setting of the
    measurement) left out, so that the docs name no path of the machine that ran it."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--json":
            skip = True
        elif not arg.startswith("--json="):
            shown.append(arg)
    return shown


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default="search_spaces/multi30k_cpu.yaml", help="search space (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (default: %(default)s)")
    parser.add_argument("--length", type=int, default=32, help="source and target length (default: %(default)s)")
    parser.add_argument("--vocab", type=int, default=10000, help="joined dictionary size (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per cell (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (default: the cores)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: %(default)s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--output", help="also write the table, command, revision and machine as a section of this "
                        "markdown file (e.g. docs/records/search.md; the section between its markers is replaced)")
    parser.add_argument("--allow-dirty", action="store_true", help="--output: measure even with uncommitted changes (recorded)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if not os.path.isfile(args.space):
        parser.error(f"--space {args.space}: no such file")
    import fairseq_plugins  # noqa: F401  (the kinds a space names)
    from fairseq_plugins.modules import AttentionConfigError
    from fairseq_plugins.search.space import SearchSpace

    try:
        space = SearchSpace.from_file(args.space)
    except AttentionConfigError as error:
        parser.error(str(error))
    if space.language_model or not space.shared_embed_dim:
        parser.error(f"--space {args.space}: expected a translation space with shared_embed_dim: true (the benchmark "
                     "builds the translation supernet with --share-all-embeddings)")
    for name in ("tokens", "length", "vocab", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected at least 1")
    revision = require_committed(args.allow_dirty, "benchmarks/supernet_step.py") if args.output else None
    load_before = load_average()
    results = {}
    for size in SIZES:
        spec = dict(space=os.path.abspath(args.space), tokens=args.tokens, length=args.length, vocab=args.vocab,
                    steps=args.steps, warmup=args.warmup, threads=args.threads, device=args.device, size=size)
        timed = run_cell(dict(spec, measure="time"))
        for model in MODELS:
            results[f"{size}/{model}"] = {**timed[model], **run_cell(dict(spec, model=model, measure="memory"))}
            print(f"[supernet-step] {size} {model}: {results[f'{size}/{model}']['median_s'] * 1000:.1f} ms, "
                  f"peak {results[f'{size}/{model}']['peak_bytes'] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    lines = [f"| sub-network | standalone step | supernet step | time ratio | standalone peak | supernet peak | memory ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size in ("smallest", "largest"):
        alone, inside = results[f"{size}/standalone"], results[f"{size}/supernet"]
        lines.append(f"| {size} ({alone['parameters'] / 1e6:.2f}M of {inside['parameters'] / 1e6:.2f}M parameters) | "
                     f"{alone['median_s'] * 1000:.1f} ms | {inside['median_s'] * 1000:.1f} ms | "
                     f"{inside['median_s'] / alone['median_s']:.2f} | {alone['peak_bytes'] / 2**20:.1f} MiB | "
                     f"{inside['peak_bytes'] / 2**20:.1f} MiB | {inside['peak_bytes'] / max(alone['peak_bytes'], 1):.2f} |")
    print("\n".join(lines))
    if args.output:
        from benchmarks.quality import write_report

        import shlex

        command = "python benchmarks/supernet_step.py" + "".join(" " + shlex.quote(a) for a in shown_arguments(
            argv if argv is not None else sys.argv[1:]))
        space = os.path.relpath(os.path.abspath(args.space), REPO)
        section = [REPORT_BEGIN, "", "## Measured: a supernet training step against the standalone sub-network", "",
                   f"`{command}` at git {revision}, {available_cores()} cores ({cpu_model()}), {args.threads} threads, "
                   f"device {args.device}, load average {load_before} at the start and {load_average()} at the end. "
                   f"Space `{space}`; one training step (forward, backward, Adam) on a batch of {args.tokens // args.length} "
                   f"sentence pairs of {args.length} tokens (dictionary of {args.vocab}), the median of {args.steps} timed "
                   f"steps after {args.warmup}, the two models' steps alternated in one process; peak memory: the kernel's peak-RSS mark above the memory after building "
                   "the model, optimizer and batch (glibc's mmap threshold fixed), in a fresh process per model. "
                   "The supernet's step runs the sub-network on slices of its containers, so its gradients are "
                   "container-sized (zero outside the slices) and Adam updates every container the step touched: that, "
                   "and building the sub-network's module (cached), is its cost beyond the standalone model's.", "",
                   *lines, "", REPORT_END, ""]
        write_report(args.output, "\n".join(section), REPORT_BEGIN, REPORT_END)
    if args.json:
        from fairseq_plugins.files import write_json

        write_json(args.json, {"settings": vars(args), "results": results, "table": lines})
    return 0


if __name__ == "__main__":
    sys.exit(main())
