"""Bad input to the preparations is a one-line error naming the file and what
is expected, never a silent change of the data or a crash inside a library:
invalid UTF-8 (one policy for the preparations and the syntax-hint tool:
an error naming file, line and byte, or with ``--invalid-utf8 replace``
U+FFFD and a warning with counts) and empty training files."""
import gzip
import os
import subprocess
import sys

import pytest
from prepared import ROOT_DIR, arguments, run_main
from raw_samples import write_multi30k, write_wikitext

from data_prep import syntax_hints as tool
from data_prep.common import PrepError, read_lines
from data_prep.text import learn_bpe
from fairseq_plugins.data.syntax_hints import load_hint_dataset, write_hint_dataset

REPLACEMENT = "\ufffd"


def cli(module, *args):
    code = f"import sys; sys.path.insert(0, {ROOT_DIR!r}); from data_prep.{module} import main; main({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def one_line_error(result) -> str:
    """The error line of a failed preparation, which must end the run without a traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def corrupt(path, line_number: int, bad: bytes = b"\xff") -> int:
    """Put ``bad`` after the first word of line ``line_number`` (1-based); returns its byte offset in the file."""
    data = open(path, "rb").read().split(b"\n")
    offset = sum(len(line) + 1 for line in data[: line_number - 1]) + data[line_number - 1].index(b" ")
    data[line_number - 1] = data[line_number - 1].replace(b" ", b" " + bad, 1)
    with open(path, "wb") as f:
        f.write(b"\n".join(data))
    return offset + 1


# ----------------------------------------------------------- the reader ---
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_invalid_utf8_is_an_error_naming_file_line_and_byte(tmp_path, gzipped):
    path = tmp_path / ("text.gz" if gzipped else "text")
    data = "eins zwei\ndrei vier\n".encode() + b"f\xc3nf sechs\n"  # a truncated 2-byte sequence on line 3
    with (gzip.open if gzipped else open)(path, "wb") as f:
        f.write(data)
    with pytest.raises(PrepError) as error:
        list(read_lines(str(path)))
    message = str(error.value)
    assert message.startswith(f"{path}: line 3 (byte 21 of the {'decompressed ' if gzipped else ''}file) is not valid UTF-8 "
                              "(invalid continuation byte b'\\xc3')")
    assert "--invalid-utf8 replace" in message and "\n" not in message


def test_replacing_invalid_utf8_is_explicit_and_counted(tmp_path, capsys):
    path = tmp_path / "text"
    path.write_bytes(b"a\xff b\xfe\nok \xef\xbf\xbd\nc \xe2\x82\n")  # 2 bad bytes on line 1, a real U+FFFD, 1 truncated sequence
    assert list(read_lines(str(path), invalid_utf8="replace")) == [f"a{REPLACEMENT} b{REPLACEMENT}", f"ok {REPLACEMENT}",
                                                                  f"c {REPLACEMENT}"]
    warning = capsys.readouterr().err.strip()
    assert warning.split(" | ")[1:] == ["WARNING", "data_prep", (  # fairseq's format: time | level | logger | message
        f"{path}: replaced 3 invalid UTF-8 sequences on 2 lines with U+FFFD (--invalid-utf8 replace; the first on line 1, byte 1)")]
    list(read_lines(str(path), invalid_utf8="replace"))  # every read of the file says it again
    assert "replaced 3 invalid UTF-8 sequences" in capsys.readouterr().err


def test_valid_text_reads_as_before(tmp_path, capsys):
    path = tmp_path / "text"
    path.write_bytes("Straße\r\nüber\n\nend \ufffd".encode())  # '\r' kept: only '\n' splits (as Moses' scripts)
    assert list(read_lines(str(path))) == ["Straße\r", "über", "", f"end {REPLACEMENT}"]
    assert capsys.readouterr().err == ""


# ---------------------------------------------------- in the preparations ---
def test_preparation_refuses_invalid_utf8_naming_the_file(tmp_path):
    raw = tmp_path / "raw"
    write_multi30k(str(raw), gzipped_extra=False)
    offset = corrupt(raw / "train.en", 3)
    result = cli("multi30k", "--raw-dir", str(raw), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--no-download", "--workers", "1")
    assert one_line_error(result) == (
        f"error: {raw / 'train.en'}: line 3 (byte {offset} of the file) is not valid UTF-8 (invalid start byte "
        "b'\\xff'); fix the file, or pass --invalid-utf8 replace to replace every invalid sequence with U+FFFD")
    assert not (tmp_path / "bin").exists()


def test_preparation_replaces_invalid_utf8_when_asked_and_says_how_much(tmp_path, capsys):
    raw = tmp_path / "raw"
    write_multi30k(str(raw), gzipped_extra=False)
    corrupt(raw / "train.en", 3)
    corrupt(raw / "train.en", 7, b"\xc3")
    argv = arguments("multi30k", str(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        run_main("multi30k", [*argv, "--invalid-utf8", "replace", "--stop-after", "raw"])
    assert stopped.value.code == 0
    assert (f"WARNING | data_prep | {raw / 'train.en'}: replaced 2 invalid UTF-8 sequences on 2 lines with U+FFFD "
            "(--invalid-utf8 replace; the first on line 3, byte") in capsys.readouterr().err
    written = list(read_lines(str(tmp_path / "work" / "raw" / "train.en")))
    assert REPLACEMENT in written[2] and REPLACEMENT in written[6]


def test_the_syntax_hint_tool_follows_the_same_policy(tmp_path, capsys):
    text = tmp_path / "train.en"
    text.write_bytes(b"the dog barks .\nthe \xff cat .\n")
    argv = ["--input", str(text), "--output", str(tmp_path / "train.hints"), "--spacy-model", str(tmp_path / "no-model")]
    with pytest.raises(SystemExit) as exit_info:
        tool.main(argv)
    assert exit_info.value.code == 2
    assert (f"error: {text}: line 2 (byte 20 of the file) is not valid UTF-8 (invalid start byte b'\\xff'); fix the "
            "file, or pass --invalid-utf8 replace") in capsys.readouterr().err


def test_the_syntax_hint_tool_replaces_when_asked(tmp_path, capsys, monkeypatch):
    text = tmp_path / "train.en"
    text.write_bytes(b"the dog barks .\nthe \xff cat .\r\nend\n")
    prefix = tmp_path / "train.hints"
    parsed = []

    def fake_parse(nlp, lines, bpe, first_line, *args):  # the parser is not what this test is about
        for line in lines:
            parsed.append(line)
            yield [0] * (len(line.split()) + 1)

    monkeypatch.setattr(tool, "model_fingerprint", lambda model: "fake")
    monkeypatch.setattr(tool, "load_parser", lambda model: None)
    monkeypatch.setattr(tool, "parse_lines", fake_parse)
    tool.main(["--input", str(text), "--output", str(prefix), "--spacy-model", "fake", "--invalid-utf8", "replace"])
    assert [line.rstrip("\r\n") for line in parsed] == ["the dog barks .", f"the {REPLACEMENT} cat .", "end"]
    assert [len(load_hint_dataset(str(prefix))[i]) for i in range(3)] == [5, 5, 2]
    assert (f"WARNING | data_prep | {text}: replaced 1 invalid UTF-8 sequence on 1 line with U+FFFD (--invalid-utf8 replace; "
            "the first on line 2, byte 20)") in capsys.readouterr().err


def test_a_damaged_shard_of_the_syntax_hint_tool_is_parsed_again(tmp_path):
    """A shard whose .bin was cut short (a full disk, a killed copy) is not done: the rerun parses it again."""
    prefix = str(tmp_path / "shard-00000")
    write_hint_dataset(prefix, [[0, 1, 0], [0]])
    assert tool.shard_done(prefix, [2, 0])
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(8)
    assert not tool.shard_done(prefix, [2, 0])


# -------------------------------------------------------- empty training ---
@pytest.mark.parametrize("empty", ["train.de", "train.en"])
def test_empty_multi30k_training_file_is_an_error_naming_it(tmp_path, empty):
    raw = tmp_path / "raw"
    write_multi30k(str(raw), gzipped_extra=False)
    (raw / empty).write_text("\n\n")
    result = cli("multi30k", "--raw-dir", str(raw), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--no-download", "--workers", "1")
    assert one_line_error(result) == (f"error: {raw / empty}: no text (2 blank lines); the training split needs at least "
                                      "one sentence")


@pytest.mark.parametrize("size", [0, 10])
def test_byte_file_too_small_for_its_splits_is_an_error(tmp_path, size):
    source = tmp_path / "input.txt"
    source.write_bytes(b"abcdefghij"[:size])
    result = cli("enwik8", "--input-file", str(source), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--workers", "1")
    assert one_line_error(result) == (
        f"error: --input-file {source}: {size} bytes give an empty "
        f"{'train' if size == 0 else 'valid'} split (--valid-fraction 0.05, --test-fraction 0.05); every split "
        "needs at least one byte: give a larger file or larger fractions")
    assert not (tmp_path / "bin").exists()


def test_empty_word_level_training_file_is_an_error(tmp_path):
    source = tmp_path / "raw"
    source.mkdir()
    for split, text in (("train", " \n"), ("valid", "a b\n"), ("test", "b a\n")):
        (source / f"{split}.txt").write_text(text)
    result = cli("text_files", "--input-dir", str(source), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--workers", "1")
    assert one_line_error(result) == (f"error: {source / 'train.txt'}: no text (1 blank line); the train split needs "
                                      "at least one token")


def test_empty_word_level_split_of_a_release_is_an_error(tmp_path):
    """Any language-model preparation (here WikiText-2 with an empty test file) checks its text files."""
    raw = tmp_path / "raw"
    write_wikitext(str(raw), "2", articles={"train": 2, "valid": 1, "test": 0})
    result = cli("wikitext2", "--raw-dir", str(raw), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--no-download", "--workers", "1")
    assert one_line_error(result) == (f"error: {tmp_path / 'work' / 'text' / 'test.txt'}: no text (an empty file); the "
                                      "test split needs at least one token")
    assert not (tmp_path / "bin").exists()


def test_bpe_on_a_side_without_text_is_an_error_not_a_crash_in_subword_nmt(tmp_path):
    """Every translation preparation learns BPE on its cleaned training text: one that cleaning emptied is named."""
    (tmp_path / "train.de").write_text("ein haus\n")
    (tmp_path / "train.en").write_text("")
    with pytest.raises(PrepError) as error:
        learn_bpe([str(tmp_path / "train.de"), str(tmp_path / "train.en")], str(tmp_path / "code"), merges=10)
    assert str(error.value) == (f"{tmp_path / 'train.en'}: no text (an empty file); BPE is learnt on the training text "
                                "(did the data, or its cleaning, leave no pair?)")
    assert not (tmp_path / "code").exists()


# ------------------------------------------------- options and folders ---
def multi30k_raw(tmp_path, gzipped_extra=False):
    raw = tmp_path / "raw"
    write_multi30k(str(raw), train=40, gzipped_extra=gzipped_extra)
    return raw


def multi30k(tmp_path, *extra):
    # (--no-download, unless a download option is typed: it would be refused with it)
    offline = [] if {"--mirror", "--retries"} & set(extra) else ["--no-download"]
    return cli("multi30k", "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
               str(tmp_path / "bin"), *offline, "--workers", "1", *extra)


@pytest.mark.parametrize("extra, message", [
    (["--workers", "0"], "--workers: expected at least 1, got 0"),
    (["--bpe-merges", "-1"], "--bpe-merges: expected at least 1, got -1"),
    (["--retries", "0"], "--retries: expected at least 1, got 0"),
    (["--dest", "{d}/a-file/bin"], "--dest {d}/a-file/bin: cannot create or write the folder {d}/a-file (File exists: "
                                   "{d}/a-file)"),
    (["--dest", "{d}/a-file"], "--dest {d}/a-file: a file is in the way (expected a folder, or nothing)"),
    (["--work-dir", "{d}/a-file/work"], "--work-dir {d}/a-file/work: cannot create or write the folder {d}/a-file/work "
                                        "(Not a directory: {d}/a-file/work)"),
    # a --raw-dir is only read: one that is not there would otherwise mean downloading the release
    (["--raw-dir", "{d}/no-raw"], "--raw-dir {d}/no-raw: no such folder (expected the folder with the release files on "
                                  "disk; leave it out to download them)"),
    (["--raw-dir", "{d}/a-file"], "--raw-dir {d}/a-file: not a folder (expected the folder with the release files on "
                                  "disk; leave it out to download them)"),
    (["--mirror", "foo"], "--mirror foo: expected a base URL starting with http://, https:// or file://"),
    (["--mirror", "ftp://mirror.example/multi30k"],
     "--mirror ftp://mirror.example/multi30k: expected a base URL starting with http://, https:// or file://"),
    (["--mirror", "https:mirror.example"], "--mirror https:mirror.example: expected a base URL starting with http://, "
                                           "https:// or file://"),
    # --no-download turns downloading off: its options would be ignored
    (["--no-download", "--mirror", "https://mirror.example/multi30k"],
     "--mirror: an option of downloading, which --no-download turns off (it would be ignored)"),
    (["--retries=5", "--no-download"], "--retries: an option of downloading, which --no-download turns off (it would be "
                                       "ignored)"),
], ids=["workers", "bpe-merges", "retries", "dest-under-a-file", "dest-a-file", "work-dir-under-a-file", "raw-dir-missing",
        "raw-dir-a-file", "mirror-without-scheme", "mirror-ftp", "mirror-without-host", "mirror-without-download",
        "retries-without-download"])
def test_bad_options_are_refused_before_any_work(tmp_path, extra, message):
    multi30k_raw(tmp_path)
    (tmp_path / "a-file").write_text("in the way\n")
    before = sorted(os.listdir(tmp_path))
    result = multi30k(tmp_path, *[value.format(d=tmp_path) for value in extra])
    assert one_line_error(result) == "error: " + message.format(d=tmp_path)
    assert sorted(os.listdir(tmp_path)) == before  # no work folder, no destination


@pytest.mark.parametrize("name, extra, message", [
    ("wmt14_en_de", ["--bpe", "sentencepiece", "--bpe-merges", "100"],
     "--bpe-merges: an option of --bpe subword-nmt, not of --bpe sentencepiece (it would be ignored)"),
    ("wmt17_en_de", ["--spm-vocab-size", "8000"],
     "--spm-vocab-size: an option of --bpe sentencepiece, not of --bpe subword-nmt (it would be ignored)"),
    ("wmt14_en_de", ["--bpe", "subword-nmt", "--spm-vocab-size=8000"],
     "--spm-vocab-size: an option of --bpe sentencepiece, not of --bpe subword-nmt (it would be ignored)"),
], ids=["merges-with-sentencepiece", "vocab-size-with-the-default", "vocab-size-with-subword-nmt"])
def test_an_option_of_the_other_bpe_is_refused_before_any_work(tmp_path, name, extra, message):
    (tmp_path / "raw").mkdir()
    result = cli(name, "--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest",
                 str(tmp_path / "bin"), "--no-download", *extra)
    assert one_line_error(result) == "error: " + message
    assert sorted(os.listdir(tmp_path)) == ["raw"]


def test_the_bpe_options_are_read_as_typed(tmp_path):
    """Only an option typed refuses: the other BPE's default does not; as `python -m` (sys.argv) too, and an
    abbreviation (which the check could not read) is refused by argparse."""
    from data_prep.common import argument_parser, check_arguments
    from data_prep.translation import TRANSLATION_STEPS, add_bpe_arguments

    parser = argument_parser("wmt14_en_de", "", "bin", TRANSLATION_STEPS)
    add_bpe_arguments(parser, merges=40000, sentencepiece=True)
    for argv in ([], ["--bpe", "sentencepiece"], ["--bpe", "sentencepiece", "--spm-vocab-size", "8"],
                 ["--bpe-merges", "5"], ["--bpe", "subword-nmt", "--bpe-merges=5"]):
        check_arguments(parser.parse_args(argv), argv)
    (tmp_path / "raw").mkdir()
    # (an empty --raw-dir and --no-download: were the option not refused, the run would fail fast, not download)
    folders = ["--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
               "--no-download"]
    module = subprocess.run([sys.executable, "-m", "data_prep.wmt17_en_de", *folders, "--spm-vocab-size", "8"],
                            capture_output=True, text=True, cwd=ROOT_DIR)
    assert one_line_error(module) == ("error: --spm-vocab-size: an option of --bpe sentencepiece, not of --bpe subword-nmt "
                                      "(it would be ignored)")
    abbreviated = cli("wmt14_en_de", *folders, "--spm", "8")
    assert abbreviated.returncode == 2 and "error: unrecognized arguments: --spm 8" in abbreviated.stderr
    assert sorted(os.listdir(tmp_path)) == ["raw"]


@pytest.mark.parametrize("extra", [["--raw-dir", "{d}"], ["--no-download"], ["--mirror=https://mirror.example"],
                                   ["--retries", "2"]], ids=["raw-dir", "no-download", "mirror", "retries"])
def test_the_release_options_are_refused_with_a_file_of_ones_own(tmp_path, extra):
    """enwik8's --input-file reads that file, not the release (common.INSTEAD_OF_RELEASE): the options of getting
    the release would be ignored."""
    source = tmp_path / "input.txt"
    source.write_bytes(b"abcdefghij" * 100)
    result = cli("enwik8", "--input-file", str(source), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 *[value.format(d=tmp_path) for value in extra])
    option = extra[0].split("=")[0]
    assert one_line_error(result) == (f"error: {option}: an option of getting the release, which --input-file replaces "
                                      "with a file of yours (it would be ignored)")
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


def test_the_download_options_are_read_as_typed():
    """Only options typed refuse: the defaults of --retries and --mirror do not, and --raw-dir with --no-download
    (the release from the folder, nothing downloaded) is what --no-download is for."""
    from data_prep.common import argument_parser, check_arguments
    from data_prep.language_model import LM_STEPS

    parser = argument_parser("enwik8", "", "bin", LM_STEPS)
    parser.add_argument("--input-file")
    for argv in ([], ["--no-download"], ["--raw-dir", ".", "--no-download"], ["--mirror", "https://m.example", "--retries",
                                                                               "2"], ["--input-file", "x"]):
        check_arguments(parser.parse_args(argv), argv)


def test_a_misspelled_step_is_refused_before_any_work(tmp_path):
    multi30k_raw(tmp_path)
    result = multi30k(tmp_path, "--stop-after", "tokenise")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m data_prep.multi30k: error: argument --stop-after: invalid choice: 'tokenise' (choose from 'raw', "
        "'tokenize', 'text', 'learn_bpe', 'apply_bpe', 'binarize')")
    assert sorted(os.listdir(tmp_path)) == ["raw"]


@pytest.mark.parametrize("fractions, message", [
    (["--valid-fraction", "1.5"], "--valid-fraction: expected a fraction between 0 and 1 (both excluded), got 1.5"),
    (["--test-fraction", "0"], "--test-fraction: expected a fraction between 0 and 1 (both excluded), got 0.0"),
    (["--valid-fraction", "0.6", "--test-fraction", "0.5"],
     "--valid-fraction + --test-fraction: 0.6 + 0.5 leaves nothing to train on; expected a sum below 1"),
])
def test_byte_split_fractions_are_checked_up_front(tmp_path, fractions, message):
    source = tmp_path / "input.txt"
    source.write_bytes(b"abcdefghij" * 100)
    result = cli("enwik8", "--input-file", str(source), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--workers", "1", *fractions)
    assert one_line_error(result) == "error: " + message
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


def test_a_truncated_gzip_in_the_raw_dir_is_named(tmp_path):
    raw = multi30k_raw(tmp_path, gzipped_extra=True)
    damaged = raw / "test_2017_flickr.de.gz"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    assert one_line_error(multi30k(tmp_path)) == (
        f"error: {damaged}: a truncated compressed file (Compressed file ended before the end-of-stream marker was "
        "reached); download or copy it again")
    assert not (tmp_path / "bin").exists()


def test_a_truncated_gzip_read_as_text_is_named(tmp_path):
    path = tmp_path / "train.de.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"ein haus\n" * 1000)
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(PrepError, match=f"^{path}: a truncated compressed file"):
        list(read_lines(str(path)))


@pytest.mark.parametrize("name", ["train", "test_2016_flickr"])
def test_multi30k_sides_of_different_length_are_refused(tmp_path, name):
    raw = multi30k_raw(tmp_path)
    lines = (raw / f"{name}.en").read_text().splitlines(keepends=True)
    (raw / f"{name}.en").write_text("".join(lines[:-3]))
    assert one_line_error(multi30k(tmp_path)) == (
        f"error: Multi30k {name}: the sides differ in length ({raw / (name + '.de')} has {len(lines)} lines, "
        f"{raw / (name + '.en')} has {len(lines) - 3} lines); a parallel text needs one line per sentence pair on every "
        "side (a file cut off, or of another release?)")
    assert not (tmp_path / "bin").exists()


def test_a_cut_off_iwslt14_test_xml_is_refused(tmp_path):
    from raw_samples import write_iwslt14

    raw = tmp_path / "raw"
    write_iwslt14(str(raw), train_pairs=30, test_pairs=8)
    xml = raw / "de-en" / "IWSLT14.TED.tst2010.de-en.en.xml"
    kept = [line for line in xml.read_text().splitlines(keepends=True) if not line.startswith(('<seg id="7"', '<seg id="8"'))]
    xml.write_text("".join(kept))
    result = cli("iwslt14", "--raw-dir", str(raw), "--work-dir", str(tmp_path / "work"), "--dest", str(tmp_path / "bin"),
                 "--no-download", "--workers", "1")
    assert one_line_error(result) == (
        f"error: IWSLT14 IWSLT14.TED.tst2010: the sides differ in length ({raw / 'de-en' / 'IWSLT14.TED.tst2010.de-en.de.xml'} "
        f"has 8 lines, {xml} has 6 lines); a parallel text needs one line per sentence pair on every side (a file cut off, "
        "or of another release?)")


def test_a_changed_raw_file_is_prepared_again(tmp_path):
    raw = multi30k_raw(tmp_path, gzipped_extra=True)  # (every test set there: the raw step is stamped)
    assert multi30k(tmp_path, "--stop-after", "raw").returncode == 0
    again = multi30k(tmp_path, "--stop-after", "raw")
    assert "[1/6] raw: up to date" in again.stderr
    text = (raw / "train.de").read_text().replace("Haus", "Hütte")
    (raw / "train.de").write_text(text)
    changed = multi30k(tmp_path, "--stop-after", "raw")
    assert changed.returncode == 0 and "[1/6] raw: up to date" not in changed.stderr, changed.stderr
    assert (tmp_path / "work" / "raw" / "train.de").read_text() == text


def test_the_debug_variable_shows_the_traceback(tmp_path):
    multi30k_raw(tmp_path)
    code = (f"import sys; sys.path.insert(0, {ROOT_DIR!r}); from data_prep.multi30k import main; "
            f"main({['--raw-dir', str(tmp_path / 'raw'), '--work-dir', str(tmp_path / 'w'), '--workers', '0']!r})")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "FAIRSEQ_PLUGINS_DEBUG": "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr and "PrepError: --workers" in result.stderr
