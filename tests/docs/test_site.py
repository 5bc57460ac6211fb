"""The documentation: the site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``, which fails on any
link to a missing page or anchor; README.md (read on GitHub, outside the site) links only to files and
headings that exist, and stays a ten-minute read."""
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README_LIMIT_BYTES = 20_000
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def mkdocs_build(config, site_dir):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], capture_output=True, text=True, env=env, cwd=ROOT)


def test_the_site_builds_strictly(tmp_path):
    result = mkdocs_build(os.path.join(ROOT, "mkdocs.yml"), tmp_path / "site")
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and not warnings, result.stderr[-4000:]
    assert (tmp_path / "site" / "own-data" / "index.html").is_file()
    assert (tmp_path / "site" / "records" / "index.html").is_file()


def test_a_broken_anchor_or_link_fails_the_build(tmp_path):
    """The project's validation settings on a two-page site: a missing anchor, then a missing page, fail."""
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        config = yaml.safe_load(f)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n## Present\n\nSee [the guide](guide.md#present).\n")
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}, {"Guide": "guide.md"}], theme={"name": "mkdocs"})
    config.pop("markdown_extensions", None)
    for target, expected in (("index.md#absent", "does not contain an anchor"), ("missing.md", "not found")):
        (docs / "guide.md").write_text(f"# Guide\n\n## Present\n\nBack to [home]({target}).\n")
        path = tmp_path / "mkdocs.yml"
        path.write_text(yaml.safe_dump(config))
        result = mkdocs_build(path, tmp_path / "site")
        assert result.returncode != 0 and expected in result.stderr, result.stderr[-2000:]


def github_anchor(heading):
    """The id GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[`*]", "", heading.strip().lower())  # markup, not text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors_of(path):
    anchors, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"#{1,6} ", line):
                anchors.add(github_anchor(line.lstrip("#")))
    return anchors


def test_readme_links_and_size():
    path = os.path.join(ROOT, "README.md")
    assert os.path.getsize(path) <= README_LIMIT_BYTES, "README.md: keep it a ten-minute read; move detail to docs/"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        file_path = os.path.join(ROOT, file) if file else path
        if not os.path.exists(file_path):
            broken.append(target)
        elif anchor and anchor not in anchors_of(file_path):
            broken.append(target)
    assert not broken, f"README.md links to missing files or headings: {broken}"


def test_github_anchors():
    assert github_anchor("Forward + backward time (median)") == "forward--backward-time-median"
    assert github_anchor("Grimm's fairy tales, words") == "grimms-fairy-tales-words"
    assert github_anchor("Adding an attention kind") == "adding-an-attention-kind"
    assert github_anchor("The supernet: `mixed_supertransformer`") == "the-supernet-mixed_supertransformer"
