"""``python -m fairseq_plugins.search SUBCOMMAND``: the architecture search's command line.

    python -m fairseq_plugins.search sample --space search_spaces/multi30k_cpu.yaml -n 5 --seed 1
    python -m fairseq_plugins.search space --space search_spaces/wmt14_en_de.yaml
    python -m fairseq_plugins.search evaluate --checkpoint SUPER.pt --architecture A.json [--architecture B.json ...] [--bleu]
    python -m fairseq_plugins.search export --checkpoint SUPER.pt --architecture A.json --output SUB.pt
    python -m fairseq_plugins.search cost --checkpoint SUPER.pt --architecture A.json [--latency]
    python -m fairseq_plugins.search collect --what loss|latency --checkpoint SUPER.pt --space S.yaml -n 300 --output D.jsonl
    python -m fairseq_plugins.search rank --data D.jsonl --target loss|latency [--output DIR]
    python -m fairseq_plugins.search prune --space S.yaml --importance DIR/importance.json --keep K --output P.yaml
    python -m fairseq_plugins.search evolve --space S.yaml --fitness ranker --ranker DIR/ranker.txt \
        --latency-ms X --latency-predictor LAT/regressor.txt --checkpoint SUPER.pt --output OUT
    python -m fairseq_plugins.search pareto --space S.yaml --fitness ranker --ranker DIR/ranker.txt \
        --objective latency --latency-predictor LAT/regressor.txt --output front.jsonl

Each subcommand has ``--help``. Errors (a bad space file, an architecture outside a space) are one
line naming the file and the field, and exit with status 2.
"""
import argparse
import json
import logging
import sys
from typing import Optional, Sequence, Tuple

logger = logging.getLogger("fairseq_plugins.search")  # (not __name__: run with -m, this module is __main__)


def _space(path: str):
    from .space import SearchSpace

    return SearchSpace.from_file(path)


def sample(args) -> None:
    """N architectures of the space, one JSON object per line (``--architecture-file`` reads one)."""
    space = _space(args.space)
    for architecture in space.samples(args.n, args.seed):
        print(architecture.to_json())


def describe(args) -> None:
    """The space's size and its largest and smallest architectures."""
    space = _space(args.space)
    print(json.dumps({"space": args.space, "architectures": space.size(),
                      "largest": space.extreme(largest=True).to_dict(), "smallest": space.extreme(largest=False).to_dict()},
                     indent=args.indent))


def evaluate(args) -> None:
    """The inherited sub-network's loss on a subset (bits per token, as fairseq logs it), computed inside the
    supernet: nothing is extracted. Without --architecture: the largest architecture of the space. Repeat
    --architecture to evaluate several with one load of the supernet: one JSON line each, in the order given."""
    from .subnetworks import evaluate_architectures

    paths = args.architecture or [None]
    bleu = dict(beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                post_process=args.post_process, batch_size=args.batch_size, tokenize=args.sacrebleu_tokenizer,
                hypotheses_path=args.hypotheses) if args.bleu else None
    for result in evaluate_architectures(args.checkpoint, paths, args.subset, args.max_tokens, bleu):
        print(json.dumps(result), flush=True)


def export(args) -> None:
    """Write a standalone mixed_transformer checkpoint with only the sub-network's weights (fairseq-generate,
    fairseq-train --finetune-from-model and the hub load it like any other)."""
    from .subnetworks import export as export_subnetwork

    parameters, _ = export_subnetwork(args.checkpoint, args.architecture, args.output)
    print(f"{args.output}: {parameters:,} parameters")


def count(args) -> None:
    """Parameters and forward FLOPs of a sub-network, from the registry's per-kind counts (one sentence pair
    of the stated lengths; FLOPs: 2 per multiply-add of the matrix products). With --latency, also the
    measured latency of the exported sub-network, the work Hardware-Aware Transformers times (one sentence of
    --source-length tokens, the encoder once and beam search for exactly --target-length decoder steps; a
    language model: sampling --target-length tokens), by the protocol of search/latency.py: a process pinned to
    one core (--core) on --threads threads, the sub-network and the --reference architecture interleaved in
    --rounds ABBA pairs of blocks of --repeats runs after --warmup untimed runs, each block's trimmed mean
    (--trim), medians over the rounds; the rounds shared among --processes such processes run one after
    another, medians over them: milliseconds, the latency relative to the reference, its repeatability (the
    spread of every round's ratio) and the spread between the processes."""
    from .latency import LatencySettings
    from .subnetworks import cost

    latency = None
    if args.latency:
        latency = LatencySettings.from_args(args)
        latency.check()
    print(json.dumps(cost(args.checkpoint, args.architecture, args.source_length, args.target_length, latency,
                          args.reference, args.device)))


def collect(args) -> None:
    """For N architectures sampled from --space (seeded; each in the supernet's space), the inherited validation
    loss inside the supernet (--what loss) or the measured latency of the exported sub-network (--what latency:
    as `cost --latency` measures it, on --device), appended to --output (JSON lines: a header with the settings,
    the space and the machine, then one record per architecture with the revision, threads and load). A rerun
    continues the file (the same seeded sequence, measured architectures skipped); other settings are refused.
    Latencies are in milliseconds and relative to --reference (`cost --latency`'s protocol); one whose
    repeatability (ratio_range) exceeds --max-spread is measured again up to --remeasure times, then written
    as dropped (left out by rank, counted here)."""
    from .collect import collect as run_collect
    from .latency import LatencySettings

    latency = LatencySettings.from_args(args)
    progress = (lambda count, record: logger.info("collect: %d: %s", count,
                                                  json.dumps({k: v for k, v in record.items() if k != "architecture"}))
                ) if args.verbose else None
    print(json.dumps(run_collect(args.what, args.checkpoint, args.space, args.n, args.output, seed=args.seed,
                                 subset=args.subset, max_tokens=args.max_tokens, latency=latency, reference=args.reference,
                                 max_spread=args.max_spread,
                                 remeasure=args.remeasure, device=args.device, progress=progress)))


def rank(args) -> None:
    """Fit a pairwise ranker (LightGBM LGBMRanker, LambdaRank over groups of architectures ranked by the target)
    and the pointwise baseline (LGBMRegressor) on the features of the collected architectures; report both on
    held-out architectures (Kendall's tau, share of correctly ordered pairs); write both models (refitted on
    every architecture), report.json and importance.json (feature importances and their sums per space field,
    which prune reads) to --output (default: ranker_<target>/ beside --data)."""
    from .ranking import rank_command

    print(json.dumps(rank_command(args.data, args.target, args.output, args.test_fraction, args.seed)))


def prune(args) -> None:
    """Write a smaller space: the --keep most important fields of the space (importance.json of rank, summed per
    field) stay free, every other field is fixed at its value in the best architecture of the ranker's data.
    Prints what was kept and fixed and the space's size before and after."""
    from .commands import prune_command

    print(json.dumps(prune_command(args)))


def evolve(args) -> None:
    """Hardware-Aware Transformers' evolutionary search over --space under the given budgets (--latency-ms,
    --relative-latency or --latency-of with a latency predictor, confirmed by measuring the --confirm fittest
    final candidates on this machine; --flops in GFLOPs, --params in millions, counted as `cost` counts them),
    fitness: the loss ranker's score (--fitness ranker) or the inherited loss (--fitness supernet). Writes
    --output/best.json (for --architecture-file), result.json (costs, history, confirmation) and
    train_command.sh (the exact fairseq-train command with the supernet's training options). An interrupted
    evolution resumes from --output/state.json (written after every iteration) to the result an
    uninterrupted one gives."""
    from .commands import evolve_command

    print(json.dumps(evolve_command(args)))


def pareto_search(args) -> None:
    """The whole trade-off instead of one budget: Optuna's NSGA-II over --space minimising the fitness and
    --objective (predicted latency, FLOPs or parameters), under the optional budgets; writes the Pareto set of
    the feasible architectures to --output (JSON lines, by increasing --objective). The study is stored in
    --output.optuna.sqlite after every trial: an interrupted search continues to --trials trials."""
    from .commands import pareto_command

    print(json.dumps(pareto_command(args)))


def add_length_options(parser) -> list:
    """The lengths costs (FLOPs) and latencies are counted at; returns their options (argparse actions)."""
    return [parser.add_argument("--source-length", type=int, default=30, help="source tokens (default: %(default)s)"),
            parser.add_argument("--target-length", type=int, default=30,
                                help="target tokens / decoder steps; language models: the context scored and the "
                                "tokens sampled (default: %(default)s)")]


def add_latency_options(parser) -> Tuple[list, list]:
    """The lengths and the latency measurement's settings (``latency.LatencySettings.from_args``; the protocol:
    ``latency``'s docstring); returns the lengths' and the measurement's options (argparse actions)."""
    lengths = add_length_options(parser)
    latency = []  # (the measurement's own options: refused where no latency is measured)

    def measured(*names, **options):
        latency.append(parser.add_argument(*names, **options))

    measured("--beam", type=int, default=5, help="latency: beam size (default: %(default)s)")
    measured("--threads", type=int, default=1, help="latency: torch threads, each pinned to one core (default: %(default)s)")
    measured("--core", type=int, default=None,
             help="latency: the (first) core the measuring process is pinned to (default: the last this process may use)")
    measured("--warmup", type=int, default=3, help="latency: untimed runs of each model first (default: %(default)s)")
    measured("--repeats", type=int, default=5, help="latency: timed runs per block (default: %(default)s)")
    measured("--rounds", type=int, default=6,
             help="latency: candidate/reference block pairs per architecture, interleaved ABBA, shared among "
             "the --processes (at least 2 in each; default: %(default)s)")
    measured("--processes", type=int, default=3,
             help="latency: measuring processes per architecture, one after another, each a fresh fork timing its "
             "share of the --rounds (the relative latency varies between processes); the relative latency and "
             "the milliseconds are the medians over them (--device cuda: parts in turn in this process) "
             "(default: %(default)s)")
    measured("--in-turn", type=int, default=10,
             help="latency: candidates measured together (a collection, evolution's fittest), their processes "
             "taken in turn (the first of each, then the second of each, ...) so that each one's spread over "
             "the whole measurement; 1: one candidate after another (default: %(default)s)")
    measured("--trim", type=float, default=0.2,
             help="latency: fraction of the fastest and of the slowest runs of a block left out of its mean "
             "(default: %(default)s)")
    measured("--reference", metavar="ARCHITECTURE_JSON",
             help="latency: the fixed reference architecture measured beside every candidate "
             "(default: the supernet space's largest)")
    measured("--device", default="cpu", help="latency: cpu or cuda[:N] (default: %(default)s)")
    return lengths, latency


def add_budget_options(parser, measures: bool) -> dict:
    """The fitness, the budgets and the lengths of ``evolve`` and ``pareto``; ``measures``: the latency
    measurement's options too (evolve measures its fittest candidates under a latency budget; pareto measures
    nothing). Returns the options that belong to one mode: {"ranker": ..., "supernet": ..., "predictor": ...,
    "measurement": ...} (argparse actions)."""
    modes = {}
    parser.add_argument("--space", required=True, help="search space YAML file")
    parser.add_argument("--fitness", choices=("ranker", "supernet"), default="ranker",
                        help="ranker: the --ranker's score; supernet: the inherited loss in --checkpoint (default: %(default)s)")
    modes["ranker"] = [parser.add_argument("--ranker", help="the ranker.txt of `rank --target loss`")]
    parser.add_argument("--checkpoint", help="the supernet: --fitness supernet, latency confirmation, costs at its "
                        "dictionary sizes and the training command")
    modes["supernet"] = [parser.add_argument("--subset", default="valid", help="--fitness supernet: data subset (default: %(default)s)")]
    parser.add_argument("--latency-ms", type=float, help="budget: predicted latency in milliseconds")
    parser.add_argument("--relative-latency", type=float,
                        help="budget: predicted latency over the reference's (the reference the predictor's collection "
                        "measured beside every architecture)")
    parser.add_argument("--latency-of", metavar="ARCHITECTURE_JSON",
                        help="budget: the latency of this architecture of --space (a baseline): the predicted constraint is "
                        "the predictor's value for it (a candidate and it compared by one predictor; either regressor), and "
                        "evolve measures its final candidates beside it (it is in every group of --in-turn): within when no "
                        "slower than it in their measurement; pareto: the predicted constraint only. It starts the "
                        "search: evolve's first population (filled with mutations of the feasible architectures when "
                        "too few random ones meet the budget), pareto's first trial")
    modes["predictor"] = [parser.add_argument("--latency-predictor",
                        help="the regressor.txt of `rank --target latency` (--latency-ms) or `relative_latency` "
                        "(--relative-latency; --latency-of: either)")]
    parser.add_argument("--flops", type=float, help="budget: forward GFLOPs of one sentence pair of the stated lengths")
    parser.add_argument("--params", type=float, help="budget: millions of parameters")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    if measures:
        _, modes["measurement"] = add_latency_options(parser)
    else:
        add_length_options(parser)
    return modes


LATENCY_BUDGET = "a latency budget (--latency-ms, --relative-latency or --latency-of)"


def latency_budget(args) -> bool:
    return any(getattr(args, name) is not None for name in ("latency_ms", "relative_latency", "latency_of"))


def fitness_modes(modes: dict) -> list:
    """``option_without_its_mode``'s modes of --fitness: --ranker is read by the ranker's, --subset by the supernet's."""
    return [(lambda a: a.fitness == "ranker", "--fitness ranker", modes["ranker"]),
            (lambda a: a.fitness == "supernet", "--fitness supernet", modes["supernet"])]


def option_without_its_mode(args, argv: Sequence[str], modes: dict) -> Optional[str]:
    """The error for an option given without the mode it belongs to (``evaluate --beam`` without ``--bleu``), or
    None. ``modes``: command -> [(whether args are in the mode, the mode as typed, its options (argparse
    actions))]. The options are read as typed: the parsers take no abbreviations (as fairseq's)."""
    from ..command_line import typed_options

    given = typed_options(list(argv))
    for active, mode, actions in modes.get(args.command, ()):
        option = None if active(args) else next((o for a in actions for o in a.option_strings if o in given), None)
        if option:
            return f"{option}: an option of {mode}, which is not given (it would be ignored)"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_plugins.search", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    sampler = commands.add_parser("sample", help="print N architectures sampled from a space (JSON lines)",
                                  description=sample.__doc__)
    sampler.add_argument("--space", required=True, help="search space YAML file (e.g. search_spaces/multi30k_cpu.yaml)")
    sampler.add_argument("-n", type=int, default=1, help="number of architectures (default: %(default)s)")
    sampler.add_argument("--seed", type=int, default=1, help="random seed: the same seed gives the same list (default: %(default)s)")
    sampler.set_defaults(run=sample)
    info = commands.add_parser("space", help="size, largest and smallest architecture of a space", description=describe.__doc__)
    info.add_argument("--space", required=True, help="search space YAML file")
    info.add_argument("--indent", type=int, default=2, help="JSON indentation (default: %(default)s)")
    info.set_defaults(run=describe)
    evaluator = commands.add_parser("evaluate", help="inherited validation loss of a sub-network", description=evaluate.__doc__)
    evaluator.add_argument("--checkpoint", required=True, help="a mixed_supertransformer checkpoint")
    evaluator.add_argument("--architecture", action="append",
                           help="architecture JSON (as sample prints; default: the largest of the space); repeat it to "
                           "evaluate several in one process, one JSON line each in the order given")
    evaluator.add_argument("--subset", default="valid", help="data subset (default: %(default)s)")
    evaluator.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch of the loss (default: %(default)s)")
    evaluator.add_argument("--bleu", action="store_true",
                           help="also beam-search the subset and report sacreBLEU, as fairseq-generate --scoring sacrebleu "
                           "with the options below scores it")
    bleu_options = []  # (--bleu's beam search)
    bleu_options.append(evaluator.add_argument("--beam", type=int, default=5, help="--bleu: beam size (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--lenpen", type=float, default=1.0, help="--bleu: length penalty (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--max-len-a", type=float, default=0.0,
                           help="--bleu: at most max_len_a * source length + max_len_b tokens (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--max-len-b", type=int, default=200, help="--bleu: see --max-len-a (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--post-process", default=None,
                           help="--bleu: remove BPE before scoring, as fairseq's --post-process (e.g. subword_nmt, "
                           "sentencepiece; default: none)"))
    bleu_options.append(evaluator.add_argument("--batch-size", type=int, default=64, help="--bleu: sentences per beam-search batch (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--sacrebleu-tokenizer", default="13a",
                           help="--bleu: sacreBLEU's tokenizer, as fairseq's --sacrebleu-tokenizer (default: %(default)s)"))
    bleu_options.append(evaluator.add_argument("--hypotheses", metavar="FILE",
                           help="--bleu: also write the hypotheses to FILE, one per line in the subset's order"))
    evaluator.set_defaults(run=evaluate)
    exporter = commands.add_parser("export", help="write a sub-network as a standalone checkpoint", description=export.__doc__)
    exporter.add_argument("--checkpoint", required=True, help="a mixed_supertransformer checkpoint")
    exporter.add_argument("--architecture", required=True, help="architecture JSON (as sample prints)")
    exporter.add_argument("--output", required=True, help="the checkpoint to write (atomically)")
    exporter.set_defaults(run=export)
    coster = commands.add_parser("cost", help="parameters and FLOPs of a sub-network", description=count.__doc__)
    coster.add_argument("--checkpoint", required=True, help="a mixed_supertransformer checkpoint (its dictionaries and options)")
    coster.add_argument("--architecture", required=True, help="architecture JSON (as sample prints)")
    coster.add_argument("--latency", action="store_true", help="also measure the exported sub-network's latency (see above)")
    _, cost_latency = add_latency_options(coster)
    coster.set_defaults(run=count)

    collector = commands.add_parser("collect", help="inherited losses or measured latencies of sampled architectures",
                                    description=collect.__doc__)
    collector.add_argument("--what", required=True, choices=("loss", "latency"), help="what to collect")
    collector.add_argument("--checkpoint", required=True, help="a supernet checkpoint")
    collector.add_argument("--space", required=True, help="the space to sample (the supernet's, or a pruned one)")
    collector.add_argument("-n", type=int, default=300, help="architectures (default: %(default)s)")
    collector.add_argument("--output", required=True, help="the JSON-lines file to write or continue")
    collector.add_argument("--seed", type=int, default=1, help="sampling seed (default: %(default)s)")
    collect_loss = [collector.add_argument("--subset", default="valid", help="loss: data subset (default: %(default)s)"),
                    collector.add_argument("--max-tokens", type=int, default=4096, help="loss: tokens per batch (default: %(default)s)")]
    lengths, collect_latency = add_latency_options(collector)
    collect_latency += lengths
    collect_latency.append(collector.add_argument("--max-spread", type=float, default=0.1,
                           help="latency: largest ratio_range (spread of every round's ratio to the reference, in every "
                           "measuring process, over the relative latency) accepted (default: %(default)s)"))
    collect_latency.append(collector.add_argument("--remeasure", type=int, default=2,
                                                  help="latency: measurements again before dropping (default: %(default)s)"))
    collector.add_argument("--verbose", action="store_true", help="print every record as it is written")
    collector.set_defaults(run=collect)

    ranker = commands.add_parser("rank", help="fit and test a pairwise ranker (and a pointwise baseline)", description=rank.__doc__)
    ranker.add_argument("--data", required=True, help="a collect file")
    ranker.add_argument("--target", required=True, choices=("loss", "latency", "relative_latency"),
                        help="what to rank by: loss, latency (milliseconds) or relative_latency (over the reference's, "
                        "measured beside it) of a latency collection")
    ranker.add_argument("--output", help="folder of the models and reports (default: ranker_<target>/ beside --data)")
    ranker.add_argument("--test-fraction", type=float, default=0.2, help="held-out share (default: %(default)s)")
    ranker.add_argument("--seed", type=int, default=1, help="split and model seed (default: %(default)s)")
    ranker.set_defaults(run=rank)

    pruner = commands.add_parser("prune", help="a smaller space by feature importance", description=prune.__doc__)
    pruner.add_argument("--space", required=True, help="the space to prune")
    pruner.add_argument("--importance", required=True, help="the importance.json of `rank`")
    pruner.add_argument("--keep", type=int, required=True, help="fields left free")
    pruner.add_argument("--output", required=True, help="the pruned space (YAML)")
    pruner.set_defaults(run=prune)

    evolver = commands.add_parser("evolve", help="evolutionary search under a budget", description=evolve.__doc__)
    evolve_modes = add_budget_options(evolver, measures=True)
    evolver.add_argument("--output", required=True, help="folder of best.json, result.json and train_command.sh")
    evolver.add_argument("--population", type=int, default=125, help="(default: %(default)s)")
    evolver.add_argument("--parents", type=int, default=25, help="(default: %(default)s)")
    evolver.add_argument("--mutations", type=int, default=50, help="(default: %(default)s)")
    evolver.add_argument("--crossovers", type=int, default=50, help="(default: %(default)s)")
    evolver.add_argument("--mutation-probability", type=float, default=0.3, help="per gene (default: %(default)s)")
    evolver.add_argument("--iterations", type=int, default=30, help="(default: %(default)s)")
    evolver.add_argument("--patience", type=int, default=None,
                         help="stop early when the best fitness has not improved for this many iterations (default: no early "
                         "stop, as Hardware-Aware Transformers)")
    evolve_modes["measurement"].append(evolver.add_argument("--confirm", type=int, default=5,
                         help="a latency budget: final candidates whose latency is measured (default: %(default)s)"))
    evolver.add_argument("--flops-fraction", type=float,
                         help="budget: this fraction (0 < F <= 1) of the forward GFLOPs of the largest architecture of "
                              "--space, counted as --flops counts (needs no measurement: the search recipe's default)")
    evolver.add_argument("--train-max-update", type=int,
                         help="train_command.sh: the from-scratch training's --max-update (the training budget, e.g. "
                              "the recipe's MAX_UPDATE; default: the supernet's, which is rarely the one to train with)")
    evolver.add_argument("--verbose", action="store_true", help="print every iteration's best fitness")
    evolver.set_defaults(run=evolve)

    paretoer = commands.add_parser("pareto", help="the Pareto set of quality against a cost (Optuna NSGA-II)",
                                   description=pareto_search.__doc__)
    pareto_modes = add_budget_options(paretoer, measures=False)
    paretoer.add_argument("--objective", choices=("latency", "flops", "params"), default="latency",
                          help="the cost traded against the fitness (default: %(default)s)")
    paretoer.add_argument("--trials", type=int, default=500, help="architectures evaluated (default: %(default)s)")
    paretoer.add_argument("--population", type=int, default=50, help="NSGA-II population (default: %(default)s)")
    paretoer.add_argument("--output", required=True,
                          help="the Pareto set (JSON lines); the study is stored beside it (OUTPUT.optuna.sqlite: a rerun continues it)")
    paretoer.set_defaults(run=pareto_search)
    for subparser in [parser, *commands.choices.values()]:
        subparser.allow_abbrev = False  # (option_without_its_mode reads the options as typed)
    args = parser.parse_args(argv)
    modes = {"evaluate": [(lambda a: a.bleu, "--bleu", bleu_options)],
             "cost": [(lambda a: a.latency, "--latency", cost_latency)],
             "collect": [(lambda a: a.what == "latency", "--what latency", collect_latency),
                         (lambda a: a.what == "loss", "--what loss", collect_loss)],
             "evolve": [*fitness_modes(evolve_modes),
                        (latency_budget, LATENCY_BUDGET, evolve_modes["predictor"] + evolve_modes["measurement"])],
             "pareto": [*fitness_modes(pareto_modes),
                        (lambda a: a.objective == "latency" or latency_budget(a), f"--objective latency or {LATENCY_BUDGET}",
                         pareto_modes["predictor"])]}
    orphan = option_without_its_mode(args, sys.argv[1:] if argv is None else list(argv), modes)
    if orphan:
        parser.error(orphan)
    if getattr(args, "n", 1) < 1:
        parser.error("-n: expected at least 1")
    for option in ("beam", "source_length", "target_length", "max_tokens", "batch_size"):
        if getattr(args, option, 1) < 1:
            parser.error(f"--{option.replace('_', '-')}: expected at least 1, got {getattr(args, option)}")
    if getattr(args, "hypotheses", None) and len(args.architecture or [None]) > 1:
        parser.error(f"--hypotheses: one file holds one architecture's hypotheses, and {len(args.architecture)} "
                     "--architecture are given: evaluate them one at a time")

    from .. import register
    from ..command_line import configure_logging
    from ..errors import one_line_errors

    configure_logging()
    register()  # the attention kinds a space may name, the models a checkpoint holds

    return one_line_errors(lambda: args.run(args))


if __name__ == "__main__":
    sys.exit(main())
