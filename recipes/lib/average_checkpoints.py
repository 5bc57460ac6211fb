"""Average the parameters of the last N checkpoints of a fairseq run (what
fairseq's scripts/average_checkpoints.py does; that script is not part of the
installed fairseq package).

    python recipes/lib/average_checkpoints.py --dir SAVE_DIR --last 10 --output avg.pt
    python recipes/lib/average_checkpoints.py --inputs a.pt b.pt --output avg.pt

``--last N`` takes the N update checkpoints (``checkpoint_E_U.pt``, written
with --save-interval-updates) with the highest update numbers, or the N epoch
checkpoints (``checkpointE.pt``) when there are no update checkpoints. The
result keeps everything else (arguments, optimizer history) from the newest
checkpoint. Loading uses torch's weights-only mode (importing
fairseq_plugins allows fairseq's argparse.Namespace, nothing else).
"""
import argparse
import collections
import os
import re
import sys
from typing import List


# fairseq's checkpoint names: --save-interval-updates' checkpoint_EPOCH_UPDATES.pt, the epochs' checkpointEPOCH.pt
UPDATE_CHECKPOINT = re.compile(r"checkpoint_\d+_(\d+)\.pt")
EPOCH_CHECKPOINT = re.compile(r"checkpoint(\d+)\.pt")


def last_checkpoints(directory: str, count: int) -> List[str]:
    """The ``count`` newest update (else epoch) checkpoints, newest first."""
    names = os.listdir(directory)
    for pattern in (UPDATE_CHECKPOINT, EPOCH_CHECKPOINT):
        numbered = sorted(((int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n))), reverse=True)
        if numbered:
            if len(numbered) < count:
                raise SystemExit(f"error: {directory} has {len(numbered)} such checkpoints, {count} were asked for")
            return [os.path.join(directory, name) for _, name in numbered[:count]]
    raise SystemExit(f"error: no update or epoch checkpoints in {directory} (train with SAVE_INTERVAL_UPDATES > 0)")


def average(paths: List[str]) -> dict:
    import torch

    import fairseq_plugins  # noqa: F401  (weights-only loading of fairseq checkpoints)

    newest, total = None, collections.OrderedDict()
    for path in paths:
        state = torch.load(path, map_location="cpu")
        if newest is None:
            newest = state
        params = state["model"]
        if total and list(params) != list(total):
            raise SystemExit(f"error: {path} has other parameters than {paths[0]}")
        for key, value in params.items():
            value = value.float() if value.is_floating_point() else value
            total[key] = total[key] + value if key in total else value.clone()
    averaged = collections.OrderedDict()
    for key, value in total.items():
        original = newest["model"][key]
        averaged[key] = (value / len(paths)).to(original.dtype) if value.is_floating_point() else value // len(paths)
    newest["model"] = averaged
    return newest


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dir", help="a fairseq --save-dir")
    source.add_argument("--inputs", nargs="+", help="checkpoint files")
    parser.add_argument("--last", type=int, default=10, help="with --dir: how many of the newest checkpoints")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    paths = args.inputs or last_checkpoints(args.dir, args.last)
    print(f"averaging {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}", file=sys.stderr)
    state = average(paths)
    import torch

    from fairseq_plugins.files import atomic_output

    with atomic_output(args.output, "wb") as f:
        torch.save(state, f)
    print(f"wrote {args.output}", file=sys.stderr)
    return args.output


if __name__ == "__main__":
    main()
