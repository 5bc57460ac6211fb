"""The recipes' Python steps on hand-made inputs: scoring a fairseq-generate
output, checkpoint averaging, the eval-lm report."""
import json
import os
import subprocess
import sys

import pytest
import torch
from prepared import ROOT_DIR

LIB = os.path.join(ROOT_DIR, "recipes", "lib")
sys.path.insert(0, LIB)

import average_checkpoints  # noqa: E402
import lm_report  # noqa: E402
import score_translation  # noqa: E402

GENERATE_OUTPUT = """S-1\tzweiter satz
T-1\tthe second @-@ best sentence .
H-1\t-0.5\tthe second @-@ best sentence .
D-1\t-0.5\tthe second @-@ best sentence .
S-0\terster
T-0\tit &apos;s a well @-@ known fact .
H-0\t-0.3\tit &apos;s a well @-@ known fact .
2026-01-01 | INFO | fairseq_cli.generate | Translated 2 sentences
"""


def data_bin(tmp_path, settings, refs):
    os.makedirs(tmp_path / "bin" / "refs", exist_ok=True)
    (tmp_path / "bin" / "prepare.json").write_text(json.dumps(settings))
    (tmp_path / "bin" / "refs" / "test.en").write_text("".join(r + "\n" for r in refs))
    return str(tmp_path / "bin")


def test_scores_in_sentence_order_with_signature(tmp_path, capsys):
    (tmp_path / "gen.txt").write_text(GENERATE_OUTPUT)
    refs = ["It's a well-known fact.", "The second-best sentence."]
    result = score_translation.main([str(tmp_path / "gen.txt"), "--data-bin", data_bin(tmp_path, {"lowercase": True}, refs),
                                     "--lang", "en", "--json", str(tmp_path / "score.json")])
    assert result["tokenized_bleu"] == 100.0 and result["sacrebleu"] == 100.0  # detokenised, lower-cased comparison
    assert "case:lc" in result["sacrebleu_signature"] and "tok:13a" in result["sacrebleu_signature"]
    out = capsys.readouterr().out
    assert "test: tokenized BLEU (Moses tokens, BPE removed): 100.00" in out and "sacreBLEU signature: nrefs:1|case:lc" in out
    assert json.load(open(tmp_path / "score.json"))["sentences"] == 2


def test_compound_splitting_as_fairseq_compound_split_bleu():
    assert score_translation.compound_split("the well @-@ known Test-Fall") == "the well @ ##AT##-##AT## @ known Test ##AT##-##AT## Fall"
    hyp, ref = ["ein Test-Fall ."], ["ein Test-Satz ."]
    plain = score_translation.score(hyp, ref, None, "de", False, False, compound=False)["tokenized_bleu"]
    split = score_translation.score(hyp, ref, None, "de", False, False, compound=True)["tokenized_bleu"]
    assert split > plain  # "Test" now matches on its own


def test_sentencepiece_output_is_scored_as_it_is(tmp_path):
    (tmp_path / "gen.txt").write_text("T-0\tDas ist gut.\nH-0\t-0.1\tDas ist gut.\n")
    result = score_translation.main([str(tmp_path / "gen.txt"), "--data-bin",
                                     data_bin(tmp_path, {"bpe": "sentencepiece"}, ["Das ist gut."]), "--lang", "en"])
    assert result["sacrebleu"] == 100.0 and "case:mixed" in result["sacrebleu_signature"]


def test_missing_hypotheses_are_an_error(tmp_path):
    (tmp_path / "gen.txt").write_text("T-0\tx\nH-0\t-1\tx\nT-1\ty\n")
    with pytest.raises(SystemExit, match="1 hypotheses but 2 references"):
        score_translation.read_generate_output(str(tmp_path / "gen.txt"))


def test_average_of_the_newest_update_checkpoints(tmp_path):
    for update, value in ((2, 1.0), (4, 3.0), (6, 5.0)):
        torch.save({"model": {"w": torch.full((2,), value, dtype=torch.float16), "steps": torch.tensor([update])},
                    "extra_state": {"update": update}}, tmp_path / f"checkpoint_1_{update}.pt")
    torch.save({"model": {}}, tmp_path / "checkpoint_best.pt")
    assert average_checkpoints.last_checkpoints(str(tmp_path), 2) == [str(tmp_path / "checkpoint_1_6.pt"),
                                                                      str(tmp_path / "checkpoint_1_4.pt")]
    subprocess.run([sys.executable, os.path.join(LIB, "average_checkpoints.py"), "--dir", str(tmp_path), "--last", "2",
                    "--output", str(tmp_path / "avg.pt")], check=True, capture_output=True)
    state = torch.load(tmp_path / "avg.pt")
    assert state["model"]["w"].dtype == torch.float16 and state["model"]["w"].tolist() == [4.0, 4.0]
    assert state["model"]["steps"].tolist() == [5] and state["extra_state"] == {"update": 6}  # the rest: the newest's
    with pytest.raises(SystemExit, match="has 3 such checkpoints, 10 were asked for"):
        average_checkpoints.last_checkpoints(str(tmp_path), 10)


def test_lm_report_units(tmp_path, capsys):
    (tmp_path / "log").write_text("| Evaluated 1,000 tokens in 1.0s (1000.00 tokens/s)\n| Loss (base 2): 1.2500, Perplexity: 2.38\n")
    assert lm_report.main([str(tmp_path / "log"), "--unit", "byte", "--dataset", "enwik8"])["bits_per_character"] == 1.25
    assert "enwik8 test: 1.2500 bits per character (byte) over 1000 tokens" in capsys.readouterr().out
    assert lm_report.main([str(tmp_path / "log"), "--unit", "word"])["perplexity"] == 2.38


@pytest.mark.parametrize("log, message", [
    # every sample skipped (e.g. all longer than the model's positions): fairseq prints perplexity 1.00 over nothing
    ("| Evaluated 0 tokens in 0.0s (0.00 tokens/s)\n| Loss (base 2): 0.0000, Perplexity: 1.00\n",
     "error: {log}: fairseq-eval-lm evaluated 0 tokens, so its 'Loss (base 2): 0.0000, Perplexity: 1.00' is over "
     "nothing; every sample was skipped: check --gen-subset, and --tokens-per-sample and --max-tokens against the "
     "data and the model's positions"),
    ("| Loss (base 2): 1.2500, Perplexity: 2.38\n",
     "error: {log}: fairseq-eval-lm printed no 'Evaluated N tokens' line, so the loss may be over nothing; pass the "
     "whole output of fairseq-eval-lm (its INFO lines included)"),
], ids=["0 tokens", "no token count"])
def test_lm_report_over_no_tokens_is_an_error(tmp_path, log, message):
    (tmp_path / "log").write_text(log)
    with pytest.raises(SystemExit) as exit_info:
        lm_report.main([str(tmp_path / "log"), "--unit", "word", "--json", str(tmp_path / "score.json")])
    assert str(exit_info.value.code) == message.format(log=tmp_path / "log")
    assert not (tmp_path / "score.json").exists()
