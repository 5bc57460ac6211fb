"""BET(SG) syntax hints: the rule on hand-built trees with known answers (word
level, subword-nmt and sentencepiece subwords, end of sentence), spaCy ``Doc``
objects with known heads through the tool's own code path, the tool end to end
with a parser trained by data_prep/train_parser.sh (n + 1 values per line,
resuming, reruns as no-ops), and its errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.vocab import Vocab

from data_prep import syntax_hints as tool
from data_prep.common import PrepError
from fairseq_plugins.data.syntax_hints import (
    HintDataError,
    hint_distances,
    hint_positions,
    left_ancestors,
    load_hint_dataset,
    sentence_hint_distances,
    subword_words,
)

ROOT = Path(__file__).resolve().parents[2]

# "She gave the old dog a bone ."   She<-gave, gave = root, the<-dog, old<-dog, dog<-gave, a<-bone, bone<-gave, .<-gave
GAVE_WORDS = "She gave the old dog a bone .".split()
GAVE_HEADS = [1, 1, 4, 4, 1, 6, 1, 1]
# Left ancestors: She: parent 'gave' is to its right and the root -> none; gave: root -> none;
# the/old: parent 'dog' is to the right, grandparent 'gave' (1) to the left -> 1; dog, bone, '.': parent 'gave' -> 1;
# a: parent 'bone' to the right, then 'gave' -> 1.
GAVE_ANCESTORS = [-1, -1, 1, 1, 1, 1, 1, 1]
# Word level, target index t with its hint at s = 1 ('gave'): d_t = t - (s + 1) = t - 2.
GAVE_DISTANCES = [0, 0, 0, 1, 2, 3, 4, 5, 0]
# The same sentence in subwords: 'gave', 'old' and 'bone' split in two; the hint is the LAST subword of 'gave' (index 2).
GAVE_SUBWORD_NMT = "She ga@@ ve the ol@@ d dog a bo@@ ne ."
GAVE_SENTENCEPIECE = "\u2581She \u2581ga ve \u2581the \u2581ol d \u2581dog \u2581a \u2581bo ne \u2581."
GAVE_SUBWORD_OF = [0, 1, 1, 2, 3, 3, 4, 5, 6, 6, 7]
GAVE_SUBWORD_DISTANCES = [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 0]  # t - 3 from t = 3 on, then the end of sentence


# ------------------------------------------------------------ the rule ---
@pytest.mark.parametrize("heads, expected", [
    ([0], [-1]),                                    # a lone root
    ([1, 1], [-1, -1]),                             # a left dependent of the root: its ancestor is to its right
    ([0, 0, 0], [-1, 0, 0]),                        # right dependents of the root
    ([0, 2, 0], [-1, 0, 0]),                        # parent to the right (2), grandparent to the left (0)
    ([5, 3, 3, 4, 5, 5, 1], [-1, -1, -1, -1, -1, -1, 1]),  # chains to the right up to the root 5: none; 6's parent 1
    (GAVE_HEADS, GAVE_ANCESTORS),
    ([0, 0, 2, 2], [-1, 0, -1, 2]),                 # two trees (the parser split the line): each walk stays in its tree
    ([3, 3, 3, 3, 6, 6, 3], [-1, -1, -1, -1, 3, 3, 3]),  # 4, 5: parent 6 to the right, grandparent 3 (root) left
])
def test_left_ancestors(heads, expected):
    assert left_ancestors(heads) == expected


def test_left_ancestor_is_the_nearest_one_to_the_left():
    # word 3's parent 4 (right), 4's parent 2 (left), 2's parent 0 (the root, left):
    # the walk stops at 2, the first ancestor left of 3, not at the root.
    heads = [0, 0, 0, 4, 2]
    assert left_ancestors(heads) == [-1, 0, 0, 2, 2]


@pytest.mark.parametrize("heads, message", [([0, 5], "outside the sentence"), ([1, 0], "cycle"),
                                            ([-1], "outside the sentence"), ([2, 0, 1], "cycle")])
def test_bad_heads(heads, message):
    with pytest.raises(HintDataError, match=message):
        left_ancestors(heads)


def test_word_level_distances():
    word_of = list(range(len(GAVE_WORDS)))
    assert hint_positions(word_of, GAVE_HEADS) == [-1, -1, 1, 1, 1, 1, 1, 1]
    assert hint_distances(word_of, GAVE_HEADS) == GAVE_DISTANCES
    assert sentence_hint_distances(GAVE_WORDS, GAVE_HEADS, "none") == GAVE_DISTANCES


def test_row_arithmetic():
    """d_t = t - (s + 1): the hint subword s is the input of row s + 1; a parent right before t gives 0."""
    # "a b c": c's parent is b (index 1), b's parent a (0), a = root.
    assert hint_positions([0, 1, 2], [0, 0, 1]) == [-1, 0, 1]
    assert hint_distances([0, 1, 2], [0, 0, 1]) == [0, 0, 0, 0]
    # "a b c d", d's parent a: row 3 points back 3 - (0 + 1) = 2 rows, to row 1 whose input is a.
    assert hint_distances([0, 1, 2, 3], [0, 0, 0, 0]) == [0, 0, 1, 2, 0]


@pytest.mark.parametrize("line, bpe", [(GAVE_SUBWORD_NMT, "subword-nmt"), (GAVE_SENTENCEPIECE, "sentencepiece")])
def test_subword_distances(line, bpe):
    words, word_of = subword_words(line.split(), bpe)
    assert words == GAVE_WORDS
    assert word_of == GAVE_SUBWORD_OF
    # every subword of a word shares its word's hint, the last subword of the ancestor (target index 2, 've')
    assert hint_positions(word_of, GAVE_HEADS) == [-1, -1, -1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert sentence_hint_distances(line.split(), GAVE_HEADS, bpe) == GAVE_SUBWORD_DISTANCES


def test_hint_word_split_in_three_and_first_subword_without_marker():
    # "un@@ be@@ lievable story": story's parent is the 3-subword word 0 -> hint at its last subword (index 2)
    assert sentence_hint_distances("un@@ be@@ lievable story".split(), [0, 0], "subword-nmt") == [0, 0, 0, 0, 0]
    assert hint_positions([0, 0, 0, 1], [0, 0]) == [-1, -1, -1, 2]
    # "x story tale": tale's parent 0 (3 subwords, last at 2): d_4 = 4 - 3 = 1
    assert sentence_hint_distances("un@@ be@@ lievable story tale".split(), [0, 0, 0], "subword-nmt") == [0, 0, 0, 0, 1, 0]
    # sentencepiece: a first piece without the marker starts the first word; a bare marker joins the next piece
    assert subword_words(["ab", "c", "\u2581", "(", "\u2581d"], "sentencepiece") == (["abc", "(", "d"], [0, 0, 1, 1, 2])
    assert subword_words(["\u2581a", "\u2581"], "sentencepiece") == (["a", "\u2581"], [0, 1])


def test_end_of_sentence_and_empty_line():
    assert hint_distances([], []) == [0]
    assert sentence_hint_distances([], [], "subword-nmt") == [0]
    assert sentence_hint_distances(["a"], [0], "none") == [0, 0]


def test_subword_errors():
    with pytest.raises(HintDataError, match="ends in '@@'"):
        subword_words(["the", "ca@@"], "subword-nmt")
    with pytest.raises(ValueError, match="bpe must be one of"):
        subword_words(["a"], "wordpiece")
    with pytest.raises(HintDataError, match="2 heads for 3 words"):
        sentence_hint_distances("a b c".split(), [0, 0], "none")
    with pytest.raises(HintDataError, match="do not cover words"):
        hint_positions([0, 2], [0, 0, 0])


# ------------------------------------------------------ spaCy documents ---
DEPS = ["nsubj", "ROOT", "det", "amod", "obj", "det", "obl", "punct"]


@pytest.mark.parametrize("line, bpe", [(" ".join(GAVE_WORDS), "none"), (GAVE_SUBWORD_NMT, "subword-nmt"),
                                       (GAVE_SENTENCEPIECE, "sentencepiece")])
def test_doc_with_known_heads(line, bpe):
    """A parsed Doc (here: built with the heads) gives the hints by the code the tool runs after parsing."""
    words, word_of = tool.line_words(tool.tokenize(line), bpe, 1)
    doc = Doc(Vocab(), words=words, heads=GAVE_HEADS, deps=DEPS)
    expected = GAVE_DISTANCES if bpe == "none" else GAVE_SUBWORD_DISTANCES
    assert tool.doc_hint_distances(doc, words, word_of) == expected


def test_doc_errors():
    doc = Doc(Vocab(), words=["a", "b"], heads=[0, 0], deps=["ROOT", "dep"])
    with pytest.raises(PrepError, match="changed the words"):
        tool.doc_heads(doc, ["a", "b", "c"])
    with pytest.raises(PrepError, match="without a dependency parse"):
        tool.doc_heads(Doc(Vocab(), words=["a", "b"]), ["a", "b"])


KNOWN = {tuple(GAVE_WORDS): GAVE_HEADS, ("I", "saw", "her"): [1, 1, 1], ("yes",): [0]}


@Language.component("test_known_heads")
def known_heads(doc):
    """Stands in for a parser: the heads of KNOWN (a new Doc, as a retokenising component would return)."""
    words = [token.text for token in doc]
    return Doc(doc.vocab, words=words, heads=KNOWN[tuple(words)], deps=["dep"] * len(words))


@Language.component("test_merge_first_two")
def merge_first_two(doc):
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    return doc


@pytest.mark.parametrize("n_process", [1, 2])
def test_parse_lines_through_nlp_pipe(n_process):
    nlp = spacy.blank("en")
    nlp.add_pipe("test_known_heads")
    lines = [GAVE_SUBWORD_NMT + "\n", "I saw her\n", "\n", "yes\n", "  I   s@@ aw  her \n", GAVE_SUBWORD_NMT]
    got = list(tool.parse_lines(nlp, lines, "subword-nmt", batch_size=2, n_process=n_process))
    # 'her' (target index 3) points at the last subword of 'saw' (index 2): 3 - (2 + 1) = 0
    assert got == [GAVE_SUBWORD_DISTANCES, [0, 0, 0, 0], [0], [0, 0], [0, 0, 0, 0, 0], GAVE_SUBWORD_DISTANCES]


def test_parse_lines_errors():
    nlp = spacy.blank("en")
    nlp.add_pipe("test_merge_first_two")
    with pytest.raises(PrepError, match="changed the words"):
        list(tool.parse_lines(nlp, ["I saw her"], "none"))
    with pytest.raises(PrepError, match="line 7: token 'ca@@' carries a subword-nmt marker but --bpe is none"):
        list(tool.parse_lines(nlp, ["the ca@@ t"], "none", first_line=7))
    with pytest.raises(PrepError, match="line 2: .*--bpe sentencepiece"):
        list(tool.parse_lines(nlp, ["x", "\u2581the cat"], "none"))
    with pytest.raises(PrepError, match="line 1: subword-nmt: the last token"):
        list(tool.parse_lines(nlp, ["the ca@@"], "subword-nmt"))


# ------------------------------------------------------------- models ---
def test_missing_model_names_the_install_command(tmp_path):
    with pytest.raises(PrepError) as error:
        tool.load_parser("xx_not_installed_sm")
    assert "is neither an installed spaCy package nor a folder" in str(error.value)
    assert "python -m spacy download xx_not_installed_sm" in str(error.value)
    assert "data_prep/train_parser.sh" in str(error.value)
    with pytest.raises(PrepError) as error:
        tool.load_parser(str(tmp_path / "no_such_folder"))
    assert f"--spacy-model {tmp_path / 'no_such_folder'}: no such folder" in str(error.value)
    assert "python -m spacy download NAME" in str(error.value)
    assert "data_prep/train_parser.sh" in str(error.value)


def test_model_without_parser(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "no_parser")
    with pytest.raises(PrepError, match=r"has no dependency parser \(its pipeline: \['sentencizer'\]\)"):
        tool.load_parser(str(tmp_path / "no_parser"))


def test_training_output_folder_is_not_the_model(tmp_path):
    (tmp_path / "out" / "model-best").mkdir(parents=True)
    with pytest.raises(PrepError, match="did you mean .*model-best"):
        tool.load_parser(str(tmp_path / "out"))


# --------------------------------------------------- the tool, end to end ---
def bpe_line(words, bpe):
    """Splits words of 5+ letters in two, in the given subword style."""
    tokens = []
    for word in words:
        if len(word) >= 5:
            head, tail = word[:3], word[3:]
            tokens += [head + "@@", tail] if bpe == "subword-nmt" else ["\u2581" + head, tail]
        else:
            tokens.append(word if bpe == "subword-nmt" else "\u2581" + word)
    return " ".join(tokens)


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory):
    from toy_treebank import small_parser

    return small_parser(tmp_path_factory) / "model-best"


@pytest.fixture(scope="module")
def toy_sentences(toy_model):
    conllu = (toy_model.parent.parent / "dev.conllu").read_text()
    return [[row.split("\t")[1] for row in block.splitlines() if not row.startswith("#")]
            for block in conllu.strip().split("\n\n")]


def expected_hints(model, lines, bpe):
    """What the trained parser says, computed here without the tool: parse the words, apply the rule."""
    nlp = spacy.load(model)
    result = []
    for line in lines:
        tokens = line.split()
        words, word_of = subword_words(tokens, bpe)
        if not words:
            result.append([0])
            continue
        doc = nlp(Doc(nlp.vocab, words=words))
        result.append(hint_distances(word_of, [token.head.i for token in doc]))
    return result


def read_dataset(prefix):
    hints = load_hint_dataset(str(prefix))
    return [hints[i].tolist() for i in range(len(hints))]


@pytest.mark.parametrize("bpe", ["subword-nmt", "sentencepiece"])
def test_tool_end_to_end(tmp_path, toy_model, toy_sentences, monkeypatch, bpe):
    lines = [bpe_line(words, bpe) for words in toy_sentences]
    lines.insert(3, "")  # an empty line: only the end-of-sentence value
    text = tmp_path / "train.en"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefix = tmp_path / "data-bin" / "train.de-en.en.hints"
    argv = ["--input", str(text), "--output", str(prefix), "--spacy-model", str(toy_model), "--bpe", bpe,
            "--shard-lines", "4", "--batch-size", "1", "--text-dump", str(tmp_path / "hints.txt")]
    # (--batch-size 1: the parse is then the same computation as nlp(doc) in expected_hints, bit for bit;
    # batching and order through nlp.pipe are tested with known heads above)
    assert tool.main(argv) == str(prefix)

    hints = read_dataset(prefix)
    assert [len(h) for h in hints] == [len(line.split()) + 1 for line in lines]
    assert hints[3] == [0]
    assert all(h[-1] == 0 and min(h) >= 0 for h in hints)
    assert hints == expected_hints(toy_model, lines, bpe)
    assert (tmp_path / "hints.txt").read_text().splitlines() == [" ".join(map(str, h)) for h in hints]
    info = json.loads(Path(str(prefix) + ".info.json").read_text())
    assert info["fingerprint"]["bpe"] == bpe and info["summary"]["sentences"] == len(lines)
    assert info["summary"]["tokens"] == sum(len(line.split()) for line in lines)
    assert not Path(str(prefix) + ".work").exists()

    # A rerun is a no-op: nothing parsed, nothing rewritten.
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    calls = []
    monkeypatch.setattr(tool, "load_parser", lambda *a: calls.append(a))
    tool.main(argv)
    assert calls == []
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_interrupted_run_resumes_from_its_shards(tmp_path, toy_model, toy_sentences, monkeypatch, capsys):
    lines = [" ".join(words) for words in toy_sentences[:10]]
    text = tmp_path / "valid.txt"
    text.write_text("\n".join(lines) + "\n")
    prefix = tmp_path / "valid.hints"
    argv = ["--input", str(text), "--output", str(prefix), "--spacy-model", str(toy_model), "--shard-lines", "3"]
    original, parsed = tool.parse_lines, []

    def parse_then_fail(nlp, shard, bpe, first_line, *args):
        if len(parsed) == 2:
            raise KeyboardInterrupt  # killed while parsing the third shard
        parsed.append(first_line)
        return original(nlp, shard, bpe, first_line, *args)

    monkeypatch.setattr(tool, "parse_lines", parse_then_fail)
    with pytest.raises(KeyboardInterrupt):
        tool.main(argv)
    assert not Path(str(prefix) + ".bin").exists() and not Path(str(prefix) + ".info.json").exists()
    work = Path(str(prefix) + ".work")
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("shard")) == [
        "shard-00000.bin", "shard-00000.idx", "shard-00001.bin", "shard-00001.idx"]

    parsed.clear()
    monkeypatch.setattr(tool, "parse_lines", lambda nlp, shard, bpe, first_line, *a: parsed.append(first_line)
                        or original(nlp, shard, bpe, first_line, *a))
    capsys.readouterr()
    tool.main(argv)
    assert parsed == [7, 10]  # shards 3 and 4 (lines 7-9 and 10) only
    assert "2 done before, 2 to parse" in capsys.readouterr().err
    assert read_dataset(prefix) == expected_hints(toy_model, lines, "none")
    assert not work.exists()


def test_a_text_dump_that_is_not_the_dump_of_these_hints_is_written_again(tmp_path, monkeypatch, capsys):
    """The hints are up to date and not parsed again, but an existing --text-dump FILE is kept only when it is their
    dump (the sha256 in info.json): one of another split, or edited since, is written again and the log says so."""
    def fake_parse(nlp, lines, bpe, first_line, *args):  # a parser that is not what this test is about
        for line in lines:
            yield list(range(len(line.split()), -1, -1))

    monkeypatch.setattr(tool, "model_fingerprint", lambda model: "fake")
    monkeypatch.setattr(tool, "load_parser", lambda model: None)
    monkeypatch.setattr(tool, "parse_lines", fake_parse)
    dumps = {}
    for split, text in (("train", "a b c\nd e\n"), ("valid", "f\n")):
        (tmp_path / f"{split}.txt").write_text(text)
        dumps[split] = tmp_path / f"{split}.hints.txt"
        tool.main(["--input", str(tmp_path / f"{split}.txt"), "--output", str(tmp_path / f"{split}.hints"),
                   "--spacy-model", "fake", "--text-dump", str(dumps[split])])
    assert dumps["train"].read_text() == "3 2 1 0\n2 1 0\n" and dumps["valid"].read_text() == "1 0\n"
    train = ["--input", str(tmp_path / "train.txt"), "--output", str(tmp_path / "train.hints"), "--spacy-model", "fake",
             "--text-dump"]
    monkeypatch.setattr(tool, "parse_lines", None)  # up to date: nothing is parsed again
    capsys.readouterr()

    tool.main(train + [str(dumps["valid"])])  # the dump of another split at that path
    assert dumps["valid"].read_text() == "3 2 1 0\n2 1 0\n"
    assert f"text dump {dumps['valid']}: not the dump of {tmp_path / 'train.hints'}.bin/.idx; writing it again" in (
        capsys.readouterr().err)
    before = dumps["valid"].stat().st_mtime_ns
    tool.main(train + [str(dumps["valid"])])  # now it is: kept
    assert dumps["valid"].stat().st_mtime_ns == before
    assert f"text dump {dumps['valid']}: up to date (the dump of these hints)" in capsys.readouterr().err

    dumps["train"].write_text("edited\n")
    tool.main(train + [str(dumps["train"])])
    assert dumps["train"].read_text() == "3 2 1 0\n2 1 0\n"
    fresh = tmp_path / "new.txt"  # a path with no file: written, as before
    tool.main(train + [str(fresh)])
    assert fresh.read_text() == "3 2 1 0\n2 1 0\n"


def test_changed_input_is_redone(tmp_path, toy_model, toy_sentences, capsys):
    text = tmp_path / "t.txt"
    text.write_text(" ".join(toy_sentences[0]) + "\n")
    prefix = tmp_path / "t.hints"
    argv = ["--input", str(text), "--output", str(prefix), "--spacy-model", str(toy_model)]
    tool.main(argv)
    text.write_text(" ".join(toy_sentences[0]) + "\n" + " ".join(toy_sentences[1]) + "\n")
    capsys.readouterr()
    tool.main(argv)
    assert "made from another input, model or --bpe; redoing it" in capsys.readouterr().err
    assert len(read_dataset(prefix)) == 2


def test_command_line_script(tmp_path, toy_model):
    """``python data_prep/syntax_hints.py`` (the script path, not -m) from another directory."""
    text = tmp_path / "test.en"
    text.write_text("the big dog saw a cat .\n\na man found the red house .\n")
    result = subprocess.run([sys.executable, str(ROOT / "data_prep" / "syntax_hints.py"), "--input", str(text),
                             "--output", str(tmp_path / "test.hints"), "--spacy-model", str(toy_model)],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "ready:" in result.stderr
    assert [len(h) for h in read_dataset(tmp_path / "test.hints")] == [8, 1, 8]
    result = subprocess.run([sys.executable, str(ROOT / "data_prep" / "syntax_hints.py"), "--input", str(text),
                             "--output", str(tmp_path / "other.hints"), "--spacy-model", "xx_missing_model"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2
    assert "error: --spacy-model 'xx_missing_model' is neither an installed spaCy package nor a folder" in result.stderr
    assert "python -m spacy download xx_missing_model" in result.stderr


@pytest.mark.parametrize("case", ["empty", "missing", "bad_shard_lines", "bpe_markers", "output_suffix"])
def test_tool_errors(tmp_path, toy_model, capsys, case):
    text = tmp_path / "in.txt"
    output, argv_extra, expected = tmp_path / "out.hints", [], None
    if case == "empty":
        text.write_text("")
        expected = f"--input {text} is empty"
    elif case == "missing":
        expected = f"--input {text} not found"
    elif case == "bad_shard_lines":
        text.write_text("a b\n")
        argv_extra, expected = ["--shard-lines", "0"], "--shard-lines must be >= 1, got 0"
    elif case == "bpe_markers":
        text.write_text("the dog\nthe ca@@ t\n")
        expected = "line 2: token 'ca@@' carries a subword-nmt marker but --bpe is none; pass --bpe subword-nmt"
    elif case == "output_suffix":
        text.write_text("a b\n")
        output = tmp_path / "out.hints.bin"
        expected = f"--output {output}: give the prefix, without .bin/.idx"
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--input", str(text), "--output", str(output), "--spacy-model", str(toy_model), *argv_extra])
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "out.hints.bin").exists() and not (tmp_path / "out.hints.info.json").exists()


def test_hints_that_never_point_past_the_previous_token_are_warned_about(tmp_path, toy_model, capsys):
    """One-word sentences have no left ancestor: every hint is the token itself, and BET(SG)
    would silently train as BET(SF); the tool says so (and does not for ordinary text)."""
    text = tmp_path / "valid.en"
    text.write_text("dogs\nbark\ncats\n", encoding="utf-8")
    prefix = tmp_path / "valid.hints"
    tool.main(["--input", str(text), "--output", str(prefix), "--spacy-model", str(toy_model)])
    err = capsys.readouterr().err
    assert " | WARNING | " in err and "no token's hint points further back than the previous token" in err
    assert json.loads(Path(str(prefix) + ".info.json").read_text())["summary"]["tokens_with_distance_above_0"] == 0


def test_ordinary_text_gives_no_warning(tmp_path, toy_model, toy_sentences, capsys):
    text = tmp_path / "train.en"
    text.write_text("\n".join(" ".join(words) for words in toy_sentences) + "\n", encoding="utf-8")
    tool.main(["--input", str(text), "--output", str(tmp_path / "train.hints"), "--spacy-model", str(toy_model)])
    assert "WARNING" not in capsys.readouterr().err
