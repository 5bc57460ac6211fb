"""Language models built for decoding measurements, and the cost of one more sampled token after a long prefix.

The models are built the way fairseq-train builds them (task, ``--arch``, flags) with fresh weights: the cost
of a decoder step does not depend on the weights' values, so no trained checkpoint is needed. The cost per
token at a prefix of P tokens is ``fairseq_plugins.search.latency``'s ``next_token`` workload (one decoder step
on the prefix's incremental state, the log-probabilities and fairseq's sampling draw) timed with its protocol:
processes pinned to one core with one thread, one after another, each interleaving the layout in ABBA
blocks with the reference layout, reported as milliseconds per token and relative to the reference (the
median over the processes of each one's median round ratio, which a machine's changing load leaves nearly
as it is). Beside it, the counted FLOPs of that token
(``fairseq_plugins.complexity``: the forward FLOPs over P + 1 tokens minus those over P, which is what a
cached decoder step computes: the new token's projections, FFNs and output layer, and its attention over
what each kind keeps).
"""
import argparse
import copy
import os
from dataclasses import replace
from typing import Sequence, Tuple

import torch

from benchmarks.provenance import REPO
from fairseq_plugins.cli.model_costs import model_cost
from fairseq_plugins.search.latency import LatencySettings, measure

# a step of the 8-layer d = 64 models takes about a millisecond: many runs per block are cheap
NEXT_TOKEN_SETTINGS = LatencySettings(threads=1, warmup=5, repeats=20, rounds=8)


def lm_args(data_bin: str, arch: str, flags: Sequence[str], positions: int, seed: int = 1) -> argparse.Namespace:
    """The options fairseq-train resolves for a language model of ``positions`` positions (``flags`` that name
    a file relative to the repository root, as the recipes run from there, are read from there)."""
    from fairseq import options, utils

    user_dir = os.path.join(REPO, "fairseq_plugins")
    utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    flags = [os.path.join(REPO, flag) if not os.path.isabs(flag) and os.path.isfile(os.path.join(REPO, flag)) else flag
             for flag in flags]
    return options.parse_args_and_arch(options.get_training_parser(), [
        data_bin, "--task", "language_modeling", "--user-dir", user_dir, "--arch", arch,
        "--tokens-per-sample", str(positions), "--max-target-positions", str(positions), "--seed", str(seed), *flags])


def build_lm(data_bin: str, arch: str, flags: Sequence[str], positions: int, seed: int = 1):
    """(task, model): a freshly initialised LM built the way fairseq-train builds it (task, arch, flags)."""
    from fairseq import tasks

    args = lm_args(data_bin, arch, flags, positions, seed)
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    return task, task.build_model(args).eval()


def next_token_flops(args: argparse.Namespace, prefix: int, vocab: int) -> int:
    """Counted forward FLOPs of the token after ``prefix`` tokens: the forward pass over prefix + 1 tokens
    minus the one over prefix tokens (every kind's registered counts, the output layer over ``vocab``)."""
    def forward(tokens: int) -> int:  # (model_cost fills the model's defaults into the options it is given)
        return model_cost(copy.deepcopy(args), target_length=tokens).total_flops(vocab)

    return forward(prefix + 1) - forward(prefix)


def next_token_cost(data_bin: str, layout: Tuple[str, Sequence[str]], reference: Tuple[str, Sequence[str]],
                    positions: int, prefix: int = 0, settings: LatencySettings = NEXT_TOKEN_SETTINGS) -> dict:
    """The token after ``prefix`` tokens (default: the longest prefix the model's ``positions`` allow,
    positions - 1) of the language model ``layout`` ((``--arch``, flags)), timed beside ``reference``'s:
    milliseconds per token, relative to the reference, the ratios' spread; its counted FLOPs and parameters.
    A prefix past ``positions`` builds the models with prefix + 1 positions (fresh weights either way)."""
    from fairseq import tasks

    prefix = prefix or positions - 1
    positions = max(positions, prefix + 1)
    (arch, flags), (reference_arch, reference_flags) = layout, reference
    args = lm_args(data_bin, arch, flags, positions)
    dictionary = tasks.setup_task(args).target_dictionary
    record = measure(lambda: build_lm(data_bin, arch, flags, positions)[1],
                     lambda: build_lm(data_bin, reference_arch, reference_flags, positions)[1],
                     dictionary, replace(settings, decoder_steps=prefix), work=("next_token",))
    step = record["next_token"]
    return {"arch": arch, "flags": list(flags), "reference": [reference_arch, *reference_flags], "prefix": prefix,
            "positions": positions, "ms_per_token": step["latency_ms"], "reference_ms_per_token": step["reference_ms"],
            "relative": step["relative_latency"], "ratio_range": step["ratio_range"], "ratios": step["ratios"],
            "process_range": step["process_range"],
            "flops_per_token": next_token_flops(args, prefix, len(dictionary)),
            "params": model_cost(copy.deepcopy(args), target_length=prefix + 1).total_parameters(len(dictionary)),
            "settings": {k: record[k] for k in ("threads", "warmup", "repeats", "rounds", "processes", "trim", "cores")}}
