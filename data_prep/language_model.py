"""The shared path of the language-model preparations: the dataset module
writes ``text/{train,valid,test}.txt`` (one line per line of the corpus,
tokens separated by spaces), then ``fairseq-preprocess --only-source`` builds
the dictionary from train and binarises all three splits. ``prepare.json`` in
the destination records the unit the perplexity is counted in; it is written
into the destination before that is renamed into place, so a killed run never
leaves binaries without it."""
import json
import os
from typing import Callable

from .common import Steps, atomic_output, binarize, invalid_utf8_params, log, require_text
from .text import dictionary_size

SPLITS = ("train", "valid", "test")


def prepare_lm(args, write_text: Callable[[str], None], unit: str, raw_step_params: dict) -> str:
    """``write_text(text_dir)`` fetches the release and writes the three text files."""
    work, dest = args.work_dir, args.dest
    steps = Steps(work, total=2, stop_after=args.stop_after)
    text = {split: os.path.join(work, "text", f"{split}.txt") for split in SPLITS}

    def write_checked_text():
        write_text(os.path.join(work, "text"))
        if unit == "word":  # (a byte split is checked by its module: a line of a newline byte alone is a token)
            for split, path in text.items():
                require_text(path, f"the {split} split needs at least one token")

    steps.run("text", list(text.values()), write_checked_text,
              raw_dir=os.path.abspath(args.raw_dir) if args.raw_dir else None, **raw_step_params,
              **invalid_utf8_params(args))

    def write_settings(staging: str):
        with atomic_output(os.path.join(staging, "prepare.json")) as f:
            json.dump({"dataset": os.path.basename(dest.rstrip("/")), "unit": unit, **raw_step_params}, f, indent=1, sort_keys=True)
            f.write("\n")

    def binarise():
        binarize(dest, text["train"], text["valid"], text["test"], workers=args.workers, complete=write_settings)
        log(f"dictionary: {dictionary_size(dest)} symbols")

    steps.run("binarize", [os.path.join(dest, "dict.txt"), os.path.join(dest, "prepare.json")], binarise,
              dest=os.path.abspath(dest))
    return dest
