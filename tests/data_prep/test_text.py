"""data_prep.text: the Python versions of the Moses/fairseq shell steps."""
from data_prep import text
from data_prep.enwik8 import byte_lines, split_bytes


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_clean_corpus_follows_clean_corpus_n(tmp_path):
    src = write(tmp_path / "c.de", ["a b c", "", "a  b | c ", "x " * 5, "w", "ein zwei"])
    tgt = write(tmp_path / "c.en", ["a b", "x", "a b c", "y", "v " * 3, "one two three"])
    kept = text.clean_corpus(src, tgt, str(tmp_path / "o.de"), str(tmp_path / "o.en"), min_len=1, max_len=4, ratio=1.5)
    # kept: 3/2 words (ratio 1.5 is allowed), '|' removed and spaces collapsed; 2/3 words
    # dropped: empty side, 5 words > max 4, 1 vs 3 words (ratio 3)
    assert kept == 3
    assert (tmp_path / "o.de").read_text() == "a b c\na b c\nein zwei\n"
    assert (tmp_path / "o.en").read_text() == "a b\na b c\none two three\n"


def test_segments_as_the_fairseq_scripts_and_sacrebleu_read_them(tmp_path):
    sgm = write(tmp_path / "t.sgm", ['<refset setid="x">', '<doc docid="d">', '<seg id="1">  It\u2019s  &amp; fine </seg>',
                                     '<seg id="2">Two</seg>', "</doc>"])
    assert text.sgm_segments(sgm) == ["It's  &amp; fine", "Two"]
    assert text.reference_segments(sgm) == ["It\u2019s &amp; fine", "Two"]


def test_moses_pipeline_matches_tokenizer_perl_conventions():
    wmt = text.MosesPipeline("en", aggressive_dashes=True, normalize_punctuation=True, remove_non_printing=True)
    assert wmt("It's a well-known \u201cfact\u201d\u00a0\x07here.") == "It &apos;s a well @-@ known &quot; fact &quot; here ."
    iwslt = text.MosesPipeline("de", lowercase=True)
    assert iwslt("Das ist's, \"gut\" | 3.5!") == "das ist &apos; s , &quot; gut &quot; &#124; 3.5 !"


def test_split_every_is_awk_nr_modulo(tmp_path):
    src = write(tmp_path / "all", [str(i) for i in range(1, 51)])
    text.split_every(src, 23, str(tmp_path / "held"), str(tmp_path / "rest"))
    assert (tmp_path / "held").read_text().split() == ["23", "46"]
    assert len((tmp_path / "rest").read_text().split()) == 48


def test_bytes_become_one_token_each_with_newlines_as_line_ends():
    data = "ab\n\n\u00e9\n".encode("utf-8")
    assert list(byte_lines(data)) == ["97 98", "", "195 169"]
    assert sum(len(line.split()) + 1 for line in byte_lines(data)) == len(data)  # + end-of-line symbols
    parts = split_bytes(bytes(range(100)), valid=5, test=5)
    assert [len(parts[s]) for s in ("train", "valid", "test")] == [90, 5, 5]
    assert parts["test"] == bytes(range(95, 100))


def test_bpe_learning_draws_no_bar_into_a_log(tmp_path, capsys, monkeypatch):
    """Not on a terminal (stderr captured): neither subword-nmt's own bar over the merges nor one of ours
    redrawn into the log; with a progress interval of 0 the log gets plain lines instead."""
    from data_prep import common

    letters = "abcdefgh"  # words of 3 to 6 letters, enough distinct pairs for 20 merges
    corpus = write(tmp_path / "train.txt", [" ".join(letters[i % 8] + letters[(i * j) % 8] + letters[j % 5] * (1 + j % 4)
                                                     for j in range(12)) for i in range(60)])
    text.learn_bpe([corpus], str(tmp_path / "codes"), merges=20)
    err = capsys.readouterr().err
    assert "\r" not in err and "it/s" not in err and "merges" not in err
    assert len((tmp_path / "codes").read_text().splitlines()) > 1
    monkeypatch.setattr(common, "LOG_PROGRESS_SECONDS", 0.0)
    text.learn_bpe([corpus], str(tmp_path / "codes2"), merges=20)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(" | INFO | data_prep | learn_bpe codes2: " in line and line.endswith("/20 merges") for line in lines)
    assert "\r" not in "".join(lines)


def test_log_progress_is_a_line_at_most_every_interval(capsys):
    from data_prep.common import LogProgress

    with LogProgress(total=30, desc="tokenize train.de", unit="lines", interval=3600.0) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""  # within the interval: nothing
    with LogProgress(total=30, desc="tokenize train.de", unit="lines", interval=0.0) as bar:
        bar.update(10)
        bar.update(20)
    # fairseq's format: time | level | logger | message
    assert [line.split(" | ")[1:] for line in capsys.readouterr().err.splitlines()] == [
        ["INFO", "data_prep", "tokenize train.de: 10/30 lines"], ["INFO", "data_prep", "tokenize train.de: 30/30 lines"]]
