"""benchmarks/quality.py and benchmarks/decode_speed.py: their log parsing,
claim verdicts and report writing on known inputs, and a --quick run of the
real path (recipes, training, eval-lm, sampling) on generated data."""
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from benchmarks import decode_speed, provenance, quality

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")

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


def test_parse_train_log_continues_the_curves_of_a_run_resumed_from_a_checkpoint():
    """A killed run's log, then a run resumed from its checkpoint at update 20: the first run's points after
    update 20 (logged, never saved) give way to the resumed run's."""
    killed = TRAIN_LOG.replace("done training in 380.9 seconds", "(killed)")
    resumed = TRAIN_LOG.replace(
        "| num. shared model params",
        "| Loaded checkpoint ck/checkpoint_last.pt (epoch 1 @ 20 updates)\n2026-11-22 | INFO | fairseq_cli.train "
        "| num. shared model params").replace("loss=13.236", "loss=13.0").replace("num_updates=20,", "num_updates=30,")
    parsed = quality.parse_train_log(killed + resumed)
    assert parsed["train_curve"] == [[20, 13.236], [30, 13.0], [40, 11.775]]
    assert parsed["valid_curve"] == [[41, 8.129], [50, 6.563]] and parsed["train_seconds"] == 380.9
    # the killed run alone has not finished, unless that is not asked (a run scored after its training)
    with pytest.raises(SystemExit, match="did not finish"):
        quality.parse_train_log(killed)
    assert quality.parse_train_log(killed, finished=False)["train_seconds"] is None


def test_parse_train_log_keeps_the_curves_across_a_run_that_crashed_before_it_loaded_anything():
    """Killed at update 40 (saved at 20), a start that crashed while it built the model (no checkpoint loaded, no
    update), then the run resumed from update 20: the curves from update 0 stay."""
    killed = TRAIN_LOG.replace("done training in 380.9 seconds", "(killed)")
    crashed = ("2026-11-22 | INFO | fairseq_cli.train | {'_name': None}\n"
               "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")
    resumed = TRAIN_LOG.replace(
        "| num. shared model params",
        "| Loaded checkpoint ck/checkpoint_last.pt (epoch 1 @ 20 updates)\n2026-11-22 | INFO | fairseq_cli.train "
        "| num. shared model params").replace("loss=13.236", "loss=13.0").replace("num_updates=20,", "num_updates=30,")
    parsed = quality.parse_train_log(killed + crashed + resumed)
    assert parsed["train_curve"] == [[20, 13.236], [30, 13.0], [40, 11.775]]
    assert parsed["valid_curve"] == [[41, 8.129], [50, 6.563]]
    # a run from scratch (fairseq found no checkpoint) replaces the curves before it
    scratch = TRAIN_LOG.replace("| num. shared model params", "| No existing checkpoint found ck/checkpoint_last.pt\n"
                                "2026-11-22 | INFO | fairseq_cli.train | num. shared model params").replace(
        "loss=11.775", "loss=11.0").replace("num_updates=20,", "num_updates=10,")
    assert quality.parse_train_log(killed + crashed + scratch)["train_curve"] == [[10, 13.236], [40, 11.0]]


def test_a_rows_settings_resume_as_row_json_holds_them_and_only_on_the_same_device(tmp_path, monkeypatch):
    """Settings compare as row.json holds them (a tuple is a list there), so that a row of such settings
    resumes instead of starting again each time; a run on another device than the folder's is not resumed (its
    training time would mix the two), while a CPU run keeps the row.json of the settings alone; a run trained
    to the end is scored on any device."""
    updates = {"done": 40}
    monkeypatch.setattr(quality, "checkpoint_updates", lambda path: updates["done"] if os.path.isfile(path) else 0)
    folder = tmp_path / "row"
    settings = {"env": {"MAX_UPDATE": "100"}, "args": ("--arch", "x")}

    def done(device, restart=False):
        return quality.row_updates_done(str(folder), settings, device, 100, restart=restart, label="x")

    assert done("cpu") == 0
    assert json.loads((folder / quality.ROW_SETTINGS_FILE).read_text()) == {"env": {"MAX_UPDATE": "100"}, "args": ["--arch", "x"]}
    (folder / "checkpoint_last.pt").write_bytes(b"")
    assert done("cpu") == 40  # (the folders of before the device counted: their row.json is the settings alone)
    assert done("cuda") == 0  # (not resumed: removed)
    assert json.loads((folder / quality.ROW_SETTINGS_FILE).read_text())["device"] == "cuda"
    (folder / "checkpoint_last.pt").write_bytes(b"")
    assert done("cuda") == 40
    assert done("cpu") == 0
    # trained to the end on the GPU: scored on the CPU, not trained again
    assert done("cuda") == 0 and json.loads((folder / quality.ROW_SETTINGS_FILE).read_text())["device"] == "cuda"
    (folder / "checkpoint_last.pt").write_bytes(b"")
    updates["done"] = 100
    assert done("cpu") == 100 and (folder / "checkpoint_last.pt").is_file()
    assert done("cpu", restart=True) == 0  # (--force)
    other = {**settings, "env": {"MAX_UPDATE": "200"}}
    assert quality.row_updates_done(str(folder), other, "cpu", 200, restart=False, label="x") == 0


def test_a_rows_folder_resumes_a_run_of_the_same_settings_and_restarts_any_other(tmp_path, monkeypatch):
    monkeypatch.setattr(quality, "checkpoint_updates", lambda path: 40 if os.path.isfile(path) else 0)
    folder = tmp_path / "row"
    settings = {"env": {"MAX_UPDATE": "100"}}

    def done(settings, restart=False):
        return quality.row_updates_done(str(folder), settings, "cpu", 100, restart=restart, label="x")

    assert done(settings) == 0
    assert json.loads((folder / quality.ROW_SETTINGS_FILE).read_text()) == settings
    (folder / "checkpoint_last.pt").write_bytes(b"")
    assert done(settings) == 40  # resumed
    other = {"env": {"MAX_UPDATE": "200"}}
    assert done(other) == 0  # another run: removed
    assert json.loads((folder / quality.ROW_SETTINGS_FILE).read_text()) == other
    (folder / "checkpoint_last.pt").write_bytes(b"")
    assert done(other, restart=True) == 0  # --force
    (folder / "checkpoint_last.pt").write_bytes(b"")
    (folder / quality.ROW_SETTINGS_FILE).unlink()  # a folder of before the settings file: its run is unknown
    assert done(other) == 0
    assert not (folder / "checkpoint_last.pt").exists()


def test_a_rows_folder_of_other_settings_is_removed_without_reading_its_checkpoint(tmp_path, monkeypatch):
    """Only a run of the same settings on another device is asked whether it was trained to the end: a folder of
    other settings is removed unread (a damaged checkpoint there, of a run killed while fairseq copied it, does
    not stop the row), and the log says why a folder went."""
    folder = tmp_path / "row"
    settings = {"env": {"MAX_UPDATE": "100"}}
    read, logged = [], []
    monkeypatch.setattr(quality, "log", logged.append)

    def damaged(path):
        if os.path.isfile(path):
            read.append(path)
            raise SystemExit(f"error: {path}: not a readable fairseq checkpoint")
        return 0

    monkeypatch.setattr(quality, "checkpoint_updates", damaged)
    folder.mkdir()
    (folder / quality.ROW_SETTINGS_FILE).write_text(json.dumps({"env": {"MAX_UPDATE": "50"}, "device": "cuda"}))
    (folder / "checkpoint_last.pt").write_bytes(b"damaged")
    assert quality.row_updates_done(str(folder), settings, "cpu", 100, restart=False, label="x") == 0
    assert read == [] and not (folder / "checkpoint_last.pt").exists() and "of other settings" in logged[-1]
    # the same settings, unfinished on the GPU: read (to tell a finished run), removed, and said so
    monkeypatch.setattr(quality, "checkpoint_updates", lambda path: 40 if os.path.isfile(path) else 0)
    (folder / quality.ROW_SETTINGS_FILE).write_text(json.dumps({**settings, "device": "cuda"}))
    (folder / "checkpoint_last.pt").write_bytes(b"")
    assert quality.row_updates_done(str(folder), settings, "cpu", 100, restart=False, label="x") == 0
    assert "unfinished on cuda" in logged[-1]


def test_one_process_at_a_time_trains_a_row_and_another_waits_for_its_result_or_its_runs_stop(tmp_path, monkeypatch):
    """The row's lock: another process's training of it is waited for, then its result taken; a thread of
    run_parallel (which no signal reaches) gives up the wait when its run stops, instead of waiting hours and
    then training, and no command starts after the stop."""
    import threading

    ctx = quality.Context(data_root=str(tmp_path / "data"), work_dir=str(tmp_path / "work"), quick=False)
    suite = quality.SUITES["grimm"]
    row = suite.rows[0]
    waiting, outcome = threading.Event(), []
    monkeypatch.setattr(quality, "log", lambda message: waiting.set() if "waiting for it" in message else None)
    monkeypatch.setattr(quality, "train_and_score_row", lambda *args, **kwargs: outcome.append("trained"))

    def run():
        try:
            outcome.append(quality.run_row(ctx, suite, row))
        except SystemExit as error:
            outcome.append(str(error))

    for finish in ("the other process", "the run stops"):
        waiting.clear()
        if finish == "the run stops":
            os.remove(quality.result_path(ctx, suite, row))  # (the row to train again)
        with quality.exclusive_lock(quality.row_dir(ctx, suite, row) + ".lock"):  # (the other process, training it)
            second = threading.Thread(target=run, daemon=True)
            second.start()
            assert waiting.wait(60), "the second run did not wait"
            if finish == "the other process":
                quality.write_json(quality.result_path(ctx, suite, row), _grimm_result(ctx, suite, row, train_command="other"))
            else:
                ctx.stop()
                second.join(30)
                assert not second.is_alive(), "the row went on waiting after the run stopped"
        second.join(60)
        assert not second.is_alive()
    assert outcome[0]["train_command"] == "other" and len(outcome) == 2
    assert "waiting for another process's training: the run is stopping" in outcome[1]
    with pytest.raises(SystemExit, match="not started: the run is stopping"):
        ctx.run(suite.name, {}, [sys.executable, "-c", "pass"])


def test_the_training_time_is_fairseqs_cumulative_time_across_resumed_runs(monkeypatch):
    log = "x | fairseq_cli.train | done training in 10.0 seconds\n"  # (the run killed before it left no line)
    monkeypatch.setattr(quality, "checkpoint_state", lambda path: {"extra_state": {"previous_training_time": 3600.04}})
    assert quality.total_train_seconds("checkpoint_u8.pt", log) == 3600.0
    monkeypatch.setattr(quality, "checkpoint_state", lambda path: {"extra_state": {}})
    assert quality.total_train_seconds("checkpoint_u8.pt", log) == 10.0


def test_a_damaged_checkpoint_is_a_one_line_error(tmp_path):
    damaged = tmp_path / "checkpoint_last.pt"
    damaged.write_bytes(b"PK\x03\x04 cut off while fairseq copied it")
    with pytest.raises(SystemExit, match=r"checkpoint_last.pt: not a readable fairseq checkpoint \(") as error:
        quality.checkpoint_updates(str(damaged))
    assert "\n" not in str(error.value)
    assert quality.checkpoint_updates(str(tmp_path / "none.pt")) == 0


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


# ---------------------------------------------------------------------------
# Verdicts: paired bootstrap on constructed systems with known outcomes
# ---------------------------------------------------------------------------

_WORDS = ("a man in a red shirt is riding a bike down the street while two dogs play near the green "
          "fence and a woman with a hat looks at the camera").split()


def _references(count=300, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 14))) for _ in range(count)]


def _system(references, correct_share, seed=1):
    """Hypotheses that copy the reference for a share of the sentences (spread over the set) and keep only
    its first three words elsewhere: the BLEU grows with the share."""
    rng = random.Random(seed)
    keep = set(rng.sample(range(len(references)), round(correct_share * len(references))))
    return [ref if i in keep else " ".join(ref.split()[:3]) for i, ref in enumerate(references)]


def _bleu_row(hypotheses, references, params=3_870_000):
    from sacrebleu.metrics import BLEU

    score = round(BLEU(lowercase=True).corpus_score(hypotheses, [references]).score, 2)
    return {"score": {"sacrebleu": score}, "hypotheses": hypotheses, "params": params}


def _bleu_verdict(relation, ours, theirs, references):
    suite = quality.SUITES["multi30k"]
    row = quality.Row("x", "arch", claim=quality.Claim("claim", "base", relation))
    refs = quality.References(tuple(references), lowercase=True)
    return quality.verdict(suite, row, {"x": ours, "base": theirs}, refs)


REFERENCES = _references()
BASELINE_SHARE = 0.5


@pytest.mark.parametrize("relation, ours_share, expected", [
    ("better", 0.8, "holds"), ("better", 0.2, "not reproduced"), ("better", BASELINE_SHARE, "within noise"),
    ("worse", 0.2, "holds"), ("worse", 0.8, "not reproduced"), ("worse", BASELINE_SHARE, "within noise"),
    ("works", 0.4, "holds"), ("works", 0.0, "not reproduced"),
    ("matches", BASELINE_SHARE, "holds"), ("matches", 0.2, "not reproduced"), ("matches", 0.8, "holds"),
])
def test_verdict_on_bleu_is_a_paired_bootstrap(relation, ours_share, expected):
    """Identical systems are never significant; a clearly better or worse one is (p < 0.05)."""
    theirs = _bleu_row(_system(REFERENCES, BASELINE_SHARE), REFERENCES)
    ours = _bleu_row(theirs["hypotheses"] if ours_share == BASELINE_SHARE else _system(REFERENCES, ours_share, seed=2),
                     REFERENCES)
    text = _bleu_verdict(relation, ours, theirs, REFERENCES)
    assert f"**{expected}**" in text, text
    assert f"{ours['score']['sacrebleu']:.2f} vs {theirs['score']['sacrebleu']:.2f} (base)" in text
    assert "95 % intervals" in text and "parameter" not in text


def test_identical_systems_get_p_one_and_a_clear_gain_p_below_005():
    theirs = _system(REFERENCES, BASELINE_SHARE)
    refs = quality.References(tuple(REFERENCES), lowercase=True)
    same = quality.paired_bleu(theirs, theirs, refs)
    assert same.p_value == 1.0 and same.ours == same.theirs
    better = quality.paired_bleu(_system(REFERENCES, 0.8, seed=2), theirs, refs)
    assert better.p_value < 0.05 and better.ours > better.theirs + 5
    # the scores are sacreBLEU's corpus BLEU of the stored hypotheses
    assert better.ours == pytest.approx(_bleu_row(_system(REFERENCES, 0.8, seed=2), REFERENCES)["score"]["sacrebleu"], abs=0.006)
    # a one-sentence difference is a gap, but not a significant one
    nearly = list(theirs)
    nearly[0] = REFERENCES[0] if nearly[0] != REFERENCES[0] else nearly[0] + " extra"
    small = quality.paired_bleu(nearly, theirs, refs)
    assert small.ours != small.theirs and small.p_value >= 0.05


def test_verdict_names_a_baseline_with_far_fewer_parameters():
    theirs = _bleu_row(_system(REFERENCES, BASELINE_SHARE), REFERENCES, params=820_000)
    ours = _bleu_row(_system(REFERENCES, 0.8, seed=2), REFERENCES, params=9_080_000)
    text = _bleu_verdict("better", ours, theirs, REFERENCES)
    assert "**holds**" in text and "not parameter-matched: 9.08M parameters against 0.82M" in text


def test_no_verdict_without_stored_items_or_with_items_that_do_not_give_the_score():
    theirs = _bleu_row(_system(REFERENCES, BASELINE_SHARE), REFERENCES)
    ours = _bleu_row(_system(REFERENCES, 0.8, seed=2), REFERENCES)
    old_row = {"score": ours["score"]}  # a row of before the paired test: no hypotheses
    text = _bleu_verdict("better", old_row, theirs, REFERENCES)
    assert "no verdict" in text and "--rescore" in text and "**" not in text
    with pytest.raises(SystemExit, match="not those that were scored"):
        _bleu_verdict("better", dict(ours, score={"sacrebleu": ours["score"]["sacrebleu"] + 1}), theirs, REFERENCES)


def test_no_bleu_verdict_against_a_baseline_that_learnt_nothing():
    suite = quality.SUITES["multi30k"]
    row = quality.Row("x", "arch", claim=quality.Claim("claim", "base", "works"))
    text = quality.verdict(suite, row, {"x": {"score": {"sacrebleu": 0.08}}, "base": {"score": {"sacrebleu": 0.08}}})
    assert "not measurable" in text and "**" not in text


def _lm_row(bits_per_token, metric, blocks=120, tokens=64, seed=0, noise=0.3):
    """Blocks of ``tokens`` tokens whose bits vary around ``bits_per_token`` (the same pattern for a given seed)."""
    rng = random.Random(seed)
    items = [[tokens, tokens * max(0.1, bits_per_token + rng.uniform(-noise, noise))] for _ in range(blocks)]
    loss = sum(b for _, b in items) / (blocks * tokens)
    value = round(loss, 4) if metric == "bits_per_character" else round(2 ** loss, 2)
    return {"score": {metric: value}, "block_losses": items}


@pytest.mark.parametrize("suite_name", ["shakespeare", "grimm"])
def test_verdict_on_language_models_is_a_paired_bootstrap_over_blocks(suite_name):
    suite = quality.SUITES[suite_name]
    metric = suite.metric
    base = _lm_row(2.0, metric)

    def text(relation, ours):
        row = quality.Row("x", "arch", claim=quality.Claim("claim", "base", relation))
        return quality.verdict(suite, row, {"x": ours, "base": base})

    assert "**holds**" in text("better", _lm_row(1.9, metric, seed=1))
    assert "**not reproduced**" in text("better", _lm_row(2.1, metric, seed=1))
    assert "**within noise**" in text("better", dict(base))  # identical: p = 1
    assert "**holds**" in text("matches", dict(base))
    assert "**not reproduced**" in text("matches", _lm_row(2.1, metric, seed=1))
    works_limit = 2.0 + math.log2(quality.WORKS_LM_RATIO) if metric == "perplexity" else 2.0 * quality.WORKS_LM_RATIO
    assert "**holds**" in text("works", _lm_row(works_limit - 0.1, metric, seed=1))
    assert "**not reproduced**" in text("works", _lm_row(works_limit + 0.1, metric, seed=1))
    assert "not measured" in quality.verdict(suite, quality.Row("x", "a", claim=quality.Claim("c", "base")),
                                             {"x": base})
    with pytest.raises(SystemExit, match="different blocks"):
        text("better", _lm_row(1.9, metric, blocks=100, seed=1))


def test_lm_bootstrap_is_deterministic_and_scores_the_real_metric():
    base, ours = _lm_row(2.0, "perplexity"), _lm_row(1.98, "perplexity", seed=1)
    first = quality.paired_lm(ours["block_losses"], base["block_losses"], perplexity=True)
    assert first == quality.paired_lm(ours["block_losses"], base["block_losses"], perplexity=True)
    assert first.ours == pytest.approx(ours["score"]["perplexity"], abs=0.006)
    assert 0 < first.p_value <= 1 and first.ours_ci > 0


EVAL_LM_LOG = """\
2026-11-22 | INFO | fairseq_cli.eval_lm | {'_name': None}
2026-11-22 | INFO | fairseq_cli.eval_lm | num. model params: 1,000
2026-11-22 | INFO | fairseq_cli.eval_lm | 1 the [-0.693147]\tking [-1.386294]
INFO:fairseq_cli.eval_lm:0 [1] [-0.693147]\t</s> [-0.693147]\tfrog [-0.693147]
2026-11-22 | INFO | fairseq_cli.eval_lm | Evaluated 5 tokens in 0.1s (50.00 tokens/s)
2026-11-22 | INFO | fairseq_cli.eval_lm | Loss (base 2): 1.2000, Perplexity: 2.30
"""


def test_parse_eval_lm_blocks_reads_every_blocks_bits_in_sample_order():
    blocks = quality.parse_eval_lm_blocks(EVAL_LM_LOG)
    assert blocks == [[3, pytest.approx(3.0, abs=1e-5)], [2, pytest.approx(3.0, abs=1e-5)]]
    quality.check_blocks_reproduce_the_loss(blocks, 1.2, "log")
    with pytest.raises(SystemExit, match="fairseq-eval-lm reported 1.50000"):
        quality.check_blocks_reproduce_the_loss(blocks, 1.5, "log")
    with pytest.raises(SystemExit, match="--output-word-probs"):
        quality.parse_eval_lm_blocks(EVAL_LM_LOG.replace("| 1 the", "| the").replace(":0 [1]", ":x"))
    with pytest.raises(SystemExit, match="finite"):
        quality.parse_eval_lm_blocks(EVAL_LM_LOG.replace("[-1.386294]", "[-inf]"))


def test_report_marks_rows_trained_with_uncommitted_changes():
    suite = quality.SUITES["grimm"]
    base = _lm_row(2.0, suite.metric)
    results = {}
    for name, git in (("softmax_1head", "abc123def456"), ("extractor_me", "c8a37dc6c08d (with uncommitted changes)")):
        results[name] = dict(base, git=git, params=1, updates=1, train_seconds=1.0,
                             settings={"env": {"MAX_UPDATE": "1", "MAX_TOKENS": "1"}}, cores=2)
    lines = "\n".join(quality.render_suite(suite, results, None))
    assert "| c8a37dc6c08d* |" in lines and "| abc123def456 |" in lines
    assert "\\* Trained with uncommitted changes (extractor_me)" in lines
    assert "--suites grimm --rows extractor_me --force" in lines
    assert "paired bootstrap" in quality.VERDICT_RULES and "p < 0.05" in quality.VERDICT_RULES


def test_commands_in_the_report_name_the_data_folder_as_a_placeholder(tmp_path):
    root = tmp_path / "shared" / "data"
    ctx = quality.Context(data_root=str(root), work_dir=str(tmp_path / "work"), quick=False)
    relative_root = os.path.relpath(root, quality.REPO)
    command = (f"python -m data_prep.multi30k --raw-dir {relative_root}/multi30k --x {root}/grimm/train.txt "
               f"--y {relative_root}x/other")
    assert quality.portable_command(ctx, command) == (
        f"python -m data_prep.multi30k --raw-dir $DATA_ROOT/multi30k --x $DATA_ROOT/grimm/train.txt "
        f"--y {relative_root}x/other")


def test_measuring_runs_refuse_uncommitted_changes_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(provenance, "git_revision", lambda: "abc123def456 (with uncommitted changes)")
    monkeypatch.setattr(provenance, "changed_paths", lambda revision: ["docs/records/results.md", "benchmarks/quality.py"])
    with pytest.raises(SystemExit, match="uncommitted changes.*--allow-dirty"):
        provenance.require_committed(False, "a benchmark")
    assert provenance.require_committed(True, "a benchmark").startswith("abc123def456")
    # the scripts stop before preparing or training anything
    args = ["--data-root", str(tmp_path / "missing"), "--work-dir", str(tmp_path / "work")]
    with pytest.raises(SystemExit, match="benchmarks/quality.py: tracked files have uncommitted changes"):
        quality.main(["--suites", "grimm", *args])
    with pytest.raises(SystemExit, match="benchmarks/decode_speed.py: tracked files have uncommitted changes"):
        decode_speed.main(["--parts", "lm", *args])
    assert not (tmp_path / "work").exists()
    monkeypatch.setattr(provenance, "git_revision", lambda: "abc123def456")
    assert provenance.require_committed(False, "a benchmark") == "abc123def456"
    # a long run's own records and reports, written between its restarts, are not code: the revision is clean
    monkeypatch.setattr(provenance, "git_revision", lambda: "abc123def456 (with uncommitted changes)")
    monkeypatch.setattr(provenance, "changed_paths", lambda revision: ["docs/records/results.md", "docs/records/data/quality/x.json"])
    assert provenance.require_committed(False, "a benchmark") == "abc123def456"


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
    """The real path on generated data: recipes train and eval-lm two rows, each finished row is copied into
    the records, the report has their numbers and the loss plot, a second run trains nothing again, and the
    report is rendered from the records alone (another work folder, no data)."""
    _tiny_data(tmp_path / "data")
    work, report, records = tmp_path / "work", tmp_path / "docs" / "results.md", tmp_path / "records"
    command = [sys.executable, os.path.join(BENCHMARKS, "quality.py"), "--quick", "--suites", "grimm",
               "--rows", "softmax_1head,extractor_me", "--data-root", str(tmp_path / "data"),
               "--work-dir", str(work), "--records", str(records), "--output", str(report)]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = {name: json.loads((work / "results" / "grimm" / f"{name}.json").read_text())
            for name in ("softmax_1head", "extractor_me")}
    for name, result in rows.items():  # the record: the result, the machine's folders as placeholders
        record = records / "grimm" / f"{name}.json"
        kept = json.loads(record.read_text())
        assert kept["block_losses"] == result["block_losses"] and kept["fingerprint"] == result["fingerprint"]
        # (the command spells the work folder absolute, or relative where it lies beside the checkout: both go)
        relative_work = os.path.relpath(work, quality.REPO)
        assert kept["train_command"] == result["train_command"].replace(str(work), "<work-dir>").replace(relative_work, "<work-dir>")
        assert "DATA_BIN=<work-dir>/data-bin/grimm" in kept["train_command"] and str(tmp_path) not in record.read_text()
        assert record.stat().st_size < 300_000
    preparation = json.loads((records / "grimm" / "preparation.json").read_text())
    assert any("--input-dir <work-dir>/quick_raw/grimm" in c for c in preparation) and str(tmp_path) not in str(preparation)
    for result in rows.values():
        assert result["updates"] == 6 and result["params"] > 0 and len(result["train_curve"]) == 3
        assert result["score"]["perplexity"] > 1 and result["git"] != "unknown"
        assert result["evaluate_command"].startswith("NUM_GPUS=0") and "recipes/wikitext2/evaluate.sh" in result["evaluate_command"]
        # the paired test's items: every evaluated block, adding up to eval-lm's own loss
        assert "--output-word-probs" in result["evaluate_command"] and len(result["block_losses"]) > 1
        tokens = sum(n for n, _ in result["block_losses"])
        assert 2 ** (sum(bits for _, bits in result["block_losses"]) / tokens) == pytest.approx(
            result["score"]["perplexity"], abs=0.006)
    assert rows["extractor_me"]["params"] < rows["softmax_1head"]["params"]  # ME has no q/k/v projections
    text = report.read_text()
    me_row = next(line for line in text.splitlines() if line.startswith("| extractor_me |"))
    assert "`extractor_me_lm`" in me_row and ("**holds**" in me_row or "**not reproduced**" in me_row)
    assert re.search(r"p [=<] [01]\.\d{3}; 95 % intervals", me_row), me_row
    assert f"{rows['extractor_me']['score']['perplexity']:.1f}" in me_row
    assert (tmp_path / "docs" / "quality_grimm_loss.png").stat().st_size > 1000
    assert "recipes/wikitext2/train.sh softmax_1head_lm" in text
    (rendered,) = [line for line in text.splitlines() if line.startswith("Rendered by `")]
    assert "--data-root <data-root> --work-dir <work-dir>" in rendered  # (no folder of this machine)

    # An exported recipe variable does not leak into the rows (it would change them unrecorded).
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MAX_UPDATE": "9"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert "training" not in second.stderr and second.stderr.count("done before") == 2

    # Re-rendering (from another checkout: the same preparation under other paths) adds no preparation
    # command to those recorded: the report shows the commands that prepared the data, once. A finished row
    # of the work folder that the records lack (a run of an older version) is copied into them.
    preparation = records / "grimm" / "preparation.json"
    recorded = ["python -m data_prep.text_files --input-dir /another/checkout/data/grimm"]
    preparation.write_text(json.dumps(recorded))
    (records / "grimm" / "softmax_1head.json").unlink()
    rerendered = subprocess.run(command + ["--report-only"], cwd=tmp_path, capture_output=True, text=True)
    assert rerendered.returncode == 0, rerendered.stderr[-3000:]
    assert json.loads(preparation.read_text()) == recorded
    assert recorded[0] in report.read_text() and "data_prep.text_files --input-dir " + str(tmp_path) not in report.read_text()
    assert json.loads((records / "grimm" / "softmax_1head.json").read_text())["block_losses"] == rows["softmax_1head"]["block_losses"]
    assert me_row in report.read_text()

    # A run with another (empty) work folder and no data renders the recorded rows: the report never loses
    # them to a scratch run (the records are its source)
    scratch = command[:]
    scratch[scratch.index("--work-dir") + 1] = str(tmp_path / "scratch")
    scratch[scratch.index("--data-root") + 1] = str(tmp_path / "no-data")
    from_records = subprocess.run(scratch + ["--report-only"], cwd=tmp_path, capture_output=True, text=True)
    assert from_records.returncode == 0, from_records.stderr[-3000:]
    assert me_row in report.read_text() and "| softmax_1head |" in report.read_text()
    assert "rendered from the records without it" in from_records.stderr and "other settings" not in from_records.stderr

    # Rendering for another suite keeps this one's table: the report shows every suite with results.
    third = subprocess.run(command[:command.index("--suites") + 1] + ["shakespeare", "--report-only"]
                           + command[command.index("--suites") + 2:], cwd=tmp_path, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr[-3000:]
    assert me_row in report.read_text() and "tiny Shakespeare" in report.read_text()

    # A row finished before the paired test (no per-block losses, in the work folder and the records) has no
    # verdict; the next run (or --rescore) evaluates its checkpoint again, trains nothing, and the verdict is back
    paths = (work / "results" / "grimm" / "extractor_me.json", records / "grimm" / "extractor_me.json")
    stored = [json.loads(path.read_text()) for path in paths]
    blocks = [s.pop("block_losses") for s in stored][0]
    for path, old in zip(paths, stored):
        path.write_text(json.dumps(old))
    rendered = subprocess.run(command + ["--report-only"], cwd=tmp_path, capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    old_row = next(line for line in report.read_text().splitlines() if line.startswith("| extractor_me |"))
    assert "no verdict" in old_row and "--rescore" in old_row and "**" not in old_row
    flat = [value for block in blocks for value in block]
    for extra in ([], ["--rescore"]):  # a plain run scores it again too, --rescore only does that
        for path, old in zip(paths, stored):
            path.write_text(json.dumps(old))
        rescored = subprocess.run(command + extra, cwd=tmp_path, capture_output=True, text=True)
        assert rescored.returncode == 0, rescored.stderr[-3000:]
        assert "training" not in rescored.stderr and rescored.stderr.count("scoring the test set again") == 1
        for path in paths:
            again = json.loads(path.read_text())
            assert [value for block in again["block_losses"] for value in block] == pytest.approx(flat)
            assert "--output-word-probs" in again["rescored"]["command"]
    assert me_row in report.read_text()

    # A row stopped after its training (while it was scored) is scored again without training: its folder's
    # run, of the same settings, reached the budget; the training time is fairseq's, from its checkpoint
    finished = json.loads(paths[0].read_text())
    for path in paths:
        path.unlink()
    scored = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "training" not in scored.stderr and "removed" not in scored.stderr
    again = json.loads(paths[0].read_text())
    assert again["train_seconds"] == finished["train_seconds"] and again["score"] == finished["score"]
    assert again["train_curve"] == finished["train_curve"]
    # (one fairseq-train run trained it, from scratch, at the revision it records)
    assert again["training_runs"] == finished["training_runs"] and [r["from_update"] for r in again["training_runs"]] == [0]
    assert again["training_runs"][0]["git"] == again["git"]
    # its CPU time: the one run's (user + system of the training command's processes; here near 0, the suite's
    # python being a client of its fork server, whose child trains: Context.run's own test measures it)
    assert again["train_cpu_seconds"] == finished["train_cpu_seconds"] == finished["training_runs"][0]["cpu_seconds"] >= 0
    assert quality.train_time_cell([again]).endswith(" CPU")

    # A row stopped halfway resumes from its last checkpoint (fairseq's own resume, its log's "Loaded checkpoint"
    # line): the curve continues the first run's, the training stops at the budget (no update past it) and its
    # time is fairseq's, summed over both runs
    save_dir = work / "checkpoints" / "grimm" / "extractor_me"
    started_with = (save_dir / quality.ROW_SETTINGS_FILE).read_text()
    shutil.rmtree(save_dir)
    save_dir.mkdir()
    (save_dir / quality.ROW_SETTINGS_FILE).write_text(started_with)
    assert "MAX_UPDATE=6 " in finished["train_command"]
    halfway = subprocess.run(["bash", "-c", finished["train_command"].replace("MAX_UPDATE=6 ", "MAX_UPDATE=3 ")],
                             cwd=quality.REPO, capture_output=True, text=True,
                             env={**os.environ, "PYTHON": sys.executable,
                                  "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]})
    assert halfway.returncode == 0, halfway.stderr[-3000:]
    last = str(save_dir / "checkpoint_last.pt")
    assert quality.checkpoint_updates(last) == 3
    for path in paths:
        path.unlink()
    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "training (6 updates, from 3)" in resumed.stderr and "removed" not in resumed.stderr
    again = json.loads(paths[0].read_text())
    assert quality.checkpoint_updates(last) == 6 and again["updates"] == 6
    updates = [u for u, _ in again["train_curve"]]
    assert updates == sorted(set(updates)) and updates[0] < 3 and updates[-1] == 6, again["train_curve"]
    assert again["train_seconds"] == quality.total_train_seconds(last, "") > 0
    assert [r["from_update"] for r in again["training_runs"]] == [3]  # (the first half was run by hand)
    # (its CPU time is unknown: the first half's was not measured; the report gives the wall clock)
    assert again["training_runs"][0]["cpu_seconds"] > 0 and again["train_cpu_seconds"] is None
    assert quality.train_time_cell([again]).endswith(" wall")


def test_a_rows_training_time_is_its_cpu_time_where_every_run_of_it_was_measured():
    runs = [{"from_update": 0, "cpu_seconds": 100.0}, {"from_update": 40, "cpu_seconds": 50.5}]
    assert quality.training_cpu_seconds(runs) == 150.5
    assert quality.training_cpu_seconds([]) is None
    assert quality.training_cpu_seconds([{"from_update": 0}, runs[1]]) is None  # (a stopped run)
    assert quality.training_cpu_seconds(runs[1:]) is None  # (its first updates trained by another command)
    seeds = [{"train_cpu_seconds": 600.0, "train_seconds": 900.0}, {"train_cpu_seconds": 1200.0, "train_seconds": 2000.0}]
    assert quality.train_time_cell(seeds) == "15.0 min CPU"
    assert quality.train_time_cell(seeds[:1] + [{"train_seconds": 2100.0}]) == "25.0 min wall"
    assert quality.train_time_cell([]) == "-"


def test_a_commands_cpu_time_is_its_own_and_its_childrens(tmp_path):
    """Context.run's usage: the CPU time of the command and what it waited for (a grandchild here), and the
    command's output and exit status as before."""
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path), quick=True)
    usage = {}
    spin = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('spun')"
    # (a real interpreter: the suite's python is a client of its fork server, whose forked child spends the time)
    python = os.environ.get("FAIRSEQ_PLUGINS_TEST_FRESH_PYTHON", sys.executable)
    out = ctx.run("x", {}, ["bash", "-c", f"{python} -c \"{spin}\"; echo done"], record=False, usage=usage)
    assert out.split() == ["spun", "done"] and 0.3 <= usage["cpu_seconds"] < 5, (out, usage)
    with pytest.raises(quality.CommandFailed) as failed:
        ctx.run("x", {}, ["bash", "-c", "echo no; exit 3"], record=False)
    assert failed.value.returncode == 3 and "no" in failed.value.tail


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


def test_decode_report_marks_a_part_measured_with_uncommitted_changes(tmp_path):
    stored = {"results": {"softmax": {"tokens_per_second": 1.0}}, "commands": [], "lengths": None, "cores": 2,
              "cpu": "test cpu", "load_average": "0 0 0"}
    for git, marked in (("abc123def456", False), ("abc123def456 (with uncommitted changes)", True)):
        (tmp_path / "translation.json").write_text(json.dumps(dict(stored, git=git)))
        results, _, _ = decode_speed.load_part(str(tmp_path), "translation")
        measured = results["softmax"]["measured"]
        assert "Measured at git abc123def456" in measured and "(test cpu)" in measured
        assert ("**Measured with uncommitted changes**" in measured) == marked
        assert ("--parts translation" in measured) == marked


def test_a_measurement_records_the_revision_checked_at_its_start(monkeypatch):
    """A run that started clean records that revision even when a report under docs/records/ was edited while it ran
    (the code it loaded is that revision's); any other change during the run marks it."""
    monkeypatch.setattr(provenance, "git_revision", lambda: "abc123def456")
    monkeypatch.setattr(provenance, "_checked", None)
    assert provenance.measured_revision() == "abc123def456"  # no check at the start: the checkout's revision
    provenance.require_committed(False, "a benchmark")
    monkeypatch.setattr(provenance, "git_revision", lambda: "abc123def456 (with uncommitted changes)")
    monkeypatch.setattr(provenance, "changed_paths", lambda revision: ["docs/records/results.md", "docs/records/decode_speed.md"])
    assert provenance.measured_revision() == "abc123def456"
    monkeypatch.setattr(provenance, "changed_paths", lambda revision: ["docs/records/results.md", "benchmarks/quality.py"])
    assert provenance.measured_revision() == "abc123def456 (with uncommitted changes)"
    assert quality.provenance()["git"] == "abc123def456 (with uncommitted changes)"


def test_changed_paths_names_a_revision_git_does_not_know():
    with pytest.raises(RuntimeError, match="git diff --name-only no-such-revision"):
        provenance.changed_paths("no-such-revision")


def test_a_stopped_run_stops_the_whole_command_it_started(tmp_path):
    """SIGTERM to a benchmark (as at the end of a session) also ends what its command started (a recipe's
    fairseq process under bash), instead of leaving it to train on, orphaned."""
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "grandchild.pid"
    script = ("import signal, sys; from benchmarks import quality; "
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); "
              "ctx = quality.Context(data_root='.', work_dir='.', quick=False); "
              f"ctx.run('s', {{}}, ['bash', '-c', 'sleep 120 & echo $! > {pid_file}; wait'], record=False)")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=quality.REPO)
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.time() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 143
    try:
        os.kill(grandchild, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the command's own child survived the stopped run"


# ------------------------------------------------------- suites at the convergence budget, several seeds ---

def _write_result(ctx, suite, row, seed, **fields):
    path = quality.result_path(ctx, suite, row, seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    result = {"fingerprint": quality.fingerprint(quality.row_settings(ctx, suite, row, seed)), "seed": seed, **fields}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return result


def test_a_row_chosen_on_validation_takes_the_lowest_valid_nll_and_waits_for_every_candidate(tmp_path):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True)
    suite = quality.SUITES["multi30k_converged"]
    rows = {row.name: row for row in suite.rows}
    chosen_row = rows["bet_sg"]
    assert chosen_row.chosen_from == tuple(f"bet_sg_w{w}" for w in quality.POINTER_LOSS_WEIGHTS)
    nll = {"bet_sg_w0.05": 3.1, "bet_sg_w0.2": 2.9, "bet_sg_w0.5": 3.0}
    for name, value in nll.items():
        _write_result(ctx, suite, rows[name], 1, valid={"nll_loss": value}, score={"sacrebleu": 30.0})
    assert quality.resolve_row(ctx, suite, chosen_row) == (None, None)  # w1.0 has not finished
    assert quality.unfinished_candidates(ctx, suite, chosen_row) == ["bet_sg_w1.0"]  # (what the wait names)
    _write_result(ctx, suite, rows["bet_sg_w1.0"], 1, valid={"nll_loss": 2.95}, score={"sacrebleu": 99.0})
    assert quality.unfinished_candidates(ctx, suite, chosen_row) == []
    resolved, chosen = quality.resolve_row(ctx, suite, chosen_row)
    assert chosen.name == "bet_sg_w0.2" and resolved.name == "bet_sg"  # not the best test BLEU (w1.0): validation chooses
    assert dict(resolved.env) == {"POINTER_LOSS_WEIGHT": "0.2"} and resolved.syntax_hints
    # seed 1 of the chosen row is its candidate's run; seeds 2 and 3 train under the row's own name
    _write_result(ctx, suite, resolved, 2, valid={"nll_loss": 2.8}, score={"sacrebleu": 31.0})
    seeds = quality.seed_results(ctx, suite, chosen_row)
    assert [(r["seed"], r["score"]["sacrebleu"]) for r in seeds] == [(1, 30.0), (2, 31.0)]
    assert quality.row_env(ctx, suite, resolved, 2)["SEED"] == "2" and "SEED" not in quality.row_env(ctx, suite, resolved, 1)


def test_a_result_of_other_settings_or_another_seed_is_not_taken(tmp_path):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True)
    suite = quality.SUITES["shakespeare8"]
    row = suite.rows[0]
    _write_result(ctx, suite, row, 2, score={"bits_per_character": 2.0})
    assert quality.load_result(ctx, suite, row, 2) is not None and quality.load_result(ctx, suite, row, 1) is None
    # the seed is part of the settings: a seed-2 result copied to seed 3's file is refused
    os.replace(quality.result_path(ctx, suite, row, 2), quality.result_path(ctx, suite, row, 3))
    assert quality.load_result(ctx, suite, row, 3) is None


def test_the_seeds_verdict_is_a_paired_bootstrap_on_the_concatenated_seeds():
    references = _references(200)
    suite = quality.SUITES["multi30k_converged"]
    baseline = [{"seed": s, "hypotheses": _system(references, 0.5, seed=s)} for s in (1, 2, 3)]
    better = [{"seed": s, "hypotheses": _system(references, 0.9, seed=10 + s)} for s in (1, 2, 3)]
    refs = quality.References(tuple(references), lowercase=False)
    assert quality.seeds_verdict(suite, better, baseline, refs).startswith("**beats**")
    assert quality.seeds_verdict(suite, baseline, better, refs).startswith("**loses**")
    assert quality.seeds_verdict(suite, baseline, baseline, refs).startswith("**matches**")
    assert "over 3 seeds" in quality.seeds_verdict(suite, better, baseline, refs)
    # only the seeds both have are paired, seed with seed
    paired, _ = quality.paired_over_seeds(suite, better[:2], baseline, refs)
    single = [quality.paired_bleu(better[i]["hypotheses"], baseline[i]["hypotheses"], refs).ours for i in (0, 1)]
    assert min(single) - 1 <= paired.ours <= max(single) + 1
    assert quality.paired_over_seeds(suite, [{"seed": 7, "hypotheses": []}], baseline, refs)[0] is None


def test_shipped_lm_layouts_are_the_suites_rows_with_the_ratios_they_name():
    for name, (kinds, _) in quality.LM8_LAYOUTS.items():
        with open(os.path.join(REPO, quality.LM8_ARCHITECTURES, f"{name}.json"), encoding="utf-8") as f:
            assert json.load(f) == quality.lm8_architecture(kinds), name
        assert len(kinds) == 8
        linear = sum(kind != "softmax" for kind in kinds)
        ratio = re.match(r"(?:cos|he)(\d)_softmax(\d)", name)
        if ratio:
            assert linear / (8 - linear) == int(ratio.group(1)) / int(ratio.group(2)), name
    layouts = quality.LM8_LAYOUTS
    assert layouts["cos3_softmax1_last"][0][-2:] == ("softmax",) * 2 and layouts["cos3_softmax1_first"][0][:2] == ("softmax",) * 2
    assert [i for i, k in enumerate(layouts["cos3_softmax1"][0]) if k == "softmax"] == [3, 7]
    assert {row.name for row in quality.SUITES["shakespeare8"].rows} == set(layouts)


def test_a_converged_suite_refuses_to_train_before_its_budget_is_measured(monkeypatch, tmp_path):
    from benchmarks import convergence

    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "none"))
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    with pytest.raises(SystemExit, match="convergence budget of 'multi30k' is not measured yet.*convergence.py --suite multi30k"):
        quality.suite_env(ctx, quality.SUITES["multi30k_converged"])
    folder = tmp_path / "none" / "multi30k"
    folder.mkdir(parents=True)
    for updates, bleu in ((1000, 20.0), (2000, 30.0), (4000, 30.3), (8000, 30.4)):
        (folder / f"softmax_seed1_u{updates}.json").write_text(json.dumps(
            {"row": "softmax", "seed": 1, "updates": updates, "test_sacrebleu": bleu}))
    assert quality.suite_env(ctx, quality.SUITES["multi30k_converged"])["MAX_UPDATE"] == "2000"
    assert quality.suite_env(quality.Context(data_root=".", work_dir=".", quick=True),
                             quality.SUITES["multi30k_converged"])["MAX_UPDATE"] == "6"


@pytest.mark.parametrize("jobs", [1, 3])
def test_rows_run_every_seed_once_and_a_chosen_row_after_its_candidates(monkeypatch, tmp_path, jobs):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True)
    suite = quality.SUITES["multi30k_converged"]
    rows = [row for row in suite.rows if row.name in ("softmax", "bet_sg") or row.name.startswith("bet_sg_w")]
    ran = []

    def fake_run_row(ctx, suite, row, force=False, seed=1):
        ran.append((row.name, seed))
        _write_result(ctx, suite, row, seed, valid={"nll_loss": {"bet_sg_w0.5": 1.0}.get(row.name, 2.0)},
                      score={"sacrebleu": 1.0})

    monkeypatch.setattr(quality, "run_row", fake_run_row)
    quality.run_rows(ctx, suite, rows, force=False, jobs=jobs)
    expected = {("softmax", s) for s in (1, 2, 3)} | {(f"bet_sg_w{w}", 1) for w in quality.POINTER_LOSS_WEIGHTS} \
        | {("bet_sg", 2), ("bet_sg", 3)}
    assert sorted(ran) == sorted(expected) and len(ran) == len(expected)
    first_chosen = min(i for i, (name, _) in enumerate(ran) if name == "bet_sg")
    assert all(not name.startswith("bet_sg_w") for name, _ in ran[first_chosen:])
    assert dict(quality.resolve_row(ctx, suite, rows[-1])[0].env) == {"POINTER_LOSS_WEIGHT": "0.5"}
    if jobs == 1:  # seed by seed
        assert ran.index(("softmax", 2)) > max(ran.index((f"bet_sg_w{w}", 1)) for w in quality.POINTER_LOSS_WEIGHTS)


def test_a_chosen_row_whose_candidates_did_not_all_run_waits_naming_the_missing_ones_once(monkeypatch, tmp_path, capsys):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True)
    suite = quality.SUITES["multi30k_converged"]
    rows = [row for row in suite.rows if row.name in ("bet_sg", "bet_sg_w0.05")]  # a run given one candidate only
    monkeypatch.setattr(quality, "run_row", lambda ctx, suite, row, force=False, seed=1: _write_result(
        ctx, suite, row, seed, valid={"nll_loss": 2.0}, score={"sacrebleu": 1.0}))
    quality.run_rows(ctx, suite, rows, force=False, jobs=1)
    waits = [line for line in capsys.readouterr().err.splitlines() if "waits for" in line]
    assert waits == ["[bench-quality] multi30k_converged/bet_sg: waits for bet_sg_w0.2, bet_sg_w0.5, bet_sg_w1.0 "
                     "(chosen on the validation set)"]


# ------------------------------------------------- the LM ratio suite: validation curves, decoding cost, report ---

LM_TRAIN_LOG = """\
2026-11-27 22:30:00 | INFO | fairseq_cli.train | {'_name': None}
2026-11-27 22:30:00 | INFO | fairseq_cli.train | num. shared model params: 412,928 (num. trained: 412,928)
2026-11-27 22:35:00 | INFO | train_inner | epoch 001:     50 / 246 loss=4.1, ppl=17.1, wps=8000, ups=2, wpb=4096, bsz=8, num_updates=50, lr=0.0005, gnorm=1.2, train_wall=25, wall=30
2026-11-27 22:40:13 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 3.594 | ppl 12.08 | wps 8110.9 | wpb 3983.6 | bsz 7.8 | num_updates 246
2026-11-27 22:49:02 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 3.551 | ppl 11.72 | wps 7092.1 | wpb 3983.6 | bsz 7.8 | num_updates 492 | best_loss 3.551
2026-11-27 22:49:26 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 3.537 | ppl 11.61 | wps 7362 | wpb 3983.6 | bsz 7.8 | num_updates 500 | best_loss 3.537
2026-11-27 22:49:30 | INFO | fairseq_cli.train | done training in 1170.2 seconds
"""


def test_a_language_models_validations_are_its_curve_and_seeds_average_where_they_meet():
    parsed = quality.parse_train_log(LM_TRAIN_LOG)
    assert parsed["valid_curve"] == [[246, 3.594], [492, 3.551], [500, 3.537]]
    assert parsed["valid"] == {"loss": 3.537, "ppl": 11.61, "num_updates": 500} and parsed["updates"] == 500
    # the mean over seeds at the validations every seed has (a seed stopped early shortens the mean)
    assert quality.mean_curve([[[246, 3.5], [492, 3.3], [500, 3.2]], [[246, 3.7], [492, 3.1]]]) == [
        (246, pytest.approx(3.6)), (492, pytest.approx(3.2))]
    assert quality.mean_curve([]) == []


def _lm8_result(ctx, suite, name, seed, bits, curve, **fields):
    row = next(r for r in suite.rows if r.name == name)
    scored = _lm_row(bits, "bits_per_character", seed=seed)
    fields = {"git": "abc123def456", **fields}  # (a seed's own revision where given)
    return _write_result(ctx, suite, row, seed, params=412_928, updates=curve[-1][0],
                         train_seconds=900.0 + seed, gflops=0.43, valid_curve=curve, train_curve=curve, cores=2, cpu="test cpu",
                         settings={"env": quality.suite_env(ctx, suite)}, train_command="train.sh x",
                         evaluate_command="evaluate.sh x", **scored, **fields)


def test_the_validation_plot_draws_each_rows_seed_mean_and_its_seeds(monkeypatch, tmp_path):
    suite = quality.SUITES["shakespeare8"]
    rows = {"softmax": [{"valid_curve": [[246, 3.6], [492, 3.0], [738, 2.6], [984, 2.5]]},
                        {"valid_curve": [[246, 3.4], [492, 3.2], [738, 2.8], [984, 2.3]]}],
            "cosformer": [{"valid_curve": [[246, 3.7], [492, 3.3], [738, 2.9], [984, 2.7]]}]}
    drawn = {}
    real_save = quality.save_png
    monkeypatch.setattr(quality, "save_png", lambda figure, path: (drawn.update(figure=figure), real_save(figure, path)))
    path = tmp_path / "valid.png"
    quality.plot_valid_curves(suite, rows, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axis = drawn["figure"].axes[0]
    lines = {line.get_label(): line for line in axis.get_lines()}
    assert set(lines) >= {"softmax (mean of 2 seeds)", "cosformer (1 seed)"}
    assert list(lines["softmax (mean of 2 seeds)"].get_ydata()) == pytest.approx([3.5, 3.1, 2.7, 2.4])
    assert len(axis.get_lines()) == 2 + 2  # the two means, softmax's two seeds faint (cosFormer's one is its mean)
    assert "bits per character" in axis.get_ylabel() and axis.get_xlabel() == "updates"


def test_the_decoding_cost_of_a_layout_is_timed_beside_the_reference_with_its_counted_flops(tmp_path):
    from benchmarks import decoding_cost
    from fairseq_plugins.cli.synthetic import binarize_lm, write_lm_corpus
    from fairseq_plugins.search.latency import LatencySettings

    write_lm_corpus(str(tmp_path / "raw"), splits={"train": 20, "valid": 5, "test": 5})
    data = binarize_lm(str(tmp_path / "raw"), str(tmp_path / "bin"))
    suite = quality.SUITES["shakespeare8"]
    layouts = {row.name: quality.decode_layout(suite, row) for row in suite.rows}
    tiny = LatencySettings(warmup=1, repeats=2, rounds=2, processes=1, trim=0.0)
    costs = {name: decoding_cost.next_token_cost(data, layouts[name], layouts["softmax"], positions=16, settings=tiny)
             for name in ("softmax", "cos3_softmax1")}
    for name, cost in costs.items():
        assert cost["prefix"] == 15 and cost["positions"] == 16 and cost["settings"]["threads"] == 1
        assert cost["ms_per_token"] > 0 and cost["relative"] > 0 and len(cost["ratios"]) == 2
        assert cost["reference"] == ["softmax_1head_lm", *layouts["softmax"][1]]
        _, model = decoding_cost.build_lm(data, *layouts[name], positions=16)
        assert cost["params"] == sum(p.numel() for p in model.parameters())
    # the known answer, 6 layers of d = 64 that differ: softmax's 16th token attends to 16 keys (q.k and a.v:
    # 2 x 16 x 64 multiply-adds), cosFormer's updates and reads its running sums (2 x 2 x 64 x 17)
    assert costs["softmax"]["flops_per_token"] - costs["cos3_softmax1"]["flops_per_token"] == 6 * 2 * (2 * 16 * 64 - 2 * 2 * 64 * 17)
    # a longer prefix than the positions builds the models with more (fresh weights either way)
    longer = decoding_cost.next_token_cost(data, layouts["cosformer"], layouts["softmax"], positions=16, prefix=20, settings=tiny)
    assert longer["prefix"] == 20 and longer["positions"] == 21


def test_the_ratio_suites_report_has_every_verdict_with_its_p_value_the_decoding_cost_and_the_curves(tmp_path):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True)
    suite = quality.SUITES["shakespeare8"]
    curve = [[246, 3.6], [492, 3.0], [500, 2.9]]
    for seed in (1, 2):
        _lm8_result(ctx, suite, "softmax", seed, 2.0, curve)
        _lm8_result(ctx, suite, "cos3_softmax1", seed, 2.3, [[u, v + 0.1] for u, v in curve],
                    **({"git": "fedcba987654"} if seed == 2 else {}))
    costs = {}
    for name, ms, relative in (("softmax", 1.0, 1.01), ("cos3_softmax1", 0.5, 0.52), ("cos7_softmax1", 0.4, 0.41)):
        arch, flags = quality.decode_layout(suite, next(r for r in suite.rows if r.name == name))
        costs[name] = {"arch": arch, "flags": flags, "prefix": 511, "positions": 512, "ms_per_token": ms,
                       "relative": relative, "ratios": [relative - 0.02, relative, relative + 0.03], "flops_per_token": 1_119_232, "reference_row": "softmax", "command": "cmd",
                       "settings": {"threads": 1, "repeats": 20, "rounds": 8}, "git": "abc123def456", "cores": 2,
                       "cpu": "test cpu", "load_average": 1.5, "params": 412_928}
    costs["cosformer"] = {**costs["softmax"], "flags": ["--architecture-file", "other.json"]}  # stale: other flags
    os.makedirs(os.path.dirname(quality.decode_cost_path(ctx, suite)), exist_ok=True)
    with open(quality.decode_cost_path(ctx, suite), "w", encoding="utf-8") as f:
        json.dump(costs, f)
    assert set(quality.load_decode_cost(ctx, suite)) == {"softmax", "cos3_softmax1", "cos7_softmax1"}
    report = quality.render(ctx, [suite], str(tmp_path), "python benchmarks/quality.py --report-only")
    assert "the rows were trained at git abc123def456, fedcba987654 (column *git*" in report  # (every seed's)
    header = next(line for line in report.splitlines() if line.startswith("| row |"))
    assert "decode ms/token after 511 tokens" in header and "decode x softmax" in header and "params" in header
    row = next(line for line in report.splitlines() if line.startswith("| cos3_softmax1 |"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert re.match(r"\*\*loses\*\* \(2\.\d{3} vs 2\.\d{3} over 2 seeds, p < 0\.001\)", cells[4])
    assert re.fullmatch(r"p (<|=) 0\.\d{3}, p (<|=) 0\.\d{3}", cells[5])  # each seed alone
    assert cells[6] == "0.41M" and cells[8] == "15.0 min wall" and cells[-3:] == ["0.500", "0.52 (0.50-0.55)", "1.119"]
    assert "fresh weights" in report and "in one process pinned to one core" in report  # (measured before --processes)
    several = quality.render_decode_cost_note(suite, {name: {**cost, "settings": {**cost["settings"], "processes": 3}}
                                                      for name, cost in costs.items()})
    assert "in 3 processes, one after another, each pinned to one core" in " ".join(several)
    assert "the median over the processes of each one's, the 8 rounds shared among them" in " ".join(several)
    # measured before it trained: its decoding cost is shown, no verdict; the stale measurement is not
    untrained = next(line for line in report.splitlines() if line.startswith("| cos7_softmax1 |"))
    assert "| not trained yet | - | - | - | 0.41M |" in untrained and untrained.endswith("| 0.400 | 0.41 (0.39-0.44) | 1.119 |")
    assert "| cosformer |" not in report
    assert "![validation loss, " in report and (tmp_path / "quality_shakespeare8_valid.png").is_file()


def _multi30k_like_data_bin(tmp_path) -> str:
    """A binarised German-English stand-in for Multi30k (generated pairs, one joined dictionary)."""
    from fairseq_plugins.cli.pipeline import fairseq_command, run
    from fairseq_plugins.cli.synthetic import write_translation_task

    raw = tmp_path / "raw"
    write_translation_task(str(raw), splits={"train": 40, "valid": 5, "test": 5})
    for path in raw.iterdir():
        path.rename(raw / path.name.replace(".src", ".de").replace(".tgt", ".en"))
    data_bin = tmp_path / "work" / "data-bin" / "multi30k"
    run(fairseq_command("preprocess") + ["--source-lang", "de", "--target-lang", "en", "--trainpref", f"{raw}/train",
                                         "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir",
                                         str(data_bin), "--joined-dictionary", "--workers", "1"])
    return str(data_bin)


def test_a_translation_rows_beam_search_is_timed_beside_softmax_on_the_model_its_recipe_trains(tmp_path, monkeypatch):
    from benchmarks import convergence, decoding_cost
    from fairseq_plugins.cli.model_costs import model_cost

    data = _multi30k_like_data_bin(tmp_path)
    records = tmp_path / "records"
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=True, records=str(records))
    suite = quality.SUITES["multi30k_converged"]
    rows = [row for row in suite.rows if row.name in ("softmax", "cosformer_decoder", "extractor_he_decoder", "bet_sf")]
    quality.measure_decode_cost(ctx, suite, rows, "python benchmarks/quality.py --decode-cost")
    costs = json.loads((records / suite.name / "decode_cost.json").read_text())
    measured = json.loads(open(quality.decode_cost_path(ctx, suite), encoding="utf-8").read())  # (this machine's)
    assert set(costs) == set(measured) == {row.name for row in rows}
    for row in rows:
        cost = costs[row.name]
        argv = quality.recipe_training_argv(ctx, suite, row)
        # the model the recipe trains: its data, preset and the suite's sizes; its weights as counted apart
        assert argv[0] == data and argv[argv.index("--arch") + 1] == row.arch and "--encoder-embed-dim" in argv
        assert measured[row.name]["train_arguments"] == argv and cost["reference_row"] == "softmax"
        assert "<checkout>/fairseq_plugins" in cost["train_arguments"] and str(tmp_path) not in json.dumps(cost)
        vocab = len(decoding_cost.build_model(argv)[0].target_dictionary)
        assert cost["params"] == model_cost(decoding_cost.training_args(argv)).total_parameters(vocab)
        assert cost["ms_per_sentence"] > 0 and cost["relative"] > 0 and len(cost["ratios"]) == 2
        # the quick protocol: 8 source tokens, exactly 8 steps and the end of sentence, beam 2
        assert cost["decoder_calls"] == 9 and (cost["settings"]["beam"], cost["settings"]["source_length"]) == (2, 8)
    assert costs["cosformer_decoder"]["params"] == costs["softmax"]["params"]  # (cosFormer adds no weights)
    # the model does not depend on the budget: its arguments are read before the budget is measured
    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "none"))
    full = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False, records=str(records))
    assert quality.recipe_training_argv(full, suite, rows[0])[argv.index("--arch") + 1] == "mixed_transformer_iwslt_de_en"
    lines = quality.render_seeds_suite(ctx, suite, None)
    header = next(line for line in lines if line.startswith("| row |"))
    assert "beam-2 ms/sentence (8 → 8 tokens)" in header and "beam-2 x softmax" in header
    shown = next(line for line in lines if line.startswith("| extractor_he_decoder |"))
    cells = [cell.strip() for cell in shown.split("|")[1:-1]]
    ratios = costs["extractor_he_decoder"]["ratios"]
    assert cells[2] == "not trained yet" and cells[-2] == f"{costs['extractor_he_decoder']['ms_per_sentence']:.1f}"
    assert cells[-1] == f"{costs['extractor_he_decoder']['relative']:.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    note = next(line for line in lines if line.startswith("Beam-2 columns:"))
    assert "one random source sentence of 8 tokens for exactly 8 decoder steps" in note and "in one process" in note
    # measured with another workload (the full run's beam 5 over 30 + 30 tokens): stale, not shown as this one
    assert set(quality.load_decode_cost(ctx, suite)) == {row.name for row in rows}
    assert quality.load_decode_cost(quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"),
                                                    quick=False, records=str(records)), suite) == {}


def test_decoding_cost_is_for_the_suites_whose_report_shows_it(capsys):
    with pytest.raises(SystemExit) as stopped:
        quality.main(["--suites", "multi30k,shakespeare8", "--decode-cost"])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and "--decode-cost: for the suites whose report shows it" in error
    assert "multi30k_converged, shakespeare8; not measurable: multi30k" in error
    with pytest.raises(SystemExit):
        quality.main(["--suites", "shakespeare8", "--decode-cost", "--report-only"])
    assert "--report-only and --decode-cost: each is a run of its own" in capsys.readouterr().err


def test_the_decoding_cost_is_reported_before_the_convergence_budget_is_measured(monkeypatch, tmp_path):
    from benchmarks import convergence

    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "none"))
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    suite = quality.SUITES["shakespeare8"]
    arch, flags = quality.decode_layout(suite, suite.rows[0])
    os.makedirs(os.path.dirname(quality.decode_cost_path(ctx, suite)))
    with open(quality.decode_cost_path(ctx, suite), "w", encoding="utf-8") as f:
        json.dump({"softmax": {"arch": arch, "flags": flags, "prefix": 511, "positions": 512, "ms_per_token": 1.0,
                               "relative": 1.0, "ratios": [1.0, 1.0], "flops_per_token": 2e6, "params": 4e5,
                               "reference_row": "softmax", "command": "cmd", "settings": {"threads": 1, "repeats": 20,
                                                                                         "rounds": 8},
                               "git": "abc123def456", "cores": 2, "cpu": "cpu", "load_average": 1.0}}, f)
    lines = "\n".join(quality.render_seeds_suite(ctx, suite, None))
    assert "convergence budget is not measured yet" in lines and "| softmax |" in lines and "| not trained yet |" in lines


# ------------------------------------------------- records: the committed rows the report is rendered from ---

def test_records_name_the_machines_folders_by_placeholders(tmp_path):
    work, data = tmp_path / "work", tmp_path / "shared" / "data"
    ctx = quality.Context(data_root=str(data), work_dir=str(work), quick=False, records=str(tmp_path / "records"))
    inside = quality.Context(data_root=str(data), work_dir=os.path.join(quality.REPO, "work_dirs", "w"), quick=False)
    result = {"train_command": f"DATA_BIN={work}/data-bin/grimm SAVE_DIR='{work}/c k' python -m x --input {data}/grimm "
                               f"--other {work}x/y --python {quality.REPO}/benchmarks/q.py",
              "score": {"checkpoint": f"{work}/checkpoints/a.pt"}, "curve": [[1, 2.0]],
              "hypotheses": [f"{work}/kept as it is"]}
    kept = quality.portable_record(ctx, result)
    assert kept["train_command"] == ("DATA_BIN=<work-dir>/data-bin/grimm SAVE_DIR='<work-dir>/c k' python -m x --input "
                                     f"<data-root>/grimm --other {work}x/y --python <checkout>/benchmarks/q.py")
    assert kept["score"]["checkpoint"] == "<work-dir>/checkpoints/a.pt" and kept["curve"] == [[1, 2.0]]
    assert kept["hypotheses"] == result["hypotheses"]  # the test items are what was scored
    # a work folder inside the checkout, as shell_line writes it (relative), is <work-dir>, not <checkout>/...
    assert quality.portable_record(inside, "DATA_BIN=work_dirs/w/data-bin x") == "DATA_BIN=<work-dir>/data-bin x"
    # the report's commands show the records' data folder as $DATA_ROOT
    assert quality.portable_command(ctx, "x --input-dir <data-root>/grimm") == "x --input-dir $DATA_ROOT/grimm"


def test_a_rows_fingerprint_follows_the_contents_of_its_architecture_file(tmp_path):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False)
    suite = quality.SUITES["grimm"]
    architecture = tmp_path / "found.json"
    row = quality.Row("found", "softmax_1head_lm", ("--architecture-file", str(architecture)))
    missing = quality.fingerprint(quality.row_settings(ctx, suite, row))
    architecture.write_text('{"encoder": []}')
    first = quality.fingerprint(quality.row_settings(ctx, suite, row))
    architecture.write_text('{"encoder": ["softmax"]}')  # (a search run again: the same name, another architecture)
    assert len({missing, first, quality.fingerprint(quality.row_settings(ctx, suite, row))}) == 3
    # a row without an architecture file keeps the settings it had before the key
    assert "architecture_files" not in quality.row_settings(ctx, suite, suite.rows[0])


def test_the_data_fingerprint_is_the_same_data_wherever_it_was_read_from(tmp_path):
    def prepared(name, **settings):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "dict.txt").write_text("a 1\n")
        (folder / "prepare.json").write_text(json.dumps({"dataset": "shakespeare", "sha256": "abc", **settings}))
        return quality.data_fingerprint(str(folder))

    here = prepared("here", source="/work/shared/data/tiny_shakespeare/input.txt")
    assert prepared("there", source="/elsewhere/data/tiny_shakespeare/input.txt") == here
    assert prepared("other", source="/work/shared/data/tiny_shakespeare/input.txt", sha256="def") != here


def _grimm_result(ctx, suite, row, fingerprint=None, **fields):
    settings = quality.row_settings(ctx, suite, row)
    return {"fingerprint": fingerprint or quality.fingerprint(settings), "settings": settings, "seed": 1,
            "score": {"perplexity": 20.0}, "block_losses": [[4, 17.3]], **fields}


def test_the_records_are_the_reports_source_and_take_the_work_folders_rows_they_lack(tmp_path, monkeypatch):
    """Records first, the work folder for rows they lack (copied in); a stale record gives way to a current
    row, a current record never to a stale one; a row in the records is not trained again (another clone)."""
    ctx = quality.Context(data_root=str(tmp_path / "data"), work_dir=str(tmp_path / "work"), quick=False,
                          records=str(tmp_path / "records"))
    suite = quality.SUITES["grimm"]
    rows = {row.name: row for row in suite.rows}

    def write(path, result):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f)

    def read(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    recorded = _grimm_result(ctx, suite, rows["softmax_1head"], train_command="recorded")
    write(quality.record_path(ctx, suite, rows["softmax_1head"]), recorded)
    imported = _grimm_result(ctx, suite, rows["extractor_me"], train_command=f"SAVE_DIR={ctx.work_dir}/checkpoints/me x")
    write(quality.result_path(ctx, suite, rows["extractor_me"]), imported)
    write(quality.record_path(ctx, suite, rows["cosformer"]), _grimm_result(ctx, suite, rows["cosformer"], "0" * 16))
    write(quality.result_path(ctx, suite, rows["cosformer"]), _grimm_result(ctx, suite, rows["cosformer"], train_command="new"))
    write(quality.record_path(ctx, suite, rows["bet_sf"]), _grimm_result(ctx, suite, rows["bet_sf"], train_command="kept"))
    write(quality.result_path(ctx, suite, rows["bet_sf"]), _grimm_result(ctx, suite, rows["bet_sf"], "1" * 16))

    results = quality.load_results(ctx, suite)
    assert set(results) == {"softmax_1head", "extractor_me", "cosformer", "bet_sf"}
    assert results["softmax_1head"]["train_command"] == "recorded" and results["bet_sf"]["train_command"] == "kept"
    assert read(quality.record_path(ctx, suite, rows["extractor_me"]))["train_command"] == "SAVE_DIR=<work-dir>/checkpoints/me x"
    assert read(quality.record_path(ctx, suite, rows["cosformer"]))["train_command"] == "new"
    assert read(quality.result_path(ctx, suite, rows["bet_sf"]))["fingerprint"] == "1" * 16  # (the work folder is left as it is)

    # another clone, no work folder: the recorded row is done (its data fingerprint is checked when training)
    monkeypatch.setattr(quality, "data_prepared", lambda ctx, suite: True)
    monkeypatch.setattr(quality.Context, "run", lambda *args, **kwargs: pytest.fail("trained a recorded row"))
    clone = quality.Context(data_root=ctx.data_root, work_dir=str(tmp_path / "clone"), quick=False, records=ctx.records)
    assert quality.run_row(clone, suite, rows["softmax_1head"])["train_command"] == "recorded"
    # a recorded row of other data is stale where the data is prepared, and is trained again
    write(quality.record_path(ctx, suite, rows["softmax_1head"]),
          dict(recorded, settings={**recorded["settings"], "data": "other"},
               fingerprint=quality.fingerprint({**recorded["settings"], "data": "other"})))
    assert quality.load_result(clone, suite, rows["softmax_1head"]) is None
    with pytest.raises(pytest.fail.Exception, match="trained a recorded row"):
        quality.run_row(clone, suite, rows["softmax_1head"])
    monkeypatch.setattr(quality, "data_prepared", lambda ctx, suite: False)  # rendered without the data: as recorded
    assert quality.load_result(clone, suite, rows["softmax_1head"]) is not None


def test_a_translation_suites_references_are_kept_for_a_report_without_the_data(tmp_path):
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False,
                          records=str(tmp_path / "records"))
    suite = quality.SUITES["multi30k"]
    folder = tmp_path / "work" / "data-bin" / "multi30k"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "test.en").write_text("a man rides a bike .\ntwo dogs play .\n")
    (folder / "prepare.json").write_text(json.dumps({"lowercase": True}))
    expected = quality.References(("a man rides a bike .", "two dogs play ."), lowercase=True)
    assert quality.scored_references(ctx, suite) == expected
    stored = json.loads((tmp_path / "records" / "multi30k" / "references.json").read_text())
    assert stored["source"] == "<work-dir>/data-bin/multi30k/refs/test.en"
    import shutil
    shutil.rmtree(folder)
    assert quality.scored_references(ctx, suite) == expected  # from the records
    with pytest.raises(SystemExit, match="refs/test.en is missing: the preparation"):
        quality.scored_references(quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False), suite)


def test_a_report_that_would_drop_rows_it_shows_is_not_written_unless_asked(tmp_path):
    """Rows shown in --output's section whose results the records do not hold (a report rendered before the
    records, or rows now stale) are not dropped silently: an error, or --drop-rows."""
    title = quality.SUITES["grimm"].title
    report = tmp_path / "results.md"
    old = (f"# Results\n\n{quality.REPORT_BEGIN}\n### {title}\n\n| row | x |\n| --- | ---: |\n| softmax_1head | 1 |\n"
           f"| extractor_me | 2 |\n\n### other\n\n| row |\n|---|\n| kept |\n{quality.REPORT_END}\n")
    report.write_text(old)
    assert quality.reported_rows(old) == {title: {"softmax_1head", "extractor_me"}, "other": {"kept"}}
    args = ["--report-only", "--suites", "grimm", "--data-root", str(tmp_path / "no-data"), "--work-dir",
            str(tmp_path / "work"), "--records", str(tmp_path / "records"), "--output", str(report)]
    with pytest.raises(SystemExit, match=rf"results.md: the new report would drop 3 rows that it shows now \({title}: "
                                         r"extractor_me; .*softmax_1head; other: kept\).*--drop-rows"):
        quality.main(args)
    assert report.read_text() == old
    quality.main(args + ["--drop-rows"])
    assert "No row finished yet" in report.read_text() and "| softmax_1head |" not in report.read_text()


def _record_of_first_row(tmp_path, suite_name, text):
    """A context with records in tmp_path, and ``text`` as the record of the suite's first row."""
    ctx = quality.Context(data_root=str(tmp_path / "data"), work_dir=str(tmp_path / "work"), quick=False,
                          records=str(tmp_path / "records"))
    suite = quality.SUITES[suite_name]
    path = quality.record_path(ctx, suite, suite.rows[0])
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return ctx, suite


def test_a_record_that_is_not_json_is_a_one_line_error_never_taken_as_missing(tmp_path):
    ctx, suite = _record_of_first_row(tmp_path, "grimm", '{\n<<<<<<< HEAD\n "seed": 1\n=======\n "seed": 2\n>>>>>>> other\n}\n')
    with pytest.raises(SystemExit, match=r"^error: .*softmax_1head.json: not valid JSON \(.*\): repair it") as error:
        quality.load_result(ctx, suite, suite.rows[0])
    assert "\n" not in str(error.value)


def test_rows_of_a_suite_whose_budget_is_no_longer_measured_are_stale_not_a_failed_report(monkeypatch, tmp_path):
    """A converged suite's rows trained at a budget that the ladder's records no longer give (the ladder
    retired, its records moved): not reported (an unmeasured budget has no settings), and every other suite
    still renders."""
    from benchmarks import convergence

    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "no-ladder-records"))
    ctx, suite = _record_of_first_row(tmp_path, "shakespeare8",
                                      json.dumps({"fingerprint": "0" * 16, "settings": {"env": {"MAX_UPDATE": "8000"}}}))
    assert quality.load_result(ctx, suite, suite.rows[0]) is None and quality.load_results(ctx, suite) == {}
    section = quality.render(ctx, [suite, quality.SUITES["grimm"]], None, "python benchmarks/quality.py --report-only")
    assert "convergence budget is not measured yet" in section and "### " + quality.SUITES["grimm"].title in section


def test_two_processes_preparing_the_same_data_take_turns(monkeypatch, tmp_path):
    """data_prep stops a second preparation of the same folder with an error: bench-quality (and a convergence
    rung started beside another) waits for the first one instead, then runs its own (which finds it done)."""
    import threading

    _tiny_data(tmp_path / "data")
    ctx = quality.Context(data_root=str(tmp_path / "data"), work_dir=str(tmp_path / "work"), quick=False)
    suite = quality.SUITES["grimm"]
    waiting, ran = threading.Event(), []
    monkeypatch.setattr(quality, "log", lambda message: waiting.set() if "waiting for it" in message else None)
    monkeypatch.setattr(quality.Context, "run", lambda self, suite_name, env, argv, **kwargs: ran.append(argv))
    with quality.preparation_lock(ctx, suite):  # (another process preparing it)
        second = threading.Thread(target=quality.prepare, args=(ctx, suite))
        second.start()
        assert waiting.wait(60), "the second preparation did not wait"
        assert ran == []  # nothing ran beside the first preparation
    second.join(60)
    assert not second.is_alive() and len(ran) == 1 and "data_prep.text_files" in ran[0]


@pytest.mark.parametrize("script, argv, message", [
    ("quality", ["--report-only", "--force"], "--force: an option of training rows, which --report-only does not (it would be ignored)"),
    ("quality", ["--rescore", "--jobs", "2"], "--jobs: an option of training rows, which --rescore does not (it would be ignored)"),
    ("quality", ["--decode-cost", "--suites", "shakespeare8", "--device", "cuda"], "--device cuda: --decode-cost runs nothing on it"),
    ("quality", ["--quick", "--drop-rows"], "--drop-rows: --quick writes no report unless --output is given (it would be ignored)"),
    ("decode_speed", ["--repeats", "0"], "--repeats: expected at least 1, got 0"),
    ("decode_speed", ["--threads", "0"], "--threads: expected at least 1, got 0"),
    ("decode_speed", ["--lengths", "128,x"], "--lengths: expected comma-separated whole numbers of at least 1, got '128,x'"),
    # (a count other than the default, which is this machine's cores)
    ("decode_speed", ["--report-only", "--threads", str(provenance.available_cores() + 1)],
     "--threads: sampling's torch threads, and no LM sampling runs"),
], ids=["force-report-only", "jobs-rescore", "device-decode-cost", "drop-rows-without-report", "decode-repeats",
        "decode-threads", "decode-lengths", "decode-threads-without-sampling"])
def test_a_bad_setting_or_an_option_the_run_does_not_read_is_refused(script, argv, message, tmp_path, capsys):
    main, folder = {"quality": (quality.main, "--records"), "decode_speed": (decode_speed.main, "--output")}[script]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--work-dir", str(tmp_path / "work"), folder, str(tmp_path / "out")])
    assert refused.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_every_selected_suites_data_is_checked_before_the_first_runs(monkeypatch, tmp_path):
    """A file missing for the second suite (or the parser's data for a BET(SG) row) stops the run before the
    first suite prepares or trains anything."""
    data = tmp_path / "data"
    for name in quality.SHARED_FILES["multi30k"]:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("ein Satz .\n")
    monkeypatch.setattr(quality, "prepare", lambda *a, **k: pytest.fail("prepared before the data was checked"))
    common = ["--quick", "--data-root", str(data), "--work-dir", str(tmp_path / "work"), "--records", str(tmp_path / "r")]
    with pytest.raises(SystemExit, match=rf"error: {data}/grimm/train.txt is missing \(--data-root {data}: expected"):
        quality.main(["--suites", "multi30k,grimm", *common])
    with pytest.raises(SystemExit, match=rf"error: {data}/ud_english_ewt/en_ewt-ud-dev.conllu is missing"):
        quality.main(["--suites", "multi30k", "--rows", "softmax,bet_sg", *common])
    # a parser trained before (a work folder carried to a GPU) needs no UD files
    parser = tmp_path / "work" / "parser_en_ewt" / "model-last"
    parser.mkdir(parents=True)
    with pytest.raises(pytest.fail.Exception, match="prepared before the data was checked"):
        quality.main(["--suites", "multi30k", "--rows", "softmax,bet_sg", *common])
