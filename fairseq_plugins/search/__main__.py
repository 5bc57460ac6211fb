"""``python -m fairseq_plugins.search SUBCOMMAND``: the architecture search's command line.

    python -m fairseq_plugins.search sample --space search_spaces/multi30k_cpu.yaml -n 5 --seed 1
    python -m fairseq_plugins.search space --space search_spaces/wmt14_en_de.yaml
    python -m fairseq_plugins.search evaluate --checkpoint SUPER.pt --architecture A.json [--bleu]
    python -m fairseq_plugins.search export --checkpoint SUPER.pt --architecture A.json --output SUB.pt
    python -m fairseq_plugins.search cost --checkpoint SUPER.pt --architecture A.json [--latency]

Each subcommand has ``--help``. Errors (a bad space file, an architecture outside a space) are one
line naming the file and the field, and exit with status 2.
"""
import argparse
import json
import sys
from typing import Optional, Sequence


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
    supernet: nothing is extracted. Without --architecture: the largest architecture of the space."""
    from .subnetworks import validation_bleu, validation_loss

    result = validation_loss(args.checkpoint, args.architecture, args.subset, args.max_tokens)
    if args.bleu:
        scored = validation_bleu(args.checkpoint, args.architecture, args.subset, beam=args.beam, lenpen=args.lenpen,
                                 max_len_a=args.max_len_a, max_len_b=args.max_len_b, post_process=args.post_process,
                                 batch_size=args.batch_size, tokenize=args.sacrebleu_tokenizer,
                                 hypotheses_path=args.hypotheses)
        result.update({key: value for key, value in scored.items() if key not in result})
    print(json.dumps(result))


def export(args) -> None:
    """Write a standalone mixed_transformer checkpoint with only the sub-network's weights (fairseq-generate,
    fairseq-train --finetune-from-model and the hub load it like any other)."""
    from .subnetworks import export as export_subnetwork

    parameters, _ = export_subnetwork(args.checkpoint, args.architecture, args.output)
    print(f"{args.output}: {parameters:,} parameters")


def count(args) -> None:
    """Parameters and forward FLOPs of a sub-network, from the registry's per-kind counts (one sentence pair
    of the stated lengths; FLOPs: 2 per multiply-add of the matrix products). With --latency, also the
    measured latency of the exported sub-network as Hardware-Aware Transformers measures it: one sentence of
    --source-length tokens, the encoder once and beam search (fairseq's SequenceGenerator) for exactly
    --target-length decoder steps, on --threads threads, --warmup runs discarded, then the mean of --repeats
    runs without the fastest and slowest --trim fraction, their standard deviation, minimum and maximum."""
    from .latency import LatencySettings
    from .subnetworks import cost

    latency = None
    if args.latency:
        latency = LatencySettings(source_length=args.source_length, decoder_steps=args.target_length, beam=args.beam,
                                  threads=args.threads, warmup=args.warmup, repeats=args.repeats, trim=args.trim)
        latency.check()
    print(json.dumps(cost(args.checkpoint, args.architecture, args.source_length, args.target_length, latency)))


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
    evaluator.add_argument("--architecture", help="architecture JSON (as sample prints; default: the largest of the space)")
    evaluator.add_argument("--subset", default="valid", help="data subset (default: %(default)s)")
    evaluator.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch of the loss (default: %(default)s)")
    evaluator.add_argument("--bleu", action="store_true",
                           help="also beam-search the subset and report sacreBLEU, as fairseq-generate --scoring sacrebleu "
                           "with the options below scores it")
    evaluator.add_argument("--beam", type=int, default=5, help="--bleu: beam size (default: %(default)s)")
    evaluator.add_argument("--lenpen", type=float, default=1.0, help="--bleu: length penalty (default: %(default)s)")
    evaluator.add_argument("--max-len-a", type=float, default=0.0,
                           help="--bleu: at most max_len_a * source length + max_len_b tokens (default: %(default)s)")
    evaluator.add_argument("--max-len-b", type=int, default=200, help="--bleu: see --max-len-a (default: %(default)s)")
    evaluator.add_argument("--post-process", default=None,
                           help="--bleu: remove BPE before scoring, as fairseq's --post-process (e.g. subword_nmt, "
                           "sentencepiece; default: none)")
    evaluator.add_argument("--batch-size", type=int, default=64, help="--bleu: sentences per beam-search batch (default: %(default)s)")
    evaluator.add_argument("--sacrebleu-tokenizer", default="13a",
                           help="--bleu: sacreBLEU's tokenizer, as fairseq's --sacrebleu-tokenizer (default: %(default)s)")
    evaluator.add_argument("--hypotheses", metavar="FILE",
                           help="--bleu: also write the hypotheses to FILE, one per line in the subset's order")
    evaluator.set_defaults(run=evaluate)
    exporter = commands.add_parser("export", help="write a sub-network as a standalone checkpoint", description=export.__doc__)
    exporter.add_argument("--checkpoint", required=True, help="a mixed_supertransformer checkpoint")
    exporter.add_argument("--architecture", required=True, help="architecture JSON (as sample prints)")
    exporter.add_argument("--output", required=True, help="the checkpoint to write (atomically)")
    exporter.set_defaults(run=export)
    coster = commands.add_parser("cost", help="parameters and FLOPs of a sub-network", description=count.__doc__)
    coster.add_argument("--checkpoint", required=True, help="a mixed_supertransformer checkpoint (its dictionaries and options)")
    coster.add_argument("--architecture", required=True, help="architecture JSON (as sample prints)")
    coster.add_argument("--source-length", type=int, default=30, help="source tokens (default: %(default)s)")
    coster.add_argument("--target-length", type=int, default=30, help="target tokens (default: %(default)s)")
    coster.add_argument("--latency", action="store_true", help="also measure the exported sub-network's latency (see above)")
    coster.add_argument("--beam", type=int, default=5, help="--latency: beam size (default: %(default)s)")
    coster.add_argument("--threads", type=int, default=1, help="--latency: torch threads (default: %(default)s)")
    coster.add_argument("--warmup", type=int, default=3, help="--latency: untimed runs first (default: %(default)s)")
    coster.add_argument("--repeats", type=int, default=10, help="--latency: timed runs (default: %(default)s)")
    coster.add_argument("--trim", type=float, default=0.1,
                        help="--latency: fraction of the fastest and of the slowest runs left out of the mean (default: %(default)s)")
    coster.set_defaults(run=count)
    args = parser.parse_args(argv)
    if getattr(args, "n", 1) < 1:
        parser.error("-n: expected at least 1")
    if getattr(args, "beam", 1) < 1:
        parser.error("--beam: expected at least 1")

    import fairseq_plugins  # noqa: F401  (registers the attention kinds a space may name)
    from ..modules import AttentionConfigError

    try:
        args.run(args)
    except AttentionConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
