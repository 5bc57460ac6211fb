"""``python -m fairseq_plugins.search SUBCOMMAND``: the architecture search's command line.

    python -m fairseq_plugins.search sample --space search_spaces/multi30k_cpu.yaml -n 5 --seed 1
    python -m fairseq_plugins.search space --space search_spaces/wmt14_en_de.yaml

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
    args = parser.parse_args(argv)
    if getattr(args, "n", 1) < 1:
        parser.error("-n: expected at least 1")

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
