"""benchmarks/quality.py and benchmarks/decode_speed.py: their log parsing,
claim verdicts and report writing on known inputs, and a --quick run of the
real path (recipes, training, eval-lm, sampling) on generated data."""
import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")


def _load(name):
    sys.path.insert(0, BENCHMARKS)  # decode_speed imports quality by name
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


quality = _load("quality")

TRAIN_LOG = """\
2026-11-22 01:23:33 | INFO | fairseq_cli.train | {'_name': None, 'common': {}}
2026-11-22 01:23:33 | INFO | fairseq_cli.train | num. shared model params: 3,411,968 (num. trained: 3,411,968)
2026-11-22 01:23:57 | INFO | train_inner | epoch 001:     20 / 121 loss=13.236, nll_loss=13.152, ppl=9104.32, wps=3279.7, ups=0.89, wpb=3696.1, bsz=273.1, num_updates=20, lr=0.000100095, gnorm=2.993, train_wall=23, wall=24
2026-11-22 01:24:13 | INFO | train_inner | epoch 001:     40 / 121 loss=11.775, nll_loss=11.527, ppl=2951, wps=4460.5, ups=1.23, wpb=3639.6, bsz=260.9, num_updates=40, lr=0.00020009, gnorm=1.611, train_wall=16, wall=41
2026-11-22 01:25:19 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.129 | nll_loss 7.318 | ppl 159.56 | wps 11739.3 | wpb 2525.5 | bsz 169 | num_updates 41
2026-11-22 01:26:58 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.563 | nll_loss 5.496 | ppl 45.13 | wps 8906.2 | wpb 2525.5 | bsz 169 | num_updates 50 | best_loss 6.563
2026-11-22 01:29:54 | INFO | fairseq_cli.train | done training in 380.9 seconds
"""


def test_parse_train_log_reads_params_time_curve_and_last_validation():
    parsed = quality.parse_train_log(TRAIN_LOG)
    assert parsed["params"] == 3411968
    assert parsed["train_seconds"] == 380.9
    assert parsed["train_curve"] == [[20, 13.236], [40, 11.775]]
    assert parsed["valid"] == {"loss": 6.563, "nll_loss": 5.496, "ppl": 45.13, "num_updates": 50}
    assert parsed["valid_curve"] == [[41, 8.129], [50, 6.563]]
    assert parsed["updates"] == 50


def test_parse_train_log_keeps_only_the_last_run_of_a_resumed_log():
    first = TRAIN_LOG.replace("380.9", "10.0").replace("3,411,968", "999")
    parsed = quality.parse_train_log(first + TRAIN_LOG)
    assert parsed["params"] == 3411968 and parsed["train_seconds"] == 380.9 and len(parsed["train_curve"]) == 2


def test_parse_train_log_rejects_an_unfinished_run():
    with pytest.raises(SystemExit, match="did not finish"):
        quality.parse_train_log(TRAIN_LOG.replace("done training", "stopped"))


def test_parse_generate_speed():
    line = ("2026-11-22 | INFO | fairseq_cli.generate | Translated 1,000 sentences (13,672 tokens) in 52.3s "
            "(19.12 sentences/s, 261.41 tokens/s)\n")
    assert quality.parse_generate_speed("noise\n" + line) == {
        "sentences": 1000, "tokens": 13672, "seconds": 52.3, "sentences_per_second": 19.12,
        "tokens_per_second": 261.41}
    with pytest.raises(SystemExit, match="Translated"):
        quality.parse_generate_speed("nothing here")


def _result(value, metric="sacrebleu"):
    return {"score": {metric: value}}


@pytest.mark.parametrize("relation, ours, theirs, expected", [
    ("better", 21.5, 20.0, "holds"), ("better", 18.5, 20.0, "not reproduced"),
    ("better", 20.9, 20.0, "within noise"), ("better", 19.1, 20.0, "within noise"),
    ("worse", 18.5, 20.0, "holds"), ("worse", 21.5, 20.0, "not reproduced"), ("worse", 20.0, 20.0, "within noise"),
    ("works", 10.0, 20.0, "holds"), ("works", 9.9, 20.0, "not reproduced"),
    ("matches", 19.0, 20.0, "holds"), ("matches", 18.9, 20.0, "not reproduced"), ("matches", 25.0, 20.0, "holds"),
])
def test_verdict_on_bleu(relation, ours, theirs, expected):
    suite = quality.SUITES["multi30k"]
    row = quality.Row("x", "arch", claim=quality.Claim("claim", "base", relation))
    text = quality.verdict(suite, row, {"x": _result(ours), "base": _result(theirs)})
    assert f"**{expected}**" in text and f"{ours:.2f} vs {theirs:.2f} (base)" in text


def test_no_bleu_verdict_against_a_baseline_that_learnt_nothing():
    suite = quality.SUITES["multi30k"]
    row = quality.Row("x", "arch", claim=quality.Claim("claim", "base", "works"))
    text = quality.verdict(suite, row, {"x": _result(0.08), "base": _result(0.08)})
    assert "not measurable" in text and "**" not in text


def test_verdict_lower_is_better_for_bits_and_missing_baseline():
    suite = quality.SUITES["shakespeare"]
    row = quality.Row("x", "arch", claim=quality.Claim("claim", "base"))
    metric = suite.metric
    assert "**holds**" in quality.verdict(suite, row, {"x": _result(1.9, metric), "base": _result(2.0, metric)})
    assert "**not reproduced**" in quality.verdict(suite, row, {"x": _result(2.1, metric), "base": _result(2.0, metric)})
    assert "**within noise**" in quality.verdict(suite, row, {"x": _result(1.95, metric), "base": _result(2.0, metric)})
    assert "**within noise**" in quality.verdict(suite, row, {"x": _result(2.05, metric), "base": _result(2.0, metric)})
    works = quality.Row("x", "arch", claim=quality.Claim("claim", "base", "works"))
    assert "**holds**" in quality.verdict(suite, works, {"x": _result(2.19, metric), "base": _result(2.0, metric)})
    assert "**not reproduced**" in quality.verdict(suite, works, {"x": _result(2.21, metric), "base": _result(2.0, metric)})
    assert "not measured" in quality.verdict(suite, row, {"x": _result(1.9, metric)})
    matches = quality.Row("x", "arch", claim=quality.Claim("claim", "base", "matches"))
    assert "**holds**" in quality.verdict(suite, matches, {"x": _result(2.06, metric), "base": _result(2.0, metric)})
    assert "**not reproduced**" in quality.verdict(suite, matches, {"x": _result(2.07, metric), "base": _result(2.0, metric)})


def test_every_claim_names_a_row_of_its_suite():
    for suite in quality.SUITES.values():
        names = [row.name for row in suite.rows]
        assert len(names) == len(set(names))
        assert set(suite.quick_rows) <= set(names)
        for row in suite.rows:
            if row.claim:
                assert row.claim.baseline in names and row.claim.baseline != row.name


def test_write_report_replaces_only_its_section(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Results\n\nhand-written text\n")
    quality.write_report(str(path), f"{quality.REPORT_BEGIN}\nfirst\n{quality.REPORT_END}\n")
    quality.write_report(str(path), f"{quality.REPORT_BEGIN}\nsecond\n{quality.REPORT_END}\n")
    text = path.read_text()
    assert text.startswith("# Results\n\nhand-written text\n") and "second" in text and "first" not in text
    assert text.count(quality.REPORT_BEGIN) == 1 and text.count(quality.REPORT_END) == 1


def _tiny_data(root):
    """Generated stand-ins for the shared data: word-level 'tales' and a byte corpus."""
    rng = random.Random(0)
    words = "the king queen frog said and went to a forest castle little girl wolf gold".split()
    grimm = root / "grimm"
    grimm.mkdir(parents=True)
    for split, lines in (("train", 400), ("valid", 40), ("test", 40)):
        (grimm / f"{split}.txt").write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + " .\n"
                                                    for _ in range(lines)))
    shakespeare = root / "tiny_shakespeare"
    shakespeare.mkdir()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(1500))
    (shakespeare / "input.txt").write_text(text[:60_000])


def test_quick_run_trains_scores_reports_and_resumes(tmp_path):
    """The real path on generated data: recipes train and eval-lm two rows, the report has their
    numbers and the loss plot, and a second run trains nothing again."""
    _tiny_data(tmp_path / "data")
    work, report = tmp_path / "work", tmp_path / "docs" / "results.md"
    command = [sys.executable, os.path.join(BENCHMARKS, "quality.py"), "--quick", "--suites", "grimm",
               "--rows", "softmax_1head,extractor_me", "--data-root", str(tmp_path / "data"),
               "--work-dir", str(work), "--output", str(report)]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = {name: json.loads((work / "results" / "grimm" / f"{name}.json").read_text())
            for name in ("softmax_1head", "extractor_me")}
    for result in rows.values():
        assert result["updates"] == 6 and result["params"] > 0 and len(result["train_curve"]) == 3
        assert result["score"]["perplexity"] > 1 and result["git"] != "unknown"
        assert result["evaluate_command"].startswith("NUM_GPUS=0") and "recipes/wikitext2/evaluate.sh" in result["evaluate_command"]
    assert rows["extractor_me"]["params"] < rows["softmax_1head"]["params"]  # ME has no q/k/v projections
    text = report.read_text()
    me_row = next(line for line in text.splitlines() if line.startswith("| extractor_me |"))
    assert "`extractor_me_lm`" in me_row and ("**holds**" in me_row or "**not reproduced**" in me_row)
    assert f"{rows['extractor_me']['score']['perplexity']:.1f}" in me_row
    assert (tmp_path / "docs" / "quality_grimm_loss.png").stat().st_size > 1000
    assert "recipes/wikitext2/train.sh softmax_1head_lm" in text

    # An exported recipe variable does not leak into the rows (it would change them unrecorded).
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MAX_UPDATE": "9"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert "training" not in second.stderr and second.stderr.count("done before") == 2

    # Rendering for another suite keeps this one's table: the report shows every suite with results.
    third = subprocess.run(command[:command.index("--suites") + 1] + ["shakespeare", "--report-only"]
                           + command[command.index("--suites") + 2:], cwd=tmp_path, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr[-3000:]
    assert me_row in report.read_text() and "tiny Shakespeare" in report.read_text()


def test_decode_speed_samples_exactly_the_asked_lengths(tmp_path):
    _tiny_data(tmp_path / "data")
    completed = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "decode_speed.py"), "--quick", "--parts", "lm", "--lengths", "8,24",
         "--data-root", str(tmp_path / "data"), "--work-dir", str(tmp_path / "work"),
         "--output", str(tmp_path / "decode.md")], cwd=tmp_path, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    text = (tmp_path / "decode.md").read_text()
    for kind in ("softmax (4 heads)", "cosformer (4 heads)", "extractor_me"):
        assert f"| {kind} |" in text
    assert "L = 24" in text and "8-24" in text


def test_hint_check_reads_the_summary_that_syntax_hints_writes(tmp_path):
    """BET(SG)'s guard reads the counts where data_prep/syntax_hints.py writes them (its Summary and info file)."""
    from data_prep.syntax_hints import Summary, info_path, write_json

    prefix = str(tmp_path / "train.de-en.en.hints")
    with pytest.raises(SystemExit, match="without a 'summary'"):
        quality.check_hints_reach_past_previous_token(prefix, "parser")
    for distances, reaches_back in (([0, 0, 0, 0], False), ([0, 2, 0, 0], True)):  # the last value is </s>'s
        summary = Summary()
        summary.add(distances)
        write_json(info_path(prefix), {"summary": summary.as_dict()})
        if reaches_back:
            quality.check_hints_reach_past_previous_token(prefix, "parser")
        else:
            with pytest.raises(SystemExit, match="would train as BET.SF."):
                quality.check_hints_reach_past_previous_token(prefix, "parser")


def test_recipe_variables_are_read_from_the_recipes():
    """The variables kept out of a row's inherited environment come from the recipes' sources: those every
    recipe documents in recipes/lib/common.sh and those only a dataset's config reads."""
    documented = {"DATA_BIN", "SAVE_DIR", "MAX_UPDATE", "LR", "WARMUP", "EXTRA_ARGS", "GEN_EXTRA_ARGS", "SYNTAX_HINTS",
                  "POINTER_LOSS_WEIGHT", "SPACY_MODEL", "TOKENS_PER_SAMPLE", "CONTEXT_WINDOW", "DRY_RUN"}
    assert documented <= quality.RECIPE_VARIABLES
    assert {"DATA_NAME", "SAVE_NAME"} <= quality.RECIPE_VARIABLES  # read with a default in recipes/lib/common.sh
    assert not {"PATH", "HOME"} & quality.RECIPE_VARIABLES
