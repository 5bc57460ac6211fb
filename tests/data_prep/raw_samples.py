"""Small samples in the real raw formats of each release, written by the tests
(never read from ../shared): IWSLT's XML-tagged TED files, WMT's plain
training corpora and SGML test sets, Multi30k's plain (and gzipped) lines,
WikiText's ``= Heading =`` layout and enwik8's raw XML bytes.

The parallel text is a word-for-word code between a German-like and an
English-like vocabulary with punctuation, apostrophes, quotes, hyphens and
umlauts, so Moses tokenisation, cleaning and BPE all have work to do."""
import gzip
import os
import random
from typing import Dict, List, Tuple

GERMAN = ["das", "Haus", "ist", "groß", "und", "die", "Straße", "führt", "über", "Brücke", "wir", "sehen", "einen",
          "Hund", "im", "Garten", "Kinder", "spielen", "gern", "Fußball", "heute", "Abend", "schön", "Wetter"]
ENGLISH = ["the", "house", "is", "big", "and", "the", "street", "leads", "over", "bridge", "we", "see", "a",
           "dog", "in-the", "garden", "children", "play", "gladly", "football", "today", "evening", "nice", "weather"]


def sentence_pair(rng: random.Random, min_len: int = 3, max_len: int = 9) -> Tuple[str, str]:
    words = [rng.randrange(len(GERMAN)) for _ in range(rng.randint(min_len, max_len))]
    de, en = [GERMAN[w] for w in words], [ENGLISH[w] for w in words]
    de[0], en[0] = de[0].capitalize(), en[0].capitalize()
    style = rng.randrange(5)
    if style == 0:
        return " ".join(de) + ", sagt \"Anna\".", " ".join(en) + ", says \"Anna\"."
    if style == 1:
        return " ".join(de) + "'s Test-Fall?", " ".join(en) + "'s test-case?"
    if style == 2:
        return " ".join(de) + " \u2019ja\u2019 !", " ".join(en) + " \u2019yes\u2019 !"
    return " ".join(de) + ".", " ".join(en) + "."


def pairs(count: int, seed: int) -> List[Tuple[str, str]]:
    rng = random.Random(seed)
    return [sentence_pair(rng) for _ in range(count)]


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


# ------------------------------------------------------------------ IWSLT ---
IWSLT_TEST_PARTS = ["IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
                    "IWSLT14.TED.tst2012"]


def write_iwslt14(raw_dir: str, train_pairs: int = 230, test_pairs: int = 8) -> Dict[str, List[Tuple[str, str]]]:
    """de-en/train.tags.de-en.{de,en} and the five XML dev/test files. Adds a
    pair too long (200 words) and one with a bad length ratio, which cleaning drops."""
    folder = os.path.join(raw_dir, "de-en")
    train = pairs(train_pairs, seed=1)
    train.insert(5, (" ".join(["lang"] * 200), " ".join(["long"] * 200)))
    train.insert(9, ("eins zwei drei vier fünf sechs sieben", "one"))
    for side, lang in ((0, "de"), (1, "en")):
        lines = []
        for talk in range(0, len(train), 60):
            lines += [f"<url>http://www.ted.com/talks/talk{talk}.html</url>", f"<keywords>talks, {lang}</keywords>",
                      f"<talkid>{talk}</talkid>", f"<title>Titel {talk} : talk {talk}</title>",
                      f"<description>Beschreibung {talk} ({lang})</description>"]
            lines += [p[side] for p in train[talk:talk + 60]]
        _write(os.path.join(folder, f"train.tags.de-en.{lang}"), "\n".join(lines) + "\n")
    tests = {}
    for i, part in enumerate(IWSLT_TEST_PARTS):
        tests[part] = pairs(test_pairs, seed=100 + i)
        for side, lang, tag in ((0, "de", "srcset"), (1, "en", "refset")):
            segs = "\n".join(f'<seg id="{j + 1}"> {p[side]} </seg>' for j, p in enumerate(tests[part]))
            _write(os.path.join(folder, f"{part}.de-en.{lang}.xml"),
                   f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<{tag} setid="iwslt2014" srclang="german">\n'
                   f'<doc docid="{i}" genre="lectures">\n<url>http://www.ted.com/talks/x.html</url>\n'
                   f"<description>TED Talk Subtitles and Transcript</description>\n<talkid>{i}</talkid>\n"
                   f"<title>Talk {i}</title>\n{segs}\n</doc>\n</{tag}>\n</mteval>\n")
    return {"train": train, **tests}


# -------------------------------------------------------------------- WMT ---
def write_sgm(path: str, sentences: List[str], setid: str, kind: str, lang: str) -> str:
    tag = "srcset" if kind == "src" else "refset"
    segs = "\n".join(f"<seg id=\"{i + 1}\">{s}</seg>" for i, s in enumerate(sentences))
    return _write(path, f'<{tag} setid="{setid}" srclang="any">\n<doc sysid="{kind}" docid="doc1" genre="news" '
                        f'origlang="{lang}">\n<p>\n{segs}\n</p>\n</doc>\n</{tag}>\n')


def write_wmt_corpora(raw_dir: str, corpora: Dict[str, str], size: int = 60) -> None:
    """corpora: file prefix (e.g. 'training/europarl-v7.de-en') -> folder below raw_dir."""
    for i, (prefix, folder) in enumerate(sorted(corpora.items())):
        data = pairs(size, seed=10 + i)
        _write(os.path.join(raw_dir, folder, prefix + ".de"), "".join(de + "\n" for de, _ in data))
        _write(os.path.join(raw_dir, folder, prefix + ".en"), "".join(en + "\n" for _, en in data))


def write_wmt_test(raw_dir: str, folder: str, year: int, pair: str, size: int = 10) -> List[Tuple[str, str]]:
    """newstest{year}-{pair}-src.en.sgm and -ref.de.sgm (English to German)."""
    data = pairs(size, seed=year)
    write_sgm(os.path.join(raw_dir, folder, f"newstest{year}-{pair}-src.en.sgm"), [en for _, en in data], f"newstest{year}", "src", "en")
    write_sgm(os.path.join(raw_dir, folder, f"newstest{year}-{pair}-ref.de.sgm"), [de for de, _ in data], f"newstest{year}", "ref", "de")
    return data


def write_newstest2013(raw_dir: str, size: int = 10) -> None:
    """sacreBLEU's wmt13 layout: test/newstest2013-src.{en,de}.sgm."""
    data = pairs(size, seed=2013)
    write_sgm(os.path.join(raw_dir, "test", "newstest2013-src.en.sgm"), [en for _, en in data], "newstest2013", "src", "en")
    write_sgm(os.path.join(raw_dir, "test", "newstest2013-src.de.sgm"), [de for de, _ in data], "newstest2013", "src", "de")


# --------------------------------------------------------------- Multi30k ---
def write_multi30k(raw_dir: str, train: int = 120, gzipped_extra: bool = True) -> None:
    """train/val/test_2016_flickr plain (as in ../shared), test_2017_flickr and
    test_2017_mscoco gzipped (as in the repository), test_2018_flickr plain (its
    German .gz has a published md5, which a made-up file cannot match)."""
    sets = {"train": train, "val": 10, "test_2016_flickr": 8}
    if gzipped_extra:
        sets.update({"test_2017_flickr": 6, "test_2018_flickr": 5, "test_2017_mscoco": 4})
    for i, (name, size) in enumerate(sets.items()):
        data = pairs(size, seed=300 + i)
        for side, lang in ((0, "de"), (1, "en")):
            text = "".join(p[side] + "\n" for p in data)
            if name in ("train", "val", "test_2016_flickr", "test_2018_flickr"):
                _write(os.path.join(raw_dir, f"{name}.{lang}"), text)
            else:
                with gzip.open(os.path.join(raw_dir, f"{name}.{lang}.gz"), "wt", encoding="utf-8") as f:
                    f.write(text)


# --------------------------------------------------------------- WikiText ---
def wikitext_article(rng: random.Random, title: str, paragraphs: int) -> str:
    words = ENGLISH + ["<unk>", "@-@", "@,@", "1", "000", ",", ".", "(", ")"]
    out = [" ", f" = {title} = ", " "]
    for p in range(paragraphs):
        if p and p % 2 == 0:
            out += [f" = = Section {p} = = ", " "]
        out.append(" " + " ".join(rng.choice(words) for _ in range(rng.randint(10, 30))) + " . ")
    return "\n".join(out) + "\n"


def write_wikitext(raw_dir: str, variant: str, articles: Dict[str, int] = None) -> Dict[str, str]:
    """wikitext-{103,2}/wiki.{train,valid,test}.tokens in the release's layout (leading spaces, headings, <unk>)."""
    articles = articles or {"train": 12, "valid": 2, "test": 2}
    rng = random.Random(7)
    texts = {}
    for split, count in articles.items():
        texts[split] = "".join(wikitext_article(rng, f"Article {split} {i}", 4) for i in range(count))
        _write(os.path.join(raw_dir, f"wikitext-{variant}", f"wiki.{split}.tokens"), texts[split])
    return texts


# ----------------------------------------------------------------- enwik8 ---
def enwik8_bytes(size: int) -> bytes:
    """Raw Wikipedia-XML-like bytes with multi-byte UTF-8 and blank lines."""
    rng = random.Random(8)
    chunks = [b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" version="0.3">\n']
    while sum(map(len, chunks)) < size:
        title = " ".join(rng.choice(ENGLISH) for _ in range(2))
        body = " ".join(rng.choice(GERMAN + ENGLISH) for _ in range(rng.randint(5, 40)))
        chunks.append(f"  <page>\n    <title>{title}</title>\n    <text xml:space=\"preserve\">'''{title}''' "
                      f"[[{body}]] &amp; caf\u00e9\n\n    </text>\n  </page>\n".encode("utf-8"))
    return b"".join(chunks)[:size]
