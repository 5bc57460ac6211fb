"""IWSLT14 German-English, prepared exactly as fairseq's
examples/translation/prepare-iwslt14.sh (the data behind every published
``transformer_iwslt_de_en`` number):

* train: ``train.tags.de-en.{de,en}`` without the ``<url>``, ``<talkid>`` and
  ``<keywords>`` lines, ``<title>``/``<description>`` tags removed (their text
  kept), Moses-tokenised (escaping on, no aggressive dash splitting), cleaned
  (1 to 175 words, length ratio 1.5), lower-cased;
* valid: every 23rd pair of that, train the rest;
* test: the ``<seg>`` lines of IWSLT14.TED.dev2010, IWSLT14.TEDX.dev2012,
  IWSLT14.TED.tst2010, tst2011 and tst2012, in that order (6,750 pairs on the
  real release; fairseq's script includes TEDX.dev2012), ’ replaced by ',
  tokenised and lower-cased;
* joint BPE with 10,000 merges (subword-nmt) learnt on train de + en, one
  joined dictionary.

    python -m data_prep.iwslt14 [--raw-dir DIR] [--dest work_dirs/data-bin/iwslt14.tokenized.de-en]
"""
import os
import re
from typing import Optional, Sequence

from .common import Resource, argument_parser, fetch_all, main_guard, read_lines, require_parallel, write_lines
from .text import sgm_segments
from .translation import TRANSLATION_STEPS, TranslationConfig, add_bpe_arguments, prepare_translation

SRC, TGT = "de", "en"
TEST_PARTS = ["IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012"]
RESOURCES = [
    Resource(
        name="de-en.tgz",
        urls=[
            "http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz",  # the copy fairseq's script downloads
            "https://wit3.fbk.eu/archive/2014-01/texts/de/en/de-en.tgz",  # the original WIT3 release
            "https://raw.githubusercontent.com/hlt-mt/WIT3/master/archive/2014-01/texts/de/en/de-en.tgz",  # WIT3 on GitHub
        ],
        members=[f"train.tags.de-en.{l}" for l in (SRC, TGT)] + [f"{p}.de-en.{l}.xml" for p in TEST_PARTS for l in (SRC, TGT)],
    )
]
_DROP = ("<url>", "<talkid>", "<keywords>")
_TAGS = re.compile(r"</?(title|description)>")


def train_lines(path: str):
    """grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>' | sed -e 's/<title>//g' ... (prepare-iwslt14.sh)."""
    for line in read_lines(path):
        if any(tag in line for tag in _DROP):
            continue
        yield _TAGS.sub("", line)


def config(args) -> TranslationConfig:
    return TranslationConfig(
        src=SRC, tgt=TGT, test_sets=["test"], moses_train={}, moses_eval={}, lowercase=True, clean_stage="tokenized",
        clean_max=175, clean_ratio=1.5, valid_every=23, bpe_merges=args.bpe_merges,
    )


def prepare(args) -> str:
    def write_raw(raw_dir: str):
        files = fetch_all(RESOURCES, args)
        tests = {(part, lang): sgm_segments(files[f"{part}.de-en.{lang}.xml"]) for part in TEST_PARTS for lang in (SRC, TGT)}
        for part in TEST_PARTS:  # a cut-off file would shift every later pair of the test set
            require_parallel(f"IWSLT14 {part}", {files[f"{part}.de-en.{lang}.xml"]: len(tests[part, lang]) for lang in (SRC, TGT)})
        for lang in (SRC, TGT):
            write_lines(os.path.join(raw_dir, f"train.{lang}"), train_lines(files[f"train.tags.de-en.{lang}"]))
            write_lines(os.path.join(raw_dir, f"test.{lang}"), (seg for part in TEST_PARTS for seg in tests[part, lang]))

    return prepare_translation(args, config(args), write_raw, {"release": RESOURCES[0].name})


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argument_parser("iwslt14", __doc__, "work_dirs/data-bin/iwslt14.tokenized.de-en", TRANSLATION_STEPS)
    add_bpe_arguments(parser, merges=10000)
    return main_guard(prepare, parser, argv)


if __name__ == "__main__":
    main()
