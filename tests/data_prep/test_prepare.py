"""Every preparation on a sample in its release's raw format (--raw-dir):
what it writes, that a second run does nothing, that a run killed halfway and
restarted ends with the same bytes as an uninterrupted one, and clear errors
for a failed checksum or a missing tool."""
import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from prepared import ROOT_DIR, arguments, run_main
from raw_samples import IWSLT_TEST_PARTS, enwik8_bytes, write_iwslt14, write_multi30k, write_wikitext

from data_prep.text import reference_segments


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def tree(root):
    """relative path -> bytes of every file below root (lock files aside)."""
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if name != ".lock":
                path = os.path.join(directory, name)
                files[os.path.relpath(path, root)] = open(path, "rb").read()
    return files


def tokens(data_bin, split):
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(os.path.join(data_bin, "dict.txt"))
    dataset = data_utils.load_indexed_dataset(os.path.join(data_bin, split), dictionary)
    return dictionary, [t for i in range(len(dataset)) for t in dataset[i].tolist()]


def test_iwslt14_follows_prepare_iwslt14(prepare_sample):
    p = prepare_sample("iwslt14_de_en")
    work = p.work_dir
    raw = lines(os.path.join(work, "raw", "train.de"))
    assert not any(tag in line for line in raw for tag in ("<url>", "<talkid>", "<keywords>", "<title>", "<description>"))
    assert "Titel 0 : talk 0" in raw  # tags stripped, their text kept (as the fairseq script does)
    kept = len(raw) - 2  # the 200-word pair and the 7:1 pair are cleaned away
    train, valid = lines(os.path.join(work, "text", "train.en")), lines(os.path.join(work, "text", "valid.en"))
    assert len(train) + len(valid) == kept and len(valid) == kept // 23
    test = lines(os.path.join(work, "text", "test.en"))
    assert len(test) == 8 * len(IWSLT_TEST_PARTS)
    assert all(line == line.lower() for line in train + test)
    assert any("&apos;" in line for line in test) and not any("\u2019" in line for line in test)
    assert lines(os.path.join(p.dest, "refs", "test.en"))[0] == lines(os.path.join(work, "raw", "test.en"))[0]
    assert open(os.path.join(p.dest, "dict.de.txt")).read() == open(os.path.join(p.dest, "dict.en.txt")).read()
    assert len(lines(os.path.join(p.dest, "code"))) == 1 + 60  # header + merges
    assert lines(os.path.join(p.dest, "testsets.tsv")) == ["test\ttest"]


@pytest.mark.parametrize("name, valid_year, test_year", [("wmt14_en_de", 2013, 2014), ("wmt17_en_de", 2016, 2017)])
def test_wmt_follows_prepare_wmt14en2de(prepare_sample, name, valid_year, test_year):
    p = prepare_sample(name)
    work = p.work_dir
    train = lines(os.path.join(work, "text", "train.en"))
    assert any(" @-@ " in line for line in train)  # aggressive dash splitting
    assert len(lines(os.path.join(work, "text", "valid.de"))) == 10 and len(lines(os.path.join(work, "text", "test.de"))) == 10
    test_sgm = [os.path.join(d, f) for d, _, fs in os.walk(p.raw_dir) for f in fs if f == f"newstest{test_year}-{'deen' if test_year == 2014 else 'ende'}-ref.de.sgm"]
    assert lines(os.path.join(p.dest, "refs", "test.de")) == reference_segments(test_sgm[0])  # what sacreBLEU reads
    assert len(lines(os.path.join(work, "bpe", "train.en"))) <= len(train)  # cleaned after BPE
    assert os.path.exists(os.path.join(p.dest, "code"))


def test_multi30k_keeps_every_pair_and_finds_every_test_set(prepare_sample):
    p = prepare_sample("multi30k")
    assert lines(os.path.join(p.dest, "testsets.tsv")) == [
        "test\ttest_2016_flickr", "test1\ttest_2017_flickr", "test2\ttest_2018_flickr", "test3\ttest_2017_mscoco"]
    assert len(lines(os.path.join(p.work_dir, "text", "train.de"))) == 120
    for subset in ("test", "test1", "test2", "test3"):
        assert os.path.exists(os.path.join(p.dest, f"{subset}.de-en.en.bin"))
        assert os.path.exists(os.path.join(p.dest, "refs", f"{subset}.de"))


@pytest.mark.parametrize("name", ["wikitext103", "wikitext2"])
def test_wikitext_is_word_level_with_its_own_unk(prepare_sample, name):
    p = prepare_sample(name)
    raw = lines(os.path.join(p.raw_dir, f"wikitext-{name[8:]}", "wiki.test.tokens"))
    dictionary, ids = tokens(p.dest, "test")
    assert len(ids) == sum(len(line.split()) for line in raw) + len(raw)  # one end-of-line symbol per line
    train_words = {w for line in lines(os.path.join(p.raw_dir, f"wikitext-{name[8:]}", "wiki.train.tokens")) for w in line.split()}
    words = [w for line in raw for w in line.split()]
    assert "<unk>" in train_words and words.count("<unk>") > 0
    # the release's <unk> is fairseq's <unk> (no second unknown symbol); words unseen in train join it
    assert ids.count(dictionary.unk()) == sum(w == "<unk>" or w not in train_words for w in words)
    assert dictionary.index("<unk>") == dictionary.unk()
    assert " = = Section 2 = = " in raw  # headings kept as they are


def test_enwik8_is_one_token_per_byte(prepare_sample):
    p = prepare_sample("enwik8")
    sizes = {s: os.path.getsize(os.path.join(p.work_dir, "text", f"{s}.raw")) for s in ("train", "valid", "test")}
    assert sizes == {"train": 18000, "valid": 1000, "test": 1000}
    for split, size in sizes.items():
        data = open(os.path.join(p.work_dir, "text", f"{split}.raw"), "rb").read()
        _, ids = tokens(p.dest, split)
        assert len(ids) == size + (0 if data.endswith(b"\n") else 1)


def test_other_byte_files_split_by_fraction(tmp_path):
    source = tmp_path / "input.txt"
    source.write_bytes(enwik8_bytes(3000))
    run_main("enwik8", ["--input-file", str(source), "--dest", str(tmp_path / "bin"), "--work-dir", str(tmp_path / "work"),
                        "--valid-fraction", "0.1", "--test-fraction", "0.1", "--workers", "1"])
    assert [os.path.getsize(tmp_path / "work" / "text" / f"{s}.raw") for s in ("train", "valid", "test")] == [2400, 300, 300]


@pytest.mark.parametrize("name", ["iwslt14_de_en", "wmt17_en_de", "multi30k", "wikitext2", "enwik8"])
def test_second_run_does_nothing(prepare_sample, name, capsys):
    p = prepare_sample(name)
    before = {path: os.stat(os.path.join(p.root, path)).st_mtime_ns for path in tree(p.root)}
    capsys.readouterr()
    run_main(name, p.argv)
    err = capsys.readouterr().err
    assert err.count("up to date") >= 2 and " ...\n" not in err
    assert {path: os.stat(os.path.join(p.root, path)).st_mtime_ns for path in tree(p.root)} == before


SLOW_BPE = """
import sys, time
sys.path.insert(0, {root!r})
import subword_nmt.learn_bpe as learn_bpe
def stuck(infile, outfile, *args, **kwargs):
    outfile.write('#version: 0.2\\nhalf written\\n'); outfile.flush(); time.sleep(600)
learn_bpe.learn_bpe = stuck
from data_prep.iwslt14 import main
main({argv!r})
"""


def test_killed_halfway_and_rerun_gives_identical_outputs(prepare_sample, tmp_path):
    reference = prepare_sample("iwslt14_de_en")
    write_iwslt14(str(tmp_path / "raw"))
    argv = arguments("iwslt14_de_en", str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", SLOW_BPE.format(root=ROOT_DIR, argv=argv)],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    partial_codes = tmp_path / "work" / "bpe" / "code.partial"
    deadline = time.time() + 60
    while not partial_codes.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert partial_codes.exists(), process.stderr.read() if process.poll() is not None else "timed out"
    assert (tmp_path / "work" / ".stamps" / "text.done").exists()
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "data-bin").exists() and not (tmp_path / "work" / "bpe" / "code").exists()
    run_main("iwslt14_de_en", argv)
    for folder in ("data-bin", os.path.join("work", "text"), os.path.join("work", "bpe")):
        resumed, uninterrupted = tree(tmp_path / folder), tree(os.path.join(reference.root, folder))
        assert sorted(resumed) == sorted(uninterrupted)
        for path in resumed:
            assert resumed[path] == uninterrupted[path], f"{folder}/{path} differs"


def cli(module, *args, pre=""):
    code = f"import sys; sys.path.insert(0, {ROOT_DIR!r}); {pre}from data_prep.{module} import main; main({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_failed_checksum_is_a_clear_error_naming_the_file(tmp_path):
    write_multi30k(str(tmp_path / "raw"), gzipped_extra=False)
    with gzip.open(tmp_path / "raw" / "test_2018_flickr.de.gz", "wt") as f:  # has a published md5 (sacreBLEU)
        f.write("not the release\n")
    result = cli("multi30k", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--no-download")
    assert result.returncode == 2
    assert f"error: checksum mismatch for {tmp_path / 'raw' / 'test_2018_flickr.de.gz'}: md5 is" in result.stderr
    assert "Traceback" not in result.stderr


def test_multi30k_test_sets_found_by_a_later_run_are_added(tmp_path, capsys):
    """An optional test set missing at first (no file, no network) leaves the raw step unstamped; once its
    files are there, the next run writes and binarises it (the binarize fingerprint names the test sets)."""
    raw = tmp_path / "raw"
    write_multi30k(str(raw), gzipped_extra=False)
    argv = arguments("multi30k", str(tmp_path))
    run_main("multi30k", argv)
    testsets = os.path.join(tmp_path, "data-bin", "testsets.tsv")
    assert lines(testsets) == ["test\ttest_2016_flickr"]
    err = capsys.readouterr().err
    assert "Multi30k test sets missing: test_2017_flickr, test_2018_flickr, test_2017_mscoco" in err
    assert "test_2017_mscoco.en(.gz)" in err and "in --raw-dir or rerun with network access" in err
    assert "raw: done in" in err and "not stamped" in err
    write_multi30k(str(raw))  # the same train/val/test_2016_flickr, now with the other test sets
    run_main("multi30k", argv)
    assert lines(testsets) == ["test\ttest_2016_flickr", "test1\ttest_2017_flickr", "test2\ttest_2018_flickr",
                               "test3\ttest_2017_mscoco"]
    assert os.path.exists(os.path.join(tmp_path, "data-bin", "test3.de-en.en.bin"))
    assert lines(os.path.join(tmp_path, "data-bin", "refs", "test3.en")) == lines(os.path.join(tmp_path, "work", "raw",
                                                                                               "test_2017_mscoco.en"))
    err = capsys.readouterr().err
    assert "learn_bpe: up to date" in err and "test sets missing" not in err
    run_main("multi30k", argv)
    assert " ...\n" not in capsys.readouterr().err  # complete now: nothing left to do


def test_download_failure_of_an_optional_file_is_reported(tmp_path):
    from data_prep.common import Resource, fetch

    skipped = []
    optional = Resource("extra.gz", urls=["http://127.0.0.1:9/extra.gz"], members=["extra"], optional=True)
    assert fetch(optional, None, str(tmp_path), retries=1, skipped=skipped) == {}
    assert skipped == ["extra.gz"]


def test_wikitext_archive_with_the_wrong_checksum_is_refused(tmp_path):
    import zipfile

    from data_prep.wikitext import resource

    assert resource("2").md5 == "542ccefacc6c27f945fb54453812b3cd"
    assert resource("103").md5 == "9ddaacaf6af0710eda8c456decff7832"
    (tmp_path / "raw").mkdir()
    archive = tmp_path / "raw" / "wikitext-2-v1.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for split in ("train", "valid", "test"):
            zf.writestr(f"wikitext-2/wiki.{split}.tokens", " = Made up = \n")
    result = cli("wikitext2", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--no-download")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: checksum mismatch for {archive}: md5 is" in result.stderr
    assert "542ccefacc6c27f945fb54453812b3cd" in result.stderr
    # the archive next to extracted files is still checked; extracted files alone cannot be, and the log says so
    write_wikitext(str(tmp_path / "raw"), "2")
    os.rename(tmp_path / "raw" / "wikitext-2", tmp_path / "raw" / "files")
    result = cli("wikitext2", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--no-download")
    assert result.returncode == 2 and f"checksum mismatch for {archive}" in result.stderr
    archive.unlink()
    result = cli("wikitext2", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--no-download")
    assert result.returncode == 0, result.stderr
    assert "cannot be verified" in result.stderr and "md5" in result.stderr


def test_missing_tool_is_a_clear_error(tmp_path):
    write_iwslt14(str(tmp_path / "raw"), train_pairs=30)
    result = cli("iwslt14", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), pre="sys.modules['sacremoses'] = None; ")
    assert result.returncode == 2
    assert "error: Moses tokenisation needs the Python package 'sacremoses'" in result.stderr


def test_wmt_with_sentencepiece(prepare_sample, tmp_path):
    raw = prepare_sample("wmt14_en_de").raw_dir
    run_main("wmt14_en_de", ["--raw-dir", raw, "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                             "--bpe", "sentencepiece", "--spm-vocab-size", "120", "--workers", "1", "--no-download"])
    settings = json.load(open(tmp_path / "bin" / "prepare.json"))
    assert settings["bpe"] == "sentencepiece" and os.path.exists(tmp_path / "bin" / "spm.model")
    pieces = lines(tmp_path / "work" / "bpe" / "train.en")
    assert any("\u2581" in line for line in pieces) and not any("@-@" in line for line in pieces)  # raw text, no Moses tokens


def test_enwik8_of_the_wrong_size_is_refused(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "enwik8").write_bytes(enwik8_bytes(1000))
    result = cli("enwik8", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--no-download")
    assert result.returncode == 2
    assert f"error: {tmp_path / 'raw' / 'enwik8'} has 1000 bytes; enwik8 has exactly 100000000" in result.stderr
