"""data_prep.text_files: a tokenised, already split word-level corpus."""
import json
import os

import pytest

from data_prep import text_files


def _corpus(folder, missing=()):
    folder.mkdir(parents=True, exist_ok=True)
    lines = {"train": ["the frog said hello .", "the king went to the castle ."], "valid": ["the frog went ."],
             "test": ["the king said hello ."]}
    for split, text in lines.items():
        if split not in missing:
            (folder / f"{split}.txt").write_text("\n".join(text) + "\n")


def _prepare(tmp_path, source):
    return text_files.main(["--input-dir", str(source), "--work-dir", str(tmp_path / "work"),
                            "--dest", str(tmp_path / "bin"), "--workers", "1"])


def test_binarises_words_with_the_train_dictionary_and_is_idempotent(tmp_path, capfd):
    _corpus(tmp_path / "raw")
    dest = _prepare(tmp_path, tmp_path / "raw")
    words = [line.split()[0] for line in open(os.path.join(dest, "dict.txt"), encoding="utf-8")
             if not line.startswith("madeupword")]  # fairseq pads the dictionary to a multiple of 8
    assert sorted(words) == sorted(["the", "frog", "said", "hello", ".", "king", "went", "to", "castle"])
    settings = json.load(open(os.path.join(dest, "prepare.json")))
    assert settings["unit"] == "word" and set(settings) >= {"sha256_train", "sha256_valid", "sha256_test"}
    for split in ("train", "valid", "test"):
        assert os.path.getsize(os.path.join(dest, f"{split}.bin")) > 0
    capfd.readouterr()
    _prepare(tmp_path, tmp_path / "raw")
    assert capfd.readouterr().err.count("up to date") == 2


def test_a_changed_input_is_prepared_again(tmp_path):
    _corpus(tmp_path / "raw")
    dest = _prepare(tmp_path, tmp_path / "raw")
    (tmp_path / "raw" / "train.txt").write_text("a b c wolf\n")
    _prepare(tmp_path, tmp_path / "raw")
    assert "wolf" in open(os.path.join(dest, "dict.txt"), encoding="utf-8").read()


def test_a_missing_split_is_a_clear_error(tmp_path, capsys):
    _corpus(tmp_path / "raw", missing=("valid",))
    with pytest.raises(SystemExit) as exit_info:
        _prepare(tmp_path, tmp_path / "raw")
    assert exit_info.value.code == 2
    assert "valid.txt" in capsys.readouterr().err


def test_offers_no_download_options(tmp_path, capsys):
    """It reads only the files it is given: --raw-dir, --no-download, --mirror and --retries (the downloading
    preparations' options) are neither in its help nor accepted."""
    with pytest.raises(SystemExit) as exit_:
        text_files.main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    assert "--input-dir" in help_text and "--work-dir" in help_text
    for option in ("--raw-dir", "--no-download", "--mirror", "--retries", "downloads"):
        assert option not in help_text
    _corpus(tmp_path / "raw")
    with pytest.raises(SystemExit) as exit_:
        text_files.main(["--input-dir", str(tmp_path / "raw"), "--raw-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "unrecognized arguments: --raw-dir" in capsys.readouterr().err
