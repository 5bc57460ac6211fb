"""Bad settings of the recipes are one ``error:`` line naming the variable (exit 2) before anything runs,
never a bash arithmetic error or a ZeroDivisionError; a finished training is not trained again."""
import os
import subprocess
import sys

import pytest
import torch

from prepared import ROOT_DIR

RECIPES = os.path.join(ROOT_DIR, "recipes")


def train(tmp_path, dataset="iwslt14_de_en", *args, **variables):
    env = dict(os.environ, PYTHON=sys.executable, NUM_GPUS="0", DATA_BIN=str(tmp_path / "data"),
               SAVE_DIR=str(tmp_path / "save"), **variables)
    return subprocess.run(["bash", os.path.join(RECIPES, dataset, "train.sh"), *args], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path))


@pytest.mark.parametrize("dataset, variables, message", [
    ("iwslt14_de_en", {"MAX_TOKENS": "0"}, "MAX_TOKENS=0: expected a whole number of at least 1"),
    ("iwslt14_de_en", {"MAX_TOKENS": "4k"}, "MAX_TOKENS=4k: expected a whole number of at least 1"),
    ("iwslt14_de_en", {"UPDATE_FREQ": "0"}, "UPDATE_FREQ=0: expected a whole number of at least 1"),
    ("iwslt14_de_en", {"MAX_UPDATE": "08"}, "MAX_UPDATE=08: expected a whole number of at least 1"),
    ("iwslt14_de_en", {"CPU_PROCS": "two"}, "CPU_PROCS=two: expected a whole number of at least 1"),
    ("iwslt14_de_en", {"SAVE_INTERVAL_UPDATES": "-5"}, "SAVE_INTERVAL_UPDATES=-5: expected a whole number of at least 0"),
    ("wikitext103", {"TOKENS_PER_SAMPLE": "512", "CONTEXT_WINDOW": "512"},
     "CONTEXT_WINDOW=512: expected less than TOKENS_PER_SAMPLE=512 (fairseq-eval-lm scores TOKENS_PER_SAMPLE - "
     "CONTEXT_WINDOW tokens per block)"),
])
def test_bad_numeric_settings_are_one_line_naming_the_variable(tmp_path, dataset, variables, message):
    result = train(tmp_path, dataset, **variables, DRY_RUN="1")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {message}"]
    assert result.stdout == "" and not (tmp_path / "save").exists()


def test_a_finished_training_is_not_trained_again(tmp_path):
    (tmp_path / "save").mkdir()
    last = tmp_path / "save" / "checkpoint_last.pt"
    torch.save({"model": {}, "optimizer_history": [{"num_updates": 5}]}, str(last))
    before = last.read_bytes()
    result = train(tmp_path, MAX_UPDATE="5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"[recipe] {last} is at update 5, MAX_UPDATE=5: this training is finished, nothing to do (raise MAX_UPDATE "
            "to train on, or give another SAVE_DIR)") in result.stderr
    assert last.read_bytes() == before and sorted(os.listdir(tmp_path / "save")) == ["checkpoint_last.pt"]
    # a larger budget trains on (fairseq-train starts: here it fails on the missing data, which says so)
    result = train(tmp_path, MAX_UPDATE="6")
    assert "this training is finished" not in result.stderr and result.returncode != 0


@pytest.mark.parametrize("size", [None, 0], ids=["missing", "empty"])
def test_evaluating_an_empty_split_is_refused(tmp_path, size):
    (tmp_path / "data").mkdir()
    if size is not None:
        (tmp_path / "data" / "test.bin").write_bytes(b"")
    result = subprocess.run(["bash", os.path.join(RECIPES, "wikitext103", "evaluate.sh")], capture_output=True, text=True,
                            cwd=str(tmp_path), env=dict(os.environ, PYTHON=sys.executable, NUM_GPUS="0",
                                                        DATA_BIN=str(tmp_path / "data"), SAVE_DIR=str(tmp_path / "save")))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'data' / 'test.bin'} is missing or empty: the test split has no tokens to evaluate (SUBSETS=test)"]
    assert not (tmp_path / "save").exists()
