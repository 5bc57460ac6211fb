"""WMT17 English-German (about 5.9M pairs): Europarl v7, Common Crawl, News
Commentary v12 and Rapid 2016; newstest2016 valid, newstest2017 test; joint
BPE (see data_prep/wmt.py for the processing), or ``--bpe sentencepiece``.

The BET paper (Sha et al. 2022) reports a joint vocabulary of 25,860 but not
its BPE settings: 25,000 merges is our choice; the script prints the joint
dictionary's size next to 25,860 so --bpe-merges can be adjusted.

    python -m data_prep.wmt17_en_de [--raw-dir DIR] [--bpe-merges 25000]
"""
from typing import Optional, Sequence

from .wmt import COMMONCRAWL, EUROPARL_V7, corpus, prepare_wmt, wmt_main

WMT17 = "http://data.statmt.org/wmt17/translation-task/"
NEWS_COMMENTARY_V12 = corpus("training-parallel-nc-v12.tgz", [WMT17 + "training-parallel-nc-v12.tgz",
                             WMT17.replace("http:", "https:") + "training-parallel-nc-v12.tgz"], "news-commentary-v12.de-en")
RAPID_2016 = corpus("rapid2016.tgz", [WMT17 + "rapid2016.tgz", WMT17.replace("http:", "https:") + "rapid2016.tgz"], "rapid2016.de-en")
TRAIN = [EUROPARL_V7, COMMONCRAWL, NEWS_COMMENTARY_V12, RAPID_2016]
BET_VOCABULARY = 25860


def prepare(args) -> str:
    return prepare_wmt(args, TRAIN, valid_key="wmt16", test_key="wmt17", published_dict_size=BET_VOCABULARY)


def main(argv: Optional[Sequence[str]] = None) -> str:
    return wmt_main("wmt17_en_de", __doc__, "work_dirs/data-bin/wmt17_en_de", 25000, prepare, argv)


if __name__ == "__main__":
    main()
