"""Print the number of tokens of a fairseq binarised split (``fairseq-preprocess``'s mmap format): the
sum of the sentence sizes its ``.idx`` file lists. Reads the header without importing fairseq (recipes
call it before training starts; fairseq's ``MMapIndexedDataset.Index`` reads the same layout).

    python recipes/lib/indexed_tokens.py DATA_BIN/train.idx
"""
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"


def indexed_tokens(path: str) -> int:
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path}: not a fairseq mmap index (fairseq-preprocess --dataset-impl mmap)")
        (version,) = struct.unpack("<Q", f.read(8))
        if version != 1:
            raise ValueError(f"{path}: index version {version}, expected 1")
        f.read(1)  # the token dtype code
        (count,) = struct.unpack("<Q", f.read(8))
        sizes = np.frombuffer(f.read(4 * count), dtype=np.int32, count=count)
    return int(sizes.sum(dtype=np.int64))


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: indexed_tokens.py SPLIT.idx", file=sys.stderr)
        return 2
    try:
        print(indexed_tokens(args[0]))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
