"""The shared path of the language-model preparations: the dataset module
writes ``text/{train,valid,test}.txt`` (one line per line of the corpus,
tokens separated by spaces), then ``fairseq-preprocess --only-source`` builds
the dictionary from train and binarises all three splits. ``prepare.json`` in
the destination records the unit the perplexity is counted in; it is written
into the destination before that is renamed into place, so a killed run never
leaves binaries without it."""
import os
from typing import Callable

from .common import Steps, binarize, invalid_utf8_params, log, require_text, write_json
from .text import dictionary_size

SPLITS = ("train", "valid", "test")
LM_STEPS = ("text", "binarize")


def prepare_lm(args, write_text: Callable[[str], None], unit: str, raw_step_params: dict) -> str:
    """``write_text(text_dir)`` fetches the release and writes the three text files."""
    work, dest = args.work_dir, args.dest
    steps = Steps(work, LM_STEPS, stop_after=args.stop_after)
    text = {split: os.path.join(work, "text", f"{split}.txt") for split in SPLITS}

    def write_checked_text():
        write_text(os.path.join(work, "text"))
        if unit == "word":  # (a byte split is checked by its module: a line of a newline byte alone is a token)
            for split, path in text.items():
                require_text(path, f"the {split} split needs at least one token")

    steps.run("text", list(text.values()), write_checked_text, track_inputs=True,
              raw_dir=os.path.abspath(args.raw_dir) if args.raw_dir else None, **raw_step_params,
              **invalid_utf8_params(args))

    def write_settings(staging: str):
        write_json(os.path.join(staging, "prepare.json"),
                   {"dataset": os.path.basename(dest.rstrip("/")), "unit": unit, **raw_step_params}, sort_keys=True)

    def binarise():
        binarize(dest, text["train"], text["valid"], text["test"], workers=args.workers, complete=write_settings)
        log(f"dictionary: {dictionary_size(dest)} symbols")

    steps.run("binarize", [os.path.join(dest, "dict.txt"), os.path.join(dest, "prepare.json")], binarise,
              dest=os.path.abspath(dest))
    return dest
