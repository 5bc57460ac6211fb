"""LICENSE, CITATION.cff and the README's BibTeX block say the same thing: MIT,
and the same five references (fairseq and the four papers) with the same
arXiv identifiers."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_is_valid_cff_with_the_five_references():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["authors"]
    assert cff["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")
    titles = [ref["title"] for ref in cff["references"]]
    assert titles == [
        "fairseq: A Fast, Extensible Toolkit for Sequence Modeling",
        "cosFormer: Rethinking Softmax in Attention",
        "Neural Architecture Search on Efficient Transformers and Beyond",
        "Attention Is Not All You Need Anymore",
        "Bird-Eye Transformers for Text Generation Models",
    ]
    for ref in cff["references"]:
        assert ref["authors"] and ref["year"] in (2019, 2022, 2023), ref["title"]


def test_readme_bibtex_matches_the_citation_file():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bibtex = readme.split("```bibtex\n", 1)[1].split("```", 1)[0]
    entries = re.findall(r"@\w+\{(\w+),(.*?)\n\}", bibtex, flags=re.S)
    assert len(entries) == len(cff["references"])
    for (key, body), ref in zip(entries, cff["references"]):
        assert re.search(r"title\s*=\s*\{" + re.escape(ref["title"]) + r"\}", body), key
        assert re.search(r"year\s*=\s*\{" + str(ref["year"]) + r"\}", body), key
        family_names = [a["family-names"] for a in ref["authors"]]
        assert re.search(r"author\s*=\s*\{(.*?)\}", body).group(1).split(" and ")[-1].endswith(family_names[-1]), key
        for identifier in ref.get("identifiers", []):
            arxiv = identifier["value"].removeprefix("arXiv:")
            if ref["type"] == "article":  # preprints: the BibTeX names the same arXiv number
                assert arxiv in body, key
