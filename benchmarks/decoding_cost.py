"""The decoding cost of a layout, timed beside a reference layout with the search's latency protocol
(``fairseq_plugins.search.latency``: processes pinned to one core with one thread, one after another, each
interleaving the layout in ABBA blocks with the reference, reported as milliseconds and relative to the
reference: the median over the processes of each one's median round ratio, which a machine's changing load
leaves nearly as it is, docs/records/latency_agreement.md).

Translation: beam search of one source sentence for a fixed number of decoder steps
(``beam_search_costs``; the search's own workload, benchmarks/search_multi30k.py, so that a hand-written row
and a found architecture are timed alike), the models built from the fairseq-train arguments their recipe
gives them.

Language models: the cost of one more sampled token after a prefix of P tokens (``next_token_cost``): the
protocol's ``next_token`` workload (one decoder step on the prefix's incremental state, the log-probabilities
and fairseq's sampling draw), beside the counted FLOPs of that token (``fairseq_plugins.complexity``: the
forward FLOPs over P + 1 tokens minus those over P, which is what a cached decoder step computes: the new
token's projections, FFNs and output layer, and its attention over what each kind keeps).

Every model is built the way fairseq-train builds it, with fresh weights: the cost of a decoder step does not
depend on the weights' values, so no trained checkpoint is needed.
"""
import argparse
import copy
import functools
import os
from dataclasses import replace
from typing import List, Sequence, Tuple

import torch

from benchmarks.provenance import REPO
from fairseq_plugins.cli.model_costs import model_cost
from fairseq_plugins.search.latency import LatencySettings, measure, measure_in_turn

# a step of the 8-layer d = 64 models takes about a millisecond: many runs per block are cheap
NEXT_TOKEN_SETTINGS = LatencySettings(threads=1, warmup=5, repeats=20, rounds=8)


def import_plugins():
    """Register the plugin's models, tasks and criteria (fairseq's training parser lists the registered
    architectures when it is built, before it reads --user-dir)."""
    from fairseq import utils

    utils.import_user_module(argparse.Namespace(user_dir=os.path.join(REPO, "fairseq_plugins")))


def training_args(argv: Sequence[str]) -> argparse.Namespace:
    """The options fairseq-train resolves from its arguments ``argv`` (without the program name)."""
    from fairseq import options

    import_plugins()
    return options.parse_args_and_arch(options.get_training_parser(), list(argv))


def build_model(argv: Sequence[str], seed: int = 1):
    """(task, model): the model fairseq-train would build from its arguments ``argv``, freshly initialised
    (its task reads the dictionaries of the data folder ``argv`` names, no data set)."""
    from fairseq import tasks

    args = training_args(argv)
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    return task, task.build_model(args).eval()


def built_model(argv: Sequence[str]):
    return build_model(argv)[1]


def lm_argv(data_bin: str, arch: str, flags: Sequence[str], positions: int, seed: int = 1) -> List[str]:
    """fairseq-train's arguments for a language model of ``positions`` positions (``flags`` that name a file
    relative to the repository root, as the recipes run from there, are read from there)."""
    flags = [os.path.join(REPO, flag) if not os.path.isabs(flag) and os.path.isfile(os.path.join(REPO, flag)) else flag
             for flag in flags]
    return [data_bin, "--task", "language_modeling", "--user-dir", os.path.join(REPO, "fairseq_plugins"), "--arch", arch,
            "--tokens-per-sample", str(positions), "--max-target-positions", str(positions), "--seed", str(seed), *flags]


def lm_args(data_bin: str, arch: str, flags: Sequence[str], positions: int, seed: int = 1) -> argparse.Namespace:
    """The options fairseq-train resolves for a language model of ``positions`` positions."""
    return training_args(lm_argv(data_bin, arch, flags, positions, seed))


def build_lm(data_bin: str, arch: str, flags: Sequence[str], positions: int, seed: int = 1):
    """(task, model): a freshly initialised LM built the way fairseq-train builds it (task, arch, flags)."""
    return build_model(lm_argv(data_bin, arch, flags, positions, seed), seed)


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


def beam_search_costs(layouts: Sequence[Sequence[str]], reference: Sequence[str], settings: LatencySettings) -> List[dict]:
    """Each translation layout's beam search (fairseq-train's arguments, as ``build_model`` reads them), timed
    beside ``reference``'s with the latency protocol (``settings``: the beam, the source's tokens, the decoder
    steps; ``generation``: fairseq's SequenceGenerator on one random source sentence, batch 1, exactly that many
    steps), on fresh weights (the work of a step does not depend on their values): milliseconds per sentence,
    relative to the reference, the ratios' spread, and the parameters. The layouts' measuring processes are
    taken in turn (``measure_in_turn``), so a change of the machine's speed weighs on every layout alike."""
    from fairseq import tasks

    dictionary = tasks.setup_task(training_args(reference)).target_dictionary
    records = measure_in_turn([(functools.partial(built_model, argv), functools.partial(built_model, reference))
                               for argv in layouts], dictionary, settings, work=("generation",))
    costs = []
    for argv, record in zip(layouts, records):
        params = sum(p.numel() for p in built_model(argv).parameters())
        costs.append({"ms_per_sentence": record["latency_ms"], "reference_ms_per_sentence": record["reference_ms"],
                      "relative": record["relative_latency"], "ratio_range": record["ratio_range"],
                      "ratios": record["ratios"], "process_range": record["process_range"],
                      "decoder_calls": record["decoder_calls"], "params": params,
                      "settings": {k: record[k] for k in ("source_length", "decoder_steps", "beam", "threads", "warmup",
                                                          "repeats", "rounds", "processes", "trim", "cores")}})
    return costs
