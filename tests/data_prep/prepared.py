"""Every dataset's sample, written in its raw format and prepared once per test
session (in this process: fairseq is imported once) with the arguments the
recipes' prepare.sh passes, so tests/recipes can rerun prepare.sh on the
same folders and find it up to date."""
import importlib
import os
from dataclasses import dataclass
from typing import Callable, Dict, List

import pytest
import raw_samples as samples

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_BPE = ["--bpe-merges", "60"]


@dataclass
class Sample:
    module: str
    write: Callable[[str], object]
    flags: List[str]
    recipe: str


def _wmt14(raw):
    samples.write_wmt_corpora(raw, {"training/europarl-v7.de-en": "europarl", "commoncrawl.de-en": "commoncrawl",
                                    "training/news-commentary-v9.de-en": "nc"})
    samples.write_newstest2013(raw)
    samples.write_wmt_test(raw, "test-full", 2014, "deen")


def _wmt17(raw):
    samples.write_wmt_corpora(raw, {"training/europarl-v7.de-en": "europarl", "commoncrawl.de-en": "commoncrawl",
                                    "training/news-commentary-v12.de-en": "nc", "rapid2016.de-en": "rapid"})
    samples.write_wmt_test(raw, "dev", 2016, "ende")
    samples.write_wmt_test(raw, "test", 2017, "ende")


def _enwik8(raw):
    os.makedirs(raw, exist_ok=True)
    with open(os.path.join(raw, "enwik8"), "wb") as f:
        f.write(samples.enwik8_bytes(ENWIK8_SAMPLE_BYTES))


ENWIK8_SAMPLE_BYTES = 20_000
SAMPLES: Dict[str, Sample] = {
    "iwslt14_de_en": Sample("data_prep.iwslt14", samples.write_iwslt14, TINY_BPE, "iwslt14_de_en"),
    "wmt14_en_de": Sample("data_prep.wmt14_en_de", _wmt14, TINY_BPE, "wmt14_en_de"),
    "wmt17_en_de": Sample("data_prep.wmt17_en_de", _wmt17, TINY_BPE, "wmt17_en_de"),
    "multi30k": Sample("data_prep.multi30k", samples.write_multi30k, TINY_BPE, "multi30k"),
    "wikitext103": Sample("data_prep.wikitext103", lambda raw: samples.write_wikitext(raw, "103"), [], "wikitext103"),
    "wikitext2": Sample("data_prep.wikitext2", lambda raw: samples.write_wikitext(raw, "2"), [], "wikitext2"),
    "enwik8": Sample("data_prep.enwik8", _enwik8, [], "enwik8"),
}


@dataclass
class Prepared:
    root: str
    raw_dir: str
    work_dir: str
    dest: str
    argv: List[str]


_cache: Dict[str, Prepared] = {}


def arguments(name: str, root: str) -> List[str]:
    raw, work, dest = (os.path.join(root, part) for part in ("raw", "work", "data-bin"))
    return ["--dest", dest, "--work-dir", work, "--raw-dir", raw, "--workers", "1", "--no-download", *SAMPLES[name].flags]


def run_main(name: str, argv: List[str]):
    """The dataset's ``main`` in this process (enwik8 with the sample's size as the release size)."""
    module = importlib.import_module(SAMPLES[name].module)
    if name == "enwik8":
        module.ENWIK8_BYTES, saved = ENWIK8_SAMPLE_BYTES, module.ENWIK8_BYTES
        try:
            return module.main(argv)
        finally:
            module.ENWIK8_BYTES = saved
    return module.main(argv)


def prepared(name: str, tmp_path_factory) -> Prepared:
    if name not in _cache:
        root = str(tmp_path_factory.mktemp(name))
        SAMPLES[name].write(os.path.join(root, "raw"))
        argv = arguments(name, root)
        run_main(name, argv)
        _cache[name] = Prepared(root, os.path.join(root, "raw"), os.path.join(root, "work"), os.path.join(root, "data-bin"), argv)
    return _cache[name]


@pytest.fixture(scope="session")
def prepare_sample(tmp_path_factory):
    """prepare_sample(name) -> Prepared: that dataset's sample, prepared once per session."""
    return lambda name: prepared(name, tmp_path_factory)
