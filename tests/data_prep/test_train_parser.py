"""data_prep/train_parser.sh: a spaCy parser trained offline on a small CoNLL-U
treebank the test writes (a toy grammar with known trees), its scores, a
no-op rerun, resuming a run interrupted after training, and clear errors.

The toy treebank and ``small_parser`` live in toy_treebank.py."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from toy_treebank import ROOT, SCRIPT, STEPS, run_script, small_parser, treebank, write_conllu  # noqa: E402,F401


@pytest.fixture(scope="module")
def parser_dir(tmp_path_factory):
    return small_parser(tmp_path_factory)


def test_toy_treebank_is_valid_conllu(tmp_path):
    path = write_conllu(tmp_path / "t.conllu", 30, seed=5)
    for block in path.read_text().strip().split("\n\n"):
        rows = [line.split("\t") for line in block.splitlines() if not line.startswith("#")]
        heads = [int(r[6]) for r in rows]
        assert heads.count(0) == 1
        assert all(0 <= h <= len(rows) and h != i for i, h in enumerate(heads, 1))
        for i in range(1, len(rows) + 1):  # every word reaches the root
            seen, current = set(), i
            while current:
                assert current not in seen
                seen.add(current)
                current = heads[current - 1]


def test_trains_a_loadable_parser_and_stores_uas(parser_dir):
    import spacy

    assert sorted(os.listdir(parser_dir)) == ["config.cfg", "metrics.json", "model-best", "model-last",
                                              "signature.txt", "train.log"]
    assert not Path(str(parser_dir) + ".partial").exists()
    metrics = json.loads((parser_dir / "metrics.json").read_text())
    assert metrics["steps"] == STEPS
    assert metrics["train_seconds"] >= 0
    for model in ("model-best", "model-last"):
        assert set(metrics["scores"][model]) == {"dev", "test0"}
        for name, scores in metrics["scores"][model].items():
            assert 0 <= scores["las"] <= scores["uas"] <= 100
            assert scores["file"].endswith(f"{'dev' if name == 'dev' else 'test'}.conllu")
    assert "DEP_UAS" in (parser_dir / "train.log").read_text()
    nlp = spacy.load(parser_dir / "model-best")
    assert nlp.pipe_names == ["tok2vec", "parser"]
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words="the big dog saw a cat .".split()))
    assert len(doc) == 7 and sum(token.head.i == token.i for token in doc) >= 1


def test_rerun_is_a_noop_and_other_settings_are_refused(parser_dir):
    root = parser_dir.parent
    before = {p: p.stat().st_mtime_ns for p in parser_dir.rglob("*")}
    result = run_script(root / "train.conllu", root / "dev.conllu", parser_dir, "--max-steps", STEPS,
                        "--eval-frequency", 10, "--test", root / "test.conllu")
    assert "up to date" in result.stderr
    assert "model-best on dev: UAS" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in parser_dir.rglob("*")} == before
    result = run_script(root / "train.conllu", root / "dev.conllu", parser_dir, "--max-steps", STEPS + 1, check=False)
    assert result.returncode == 2
    assert "trained from other files or settings" in result.stderr


def test_resumes_after_training(parser_dir, tmp_path):
    """A run stopped after training (OUTPUT_DIR.partial with the models) converts and evaluates only."""
    root = parser_dir.parent
    output = tmp_path / "resumed"
    partial = tmp_path / "resumed.partial"
    partial.mkdir()
    shutil.copy(parser_dir / "signature.txt", partial / "signature.txt")
    for model in ("model-best", "model-last"):
        shutil.copytree(parser_dir / model, partial / model)
    (partial / "training.done").write_text("7\n")
    (partial / "train.log").write_text("from the interrupted run\n")
    result = run_script(root / "train.conllu", root / "dev.conllu", output, "--max-steps", STEPS,
                        "--eval-frequency", 10, "--test", root / "test.conllu")
    assert "training: done before" in result.stderr
    assert "spacy train:" not in result.stderr
    assert not partial.exists()
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["train_seconds"] == 7
    assert metrics["scores"] == json.loads((parser_dir / "metrics.json").read_text())["scores"]


def test_a_partial_run_with_other_settings_starts_over(tmp_path):
    partial = tmp_path / "out.partial"
    partial.mkdir()
    (partial / "signature.txt").write_text("something else\n")
    (partial / "training.done").write_text("1\n")
    train = write_conllu(tmp_path / "train.conllu", 3, seed=1)
    bad_config = tmp_path / "bad.cfg"
    bad_config.write_text("[nlp]\nlang = ${paths.nothing}\n")  # stops the run at spacy train, after the cleanup
    result = run_script(train, train, tmp_path / "out", "--config", bad_config, check=False)
    assert "starting over" in result.stderr
    assert "training: done before" not in result.stderr
    assert result.returncode == 2 and "spacy train failed" in result.stderr
    assert not (partial / "training.done").exists() and (partial / "corpus" / "train.spacy").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["missing_train", "missing_dev", "empty_train", "missing_test", "bad_steps",
                                  "unknown_option", "too_few_arguments", "no_spacy", "output_exists"])
def test_clear_errors(tmp_path, case):
    train = write_conllu(tmp_path / "train.conllu", 3, seed=1)
    dev = write_conllu(tmp_path / "dev.conllu", 3, seed=2)
    out = tmp_path / "out"
    args, python, expected = [train, dev, out], sys.executable, None
    if case == "missing_train":
        args[0], expected = tmp_path / "nope.conllu", f"CoNLL-U file {tmp_path / 'nope.conllu'} not found"
    elif case == "missing_dev":
        args[1], expected = tmp_path / "nope.conllu", f"CoNLL-U file {tmp_path / 'nope.conllu'} not found"
    elif case == "empty_train":
        (tmp_path / "empty.conllu").write_text("")
        args[0], expected = tmp_path / "empty.conllu", "is empty"
    elif case == "missing_test":
        args += ["--test", tmp_path / "t.conllu"]
        expected = f"CoNLL-U file {tmp_path / 't.conllu'} not found"
    elif case == "bad_steps":
        args += ["--max-steps", "many"]
        expected = "--max-steps must be a non-negative integer"
    elif case == "unknown_option":
        args += ["--epochs", "3"]
        expected = "unknown option --epochs"
    elif case == "too_few_arguments":
        args, expected = [train, dev], "expected TRAIN.conllu DEV.conllu OUTPUT_DIR"
    elif case == "no_spacy":
        python, expected = shutil.which("false"), "cannot import spacy"
    elif case == "output_exists":
        out.mkdir()
        expected = "is not a finished train_parser.sh output"
    result = run_script(*args, python=python, check=False)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert not Path(str(out) + ".partial").exists()
