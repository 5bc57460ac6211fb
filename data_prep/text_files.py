"""A word-level language-model corpus that is already tokenised and split:
``train.txt``, ``valid.txt`` and ``test.txt`` in ``--input-dir`` (one sentence
or line per line, tokens separated by spaces), binarised as WikiText is
(``fairseq-preprocess --only-source``, dictionary from train, every line
ending with fairseq's end-of-sentence symbol; perplexity per token, end-of-line
symbols included). For example a folder ``mytext`` of your own (docs/own-data.md: one raw
file split and tokenised first):

    python -m data_prep.text_files --input-dir mytext --dest work_dirs/data-bin/mytext
"""
import os
from typing import Optional, Sequence

from .common import PrepError, argument_parser, copy_text, file_digest, main_guard, require_text
from .language_model import LM_STEPS, SPLITS, prepare_lm


def prepare(args) -> str:
    inputs = {split: os.path.join(args.input_dir, f"{split}.txt") for split in SPLITS}
    missing = [path for path in inputs.values() if not os.path.isfile(path)]
    if missing:
        raise PrepError(f"--input-dir {args.input_dir}: missing {', '.join(missing)} "
                        f"(expected {', '.join(s + '.txt' for s in SPLITS)})")
    for split, path in inputs.items():
        require_text(path, f"the {split} split needs at least one token")

    def write_text(text_dir: str):
        os.makedirs(text_dir, exist_ok=True)
        for split, source in inputs.items():
            copy_text(source, os.path.join(text_dir, f"{split}.txt"))

    # The digests make a changed input redo the preparation instead of keeping stale binaries.
    return prepare_lm(args, write_text, unit="word", raw_step_params={
        "source": os.path.abspath(args.input_dir), **{f"sha256_{s}": file_digest(p) for s, p in inputs.items()}})


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argument_parser("text_files", __doc__, "work_dirs/data-bin/text_files", LM_STEPS, downloads=False)
    parser.add_argument("--input-dir", required=True, help="folder with train.txt, valid.txt and test.txt")
    return main_guard(prepare, parser, argv)


if __name__ == "__main__":
    main()
