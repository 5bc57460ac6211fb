"""WikiText-103 and WikiText-2 (Merity et al. 2016), word level, as fairseq's
examples/language_model/prepare-wikitext-103.sh: the release's
``wiki.{train,valid,test}.tokens`` unchanged (the dataset's own ``<unk>`` is
kept and becomes fairseq's ``<unk>``; headings and blank lines stay, each line
ends with fairseq's end-of-sentence symbol), ``fairseq-preprocess
--only-source``. Perplexity from fairseq-eval-lm is per token, end-of-line
symbols included, as in the fairseq and Transformer-XL papers.

    python -m data_prep.wikitext103 [--raw-dir DIR]
    python -m data_prep.wikitext2 [--raw-dir DIR]
"""
import os
from typing import Optional, Sequence

from .common import Resource, argument_parser, copy_text, fetch, main_guard
from .language_model import LM_STEPS, SPLITS, prepare_lm


# The md5 of each release zip as torchtext publishes it (torchtext/datasets/wikitext{2,103}.py).
MD5 = {"2": "542ccefacc6c27f945fb54453812b3cd", "103": "9ddaacaf6af0710eda8c456decff7832"}


def resource(variant: str) -> Resource:
    name = f"wikitext-{variant}-v1.zip"
    return Resource(
        name=name, members=[f"wiki.{split}.tokens" for split in SPLITS], md5=MD5[variant],
        checksum_source="torchtext's published md5 (torchtext.datasets.WikiText2/WikiText103)",
        urls=[f"https://wikitext.smerity.com/{name}",  # the author's current address
              f"https://s3.amazonaws.com/research.metamind.io/wikitext/{name}"],  # the original (fairseq's script)
    )


def main_for(variant: str, argv: Optional[Sequence[str]] = None) -> str:
    """``variant``: "103" or "2". The raw directory may hold the zip or the
    ``wikitext-<variant>/wiki.*.tokens`` files."""
    def prepare(args) -> str:
        def write_text(text_dir: str):
            # both releases name their files wiki.*.tokens: prefer the variant's own folder
            own = args.raw_dir and os.path.join(args.raw_dir, f"wikitext-{variant}")
            raw_dir = own if own and os.path.isdir(own) else args.raw_dir
            files = fetch(resource(variant), raw_dir, args.work_dir, download_ok=not args.no_download,
                          retries=args.retries, mirrors=args.mirror)
            os.makedirs(text_dir, exist_ok=True)
            for split in SPLITS:
                copy_text(files[f"wiki.{split}.tokens"], os.path.join(text_dir, f"{split}.txt"))

        return prepare_lm(args, write_text, unit="word", raw_step_params={"release": resource(variant).name})

    parser = argument_parser(f"wikitext{variant}", __doc__, f"work_dirs/data-bin/wikitext-{variant}", LM_STEPS)
    return main_guard(prepare, parser, argv)

