"""enwik8 (the first 10^8 bytes of an English Wikipedia XML dump, Hutter
Prize), character level with the Transformer-XL convention
(prep_enwik8.py): the first 90M bytes train, the next 5M valid, the last 5M
test; one token per byte, written as its decimal value; a newline byte ends a
line and becomes fairseq's end-of-sentence symbol, so every byte is exactly
one token and fairseq-eval-lm's "Loss (base 2)" is bits per character (byte).

Any other byte file (e.g. tiny Shakespeare) goes the same way with
``--input-file FILE``: the last ``--test-fraction`` of its bytes test, the
``--valid-fraction`` before them valid, the rest train (enwik8's split is
0.9/0.05/0.05 of its 10^8 bytes); the options of getting the release
(``--raw-dir``, ``--no-download``, ``--mirror``, ``--retries``) are refused
with it.

    python -m data_prep.enwik8 [--raw-dir DIR]
    python -m data_prep.enwik8 --input-file input.txt --dest work_dirs/data-bin/tiny_shakespeare
"""
import os
from typing import Iterator, Optional, Sequence

from .common import PrepError, Resource, argument_parser, atomic_output, fetch_all, file_digest, main_guard, write_lines
from .language_model import LM_STEPS, prepare_lm

ENWIK8_BYTES = 100_000_000
RESOURCE = Resource(name="enwik8.zip", members=["enwik8"],
                    urls=["http://mattmahoney.net/dc/enwik8.zip",  # the official location (Hutter Prize page)
                          "https://data.deepai.org/enwik8.zip"])  # a mirror


def byte_lines(data: bytes) -> Iterator[str]:
    """prep_enwik8.py's ' '.join(str(c) if c != ord('\\n') else '\\n' for c in part), split into lines
    (a final newline ends the last line; it does not start an empty one)."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    for line in lines:
        yield " ".join(map(str, line))


def split_bytes(data: bytes, valid: int, test: int):
    return {"train": data[: len(data) - valid - test], "valid": data[len(data) - valid - test: len(data) - test],
            "test": data[len(data) - test:]}


def prepare(args) -> str:
    def write_text(text_dir: str):
        if args.input_file:
            path = args.input_file
        else:
            path = fetch_all([RESOURCE], args)["enwik8"]
            if os.path.getsize(path) != ENWIK8_BYTES:
                raise PrepError(f"{path} has {os.path.getsize(path)} bytes; enwik8 has exactly {ENWIK8_BYTES}")
        with open(path, "rb") as f:
            data = f.read()
        valid, test = round(len(data) * args.valid_fraction), round(len(data) * args.test_fraction)
        parts = split_bytes(data, valid, test)
        empty = [split for split, part in parts.items() if not part]
        if empty:  # fairseq would binarise nothing and evaluate over 0 tokens
            raise PrepError(f"--input-file {path}: {len(data)} bytes give an empty {empty[0]} split (--valid-fraction "
                            f"{args.valid_fraction}, --test-fraction {args.test_fraction}); every split needs at least "
                            "one byte: give a larger file or larger fractions")
        for split, part in parts.items():
            with atomic_output(os.path.join(text_dir, f"{split}.raw"), "wb") as f:
                f.write(part)
            write_lines(os.path.join(text_dir, f"{split}.txt"), byte_lines(part))

    source = os.path.abspath(args.input_file) if args.input_file else RESOURCE.name
    if args.input_file and not os.path.isfile(args.input_file):
        raise PrepError(f"--input-file {args.input_file} does not exist")
    fingerprint = file_digest(args.input_file) if args.input_file else None
    return prepare_lm(args, write_text, unit="byte", raw_step_params={
        "source": source, "sha256": fingerprint, "valid_fraction": args.valid_fraction, "test_fraction": args.test_fraction})


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argument_parser("enwik8", __doc__, "work_dirs/data-bin/enwik8", LM_STEPS)
    parser.add_argument("--input-file", help="prepare this byte file instead of enwik8 (not with --raw-dir, "
                        "--no-download, --mirror or --retries: they get the release)")
    parser.add_argument("--valid-fraction", type=float, default=0.05)
    parser.add_argument("--test-fraction", type=float, default=0.05)
    return main_guard(prepare, parser, argv)


if __name__ == "__main__":
    main()
