"""WMT14 English-German (4.5M pairs): Europarl v7, Common Crawl and News
Commentary v9; newstest2013 valid, newstest2014 (the "full" release, 3,003
sentences) test; joint BPE with 40,000 merges (fairseq's
prepare-wmt14en2de.sh --icml17 corpora; see data_prep/wmt.py), or
``--bpe sentencepiece``.

    python -m data_prep.wmt14_en_de [--raw-dir DIR] [--bpe-merges 40000] [--bpe sentencepiece --spm-vocab-size 32000]
"""
from typing import Optional, Sequence

from .wmt import COMMONCRAWL, EUROPARL_V7, corpus, prepare_wmt, statmt, wmt_main

NEWS_COMMENTARY_V9 = corpus("training-parallel-nc-v9.tgz", statmt("wmt14/training-parallel-nc-v9.tgz"), "news-commentary-v9.de-en")
TRAIN = [EUROPARL_V7, COMMONCRAWL, NEWS_COMMENTARY_V9]


def prepare(args) -> str:
    return prepare_wmt(args, TRAIN, valid_key="wmt13", test_key="wmt14/full", notes=[
        "tokenized BLEU for WMT14 en-de is reported with compound splitting (recipes/wmt14_en_de/generate.sh does it)"])


def main(argv: Optional[Sequence[str]] = None) -> str:
    return wmt_main("wmt14_en_de", __doc__, "work_dirs/data-bin/wmt14_en_de", 40000, prepare, argv)


if __name__ == "__main__":
    main()
