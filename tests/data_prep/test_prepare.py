"""Every preparation on a sample in its release's raw format (--raw-dir):
what it writes, that a second run does nothing, that a run killed at several
points (inside a step, inside one split of a step, while the destination is
completed) and restarted ends with the same bytes as an uninterrupted one,
the WMT test archives under their official names, and clear errors for a
failed checksum or a missing tool."""
import dataclasses
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Sequence

import pytest
from prepared import ROOT_DIR, SAMPLES, arguments, run_main
from raw_samples import IWSLT_TEST_PARTS, enwik8_bytes, pack, write_multi30k, write_wikitext, write_wmt_test

from data_prep.text import MosesPipeline, reference_segments


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


KILLED_RUN = """
import os, sys, time
sys.path[:0] = [{root!r}, {tests!r}]

def stop_here():  # the kill point: tell the test, then wait for its SIGKILL
    open({marker!r}, "w").close()
    time.sleep(600)

{patch}
from prepared import run_main
run_main({name!r}, {argv!r})
"""

# Kill points: code run in the child before the preparation, calling stop_here() where it is to be killed.
BPE_HALF_WRITTEN = """
import subword_nmt.learn_bpe as learn_bpe
def stuck(infile, outfile, *args, **kwargs):
    outfile.write("#version: 0.2\\nhalf written\\n"); outfile.flush(); stop_here()
learn_bpe.learn_bpe = stuck
"""
TOKENIZING_VALID_DE = """
import data_prep.translation as translation
tokenize_file = translation.moses_file
def moses_file(src, dst, *args):
    if dst.endswith(os.path.join("tok", "valid.de")):
        with open(dst + ".partial", "w") as f:
            f.write("half written\\n")
        stop_here()
    return tokenize_file(src, dst, *args)
translation.moses_file = moses_file
"""
AFTER_FAIRSEQ_PREPROCESS = """
from fairseq_cli import preprocess
binarise = preprocess.main
def main(args):
    binarise(args)
    stop_here()
preprocess.main = main
"""
WRITING_PREPARE_JSON = """
import json
dump = json.dump
def dump_or_stop(obj, fp, *args, **kwargs):
    if os.path.basename(getattr(fp, "name", "")).startswith("prepare.json"):
        stop_here()
    return dump(obj, fp, *args, **kwargs)
json.dump = dump_or_stop
"""


def killed_run(name: str, patch: str, root) -> List[str]:
    """Write dataset ``name``'s sample below ``root``, run its preparation in a child process with
    ``patch`` applied and SIGKILL it at the patch's stop_here(). Returns the preparation's arguments."""
    SAMPLES[name].write(os.path.join(root, "raw"))
    argv = arguments(name, str(root))
    marker = os.path.join(root, "killed-here")
    code = KILLED_RUN.format(root=ROOT_DIR, tests=os.path.dirname(os.path.abspath(__file__)), marker=marker,
                             patch=patch, name=name, argv=argv)
    # a fresh interpreter, not the suite's fork server (tests/fork_server.py): a command run through it
    # ends only after its client, so the lock it holds could outlive process.wait() below
    python = os.environ.get("FAIRSEQ_PLUGINS_TEST_FRESH_PYTHON", sys.executable)
    process = subprocess.Popen([python, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.time() + 90
    while not os.path.exists(marker) and time.time() < deadline and process.poll() is None:
        time.sleep(0.1)
    try:
        assert os.path.exists(marker), process.stderr.read() if process.poll() is not None else "timed out"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
    return argv


def assert_same_outputs(root, reference_root, folders: Sequence[str]) -> None:
    """Byte-identical files (and the same file names) below every folder of both roots."""
    for folder in folders:
        resumed, uninterrupted = tree(os.path.join(root, folder)), tree(os.path.join(reference_root, folder))
        assert sorted(resumed) == sorted(uninterrupted), folder
        for path in resumed:
            assert resumed[path] == uninterrupted[path], f"{folder}/{path} differs"


def test_killed_halfway_and_rerun_gives_identical_outputs(prepare_sample, tmp_path):
    reference = prepare_sample("iwslt14_de_en")
    argv = killed_run("iwslt14_de_en", BPE_HALF_WRITTEN, tmp_path)
    assert list((tmp_path / "work" / "bpe").glob("code.*.partial"))  # the killed writer's temporary file
    assert (tmp_path / "work" / ".stamps" / "text.done").exists()
    assert not (tmp_path / "data-bin").exists() and not (tmp_path / "work" / "bpe" / "code").exists()
    run_main("iwslt14_de_en", argv)
    assert_same_outputs(tmp_path, reference.root, ["data-bin", os.path.join("work", "text"), os.path.join("work", "bpe")])


def test_wmt_killed_inside_tokenisation_redoes_only_that_split(prepare_sample, tmp_path, capsys):
    reference = prepare_sample("wmt14_en_de")
    argv = killed_run("wmt14_en_de", TOKENIZING_VALID_DE, tmp_path)
    stamps, tok = tmp_path / "work" / ".stamps", tmp_path / "work" / "tok"
    assert (stamps / "tokenize.train.done").exists() and not (stamps / "tokenize.valid.done").exists()
    assert (tok / "valid.en").exists() and (tok / "valid.de.partial").exists() and not (tok / "valid.de").exists()
    capsys.readouterr()
    run_main("wmt14_en_de", argv)
    err = capsys.readouterr().err
    assert "tokenize train: up to date" in err  # the finished split is kept ...
    assert "tokenize valid ..." in err and "tokenize test ..." in err  # ... the interrupted one and the rest are done
    work_folders = [os.path.join("work", stage) for stage in ("tok", "text", "bpe")]
    assert_same_outputs(tmp_path, reference.root, ["data-bin", *work_folders])


@pytest.mark.parametrize("kill_point", [AFTER_FAIRSEQ_PREPROCESS, WRITING_PREPARE_JSON], ids=["after-preprocess", "prepare-json"])
def test_lm_killed_inside_binarisation_never_leaves_a_destination_without_its_settings(prepare_sample, tmp_path, kill_point):
    reference = prepare_sample("wikitext2")
    argv = killed_run("wikitext2", kill_point, tmp_path)
    dest, stamps = tmp_path / "data-bin", tmp_path / "work" / ".stamps"
    assert not dest.exists() or (dest / "prepare.json").exists()
    assert (stamps / "text.done").exists() and not (stamps / "binarize.done").exists()
    run_main("wikitext2", argv)
    assert_same_outputs(tmp_path, reference.root, ["data-bin", os.path.join("work", "text")])


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
    assert "going on with test_2016_flickr" in err and "in --raw-dir or rerun with network access" in err
    # one line, not one warning per missing file
    assert [line for line in err.splitlines() if "WARNING" in line] == [
        line for line in err.splitlines() if " | WARNING | data_prep | Multi30k test sets missing: " in line]
    assert len([line for line in err.splitlines() if "WARNING" in line]) == 1
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


def pinned_in_requirements(package: str) -> str:
    return re.search(rf"^{re.escape(package)}==\S+$", open(os.path.join(ROOT_DIR, "requirements.txt")).read(), re.M).group(0)


@pytest.mark.parametrize("module, package, purpose, name, flags", [
    ("tqdm", "tqdm", "progress bars", "iwslt14_de_en", []),
    ("sacremoses", "sacremoses", "Moses tokenisation", "iwslt14_de_en", []),
    ("subword_nmt", "subword-nmt", "BPE", "iwslt14_de_en", []),
    ("sacrebleu", "sacrebleu", "the WMT test sets (sacreBLEU's registry)", "wmt14_en_de", []),
    ("sentencepiece", "sentencepiece", "sentencepiece", "wmt14_en_de", ["--bpe", "sentencepiece", "--spm-vocab-size", "120"]),
])
def test_missing_package_is_a_one_line_error_naming_it_and_its_pinned_version(
        prepare_sample, tmp_path, monkeypatch, capsys, module, package, purpose, name, flags):
    from data_prep import text

    raw = prepare_sample(name).raw_dir
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    monkeypatch.setattr(text, "_CACHE", {})  # no Moses tools built by earlier tests
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        run_main(name, ["--raw-dir", raw, "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                        "--workers", "1", "--no-download", *flags])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err
    module_note = f" (module {module})" if module != package else ""
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {purpose} needs the Python package '{package}'{module_note}, which is not installed: run `make setup`, "
        f"or pip install -c constraints.txt {pinned_in_requirements(package)} (the version requirements.txt pins)"]


def test_missing_fairseq_is_a_one_line_error_not_an_import_traceback(tmp_path):
    """fairseq (and torch) are imported where they are used, not when a data_prep module is imported."""
    write_wikitext(str(tmp_path / "raw"), "2")
    result = cli("wikitext2", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--no-download", pre="sys.modules['fairseq'] = None; ")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    pin = re.search(r"fairseq-fixed==[\w.]+", open(os.path.join(ROOT_DIR, "Makefile")).read()).group(0)
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: data_prep needs the Python package 'fairseq-fixed' (module fairseq), which is not installed: "
        f"run `make setup` (it installs {pin}; see the Makefile)"]


def test_syntax_hints_script_without_fairseq_is_a_one_line_error(tmp_path):
    """(``python data_prep/syntax_hints.py``, without fairseq: its --help needs none, a run says what to install)"""
    script = os.path.join(ROOT_DIR, "data_prep", "syntax_hints.py")
    text = tmp_path / "train.en"
    text.write_text("a b\n")
    for arguments, status in ((["--help"], 0), (["--input", str(text), "--output", str(tmp_path / "h"), "--spacy-model", "m"], 2)):
        # (every fairseq module blocked: the test's interpreter may have some loaded already)
        code = (f"import runpy, sys; sys.modules.update({{m: None for m in [*sys.modules, 'fairseq'] if m.split('.')[0] == 'fairseq'}}); "
                f"sys.argv = [{script!r}, *{arguments!r}]; "
                f"runpy.run_path({script!r}, run_name='__main__')")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode == status and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: data_prep/syntax_hints.py needs the Python package 'fairseq-fixed' (module fairseq)")


# ---------------------------------------------------- WMT test archives ---
def md5(path) -> str:
    return hashlib.md5(open(path, "rb").read()).hexdigest()


def test_wmt_test_archive_under_its_official_name_is_verified_against_sacrebleus_md5(tmp_path):
    from sacrebleu.dataset import DATASETS

    from data_prep.common import PrepError, fetch
    from data_prep.wmt import sacrebleu_test

    resource, src_file, ref_file = sacrebleu_test("wmt14/full", "wmt14-full-test.tgz")
    assert (resource.md5, resource.urls[0]) == (DATASETS["wmt14/full"].md5[0], DATASETS["wmt14/full"].data[0])
    assert "dataset registry, sacrebleu.dataset.DATASETS['wmt14/full']" in resource.checksum_source
    write_wmt_test(str(tmp_path / "sample"), "test-full", 2014, "deen")
    archive = pack(str(tmp_path / "raw" / "test-full.tgz"), str(tmp_path / "sample"), ["test-full"])
    with pytest.raises(PrepError, match=rf"checksum mismatch for {re.escape(archive)}: md5 is [0-9a-f]{{32}}, the published "
                                        rf"value is {resource.md5} \(sacreBLEU .*'s dataset registry"):
        fetch(resource, str(tmp_path / "raw"), str(tmp_path / "work"), download_ok=False)
    # an archive that matches the published md5 (ours, standing in for the release) is found under every accepted name
    made_up = dataclasses.replace(resource, md5=md5(archive))
    for name in ("test-full.tgz", "wmt14_full.test-full.tgz", "wmt14-full-test.tgz"):
        raw = tmp_path / name / "raw"
        raw.mkdir(parents=True)
        shutil.copyfile(archive, raw / name)
        paths = fetch(made_up, str(raw), str(tmp_path / name / "work"), download_ok=False)
        assert open(paths[ref_file], "rb").read() == open(tmp_path / "sample" / "test-full" / ref_file, "rb").read()


def test_wmt_test_tgz_of_several_years_is_told_apart_by_its_md5(tmp_path, capsys):
    from data_prep.common import PrepError, fetch
    from data_prep.wmt import sacrebleu_test

    raw = tmp_path / "raw"
    archives, resources = {}, {}
    for year, key in ((2016, "wmt16"), (2017, "wmt17")):  # both official archives are called test.tgz
        write_wmt_test(str(tmp_path / key), "test", year, "ende")
        archives[key] = pack(str(raw / key / "test.tgz"), str(tmp_path / key), ["test"])
        resources[key] = dataclasses.replace(sacrebleu_test(key, f"{key}-test.tgz")[0], md5=md5(archives[key]))
    for year, key in ((2016, "wmt16"), (2017, "wmt17")):
        paths = fetch(resources[key], str(raw), str(tmp_path / "work"), download_ok=False)
        ref = f"newstest{year}-ende-ref.de.sgm"
        assert open(paths[ref], "rb").read() == open(tmp_path / key / "test" / ref, "rb").read()
    assert (f"wmt17-test.tgz: not used: {archives['wmt16']} is not this release's test.tgz (md5 {md5(archives['wmt16'])}, "
            f"not the published {md5(archives['wmt17'])}: another release's, or a damaged copy)") in capsys.readouterr().err
    # only the other year's test.tgz there and downloading off: the error names the accepted names, and why that file is not it
    os.remove(archives["wmt16"])
    with pytest.raises(PrepError) as error:
        fetch(resources["wmt16"], str(raw), str(tmp_path / "work2"), download_ok=False)
    assert str(error.value) == (
        f"wmt16-test.tgz (https://data.statmt.org/wmt16/translation-task/test.tgz) is not in --raw-dir {raw} and downloading "
        "is off; accepted names: wmt16-test.tgz, wmt16.test.tgz, test.tgz, or its files newstest2016-ende-src.en.sgm, "
        f"newstest2016-ende-ref.de.sgm; {archives['wmt17']} is not this release's test.tgz (md5 {md5(archives['wmt17'])}, "
        f"not the published {resources['wmt16'].md5}: another release's, or a damaged copy)")


def test_wmt14_from_the_official_archives_in_raw_dir(prepare_sample, tmp_path, monkeypatch):
    """test.tgz (newstest2013) and test-full.tgz (newstest2014) as statmt.org names them: the same binaries
    as from their extracted files (sacreBLEU's md5s replaced by those of the made-up archives)."""
    from sacrebleu.dataset import DATASETS

    reference = prepare_sample("wmt14_en_de")
    raw = tmp_path / "raw"
    SAMPLES["wmt14_en_de"].write(str(raw))
    for key, name, folder in (("wmt13", "test.tgz", "test"), ("wmt14/full", "test-full.tgz", "test-full")):
        archive = pack(str(raw / "archives" / name), str(raw), [folder])
        shutil.rmtree(raw / folder)
        monkeypatch.setattr(DATASETS[key], "md5", [md5(archive)])
    run_main("wmt14_en_de", arguments("wmt14_en_de", str(tmp_path)))
    assert_same_outputs(tmp_path, reference.root, ["data-bin"])


def test_wmt_with_sentencepiece(prepare_sample, tmp_path):
    raw = prepare_sample("wmt14_en_de").raw_dir
    run_main("wmt14_en_de", ["--raw-dir", raw, "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                             "--bpe", "sentencepiece", "--spm-vocab-size", "120", "--workers", "1", "--no-download"])
    settings = json.load(open(tmp_path / "bin" / "prepare.json"))
    assert settings["bpe"] == "sentencepiece" and os.path.exists(tmp_path / "bin" / "spm.model")
    pieces = lines(tmp_path / "work" / "bpe" / "train.en")
    assert any("\u2581" in line for line in pieces) and not any("@-@" in line for line in pieces)  # raw text, no Moses tokens
    # every split the model sees goes through the same normalisation (and no tokenisation)
    for lang in ("en", "de"):
        normalise = MosesPipeline(lang, tokenize=False, normalize_punctuation=True, remove_non_printing=True)
        for split in ("train", "valid", "test"):
            raw_text = lines(tmp_path / "work" / "raw" / f"{split}.{lang}")
            assert lines(tmp_path / "work" / "tok" / f"{split}.{lang}") == [normalise(line) for line in raw_text], (split, lang)
    test_en = lines(tmp_path / "work" / "raw" / "test.en")
    assert any(MosesPipeline("en", tokenize=False, normalize_punctuation=True)(line) != line for line in test_en)  # it has work to do


def test_enwik8_of_the_wrong_size_is_refused(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "enwik8").write_bytes(enwik8_bytes(1000))
    result = cli("enwik8", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--no-download")
    assert result.returncode == 2
    assert f"error: {tmp_path / 'raw' / 'enwik8'} has 1000 bytes; enwik8 has exactly 100000000" in result.stderr
