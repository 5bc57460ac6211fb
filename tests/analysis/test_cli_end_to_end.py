"""The analysis CLI end to end on tiny models trained for a few updates
through fairseq-train on generated data: a translation model and a language
model with mixed decoder layouts (an Extractor layer, reported n/a, next to
softmax and cosFormer layers), fairseq's own transformer_lm, and bad input
(including a model whose every decoder layer is an Extractor).

Known answers: the row and entry counts follow from the raw test sentences
(decoder input = </s> + the sentence's words, so a sentence of w words gives
w rows and w(w+1)/2 entries); softmax rows sum to one over real keys, so
CA * rows + HA * entries = rows; batched (padded) passes give the same
numbers as one sentence at a time (no padding at all); the heatmap's tokens
are the sentence's."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from fairseq_plugins.analysis.cli import main
from fairseq_plugins.cli.pipeline import PLUGIN_DIR, TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, train
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task

SPLITS = {"train": 120, "valid": 4, "test": 24}
UPDATES = 3
# small batches, so that the few updates fall in one epoch (fairseq's per-epoch work costs more here)
SMALL = ["--save-interval", "100000", "--warmup-updates", "2", "--extractor-lags", "8", "--max-tokens", "300"]
TRANSLATION = TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + SMALL + [
    "--encoder-layers", "1", "--decoder-layers", "3", "--decoder-attention-kinds", "extractor_she,softmax,cosformer",
    "--max-source-positions", "64", "--max-target-positions", "64",
]
LM_COMMON = [
    "--task", "language_modeling", "--tokens-per-sample", "32", "--sample-break-mode", "eos", "--optimizer", "adam",
    "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--max-tokens", "300", "--dropout", "0.0",
    "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4",
    "--save-interval", "100000", "--warmup-updates", "2",
]
LM_MIXED = LM_COMMON + ["--decoder-layers", "3", "--decoder-attention-kinds", "cosformer,extractor_we,softmax", "--extractor-lags", "8"]
LM_FAIRSEQ = LM_COMMON + ["--decoder-layers", "2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    raw_mt, raw_lm = str(root / "raw_mt"), str(root / "raw_lm")
    write_translation_task(raw_mt, splits=SPLITS)
    write_lm_corpus(raw_lm, splits=SPLITS)
    # Two jobs at a time on the 2 cores, one thread each: the models are tiny,
    # and OpenMP threads competing for busy cores make each update take seconds.
    with pytest.MonkeyPatch.context() as env, ThreadPoolExecutor(2) as pool:
        env.setenv("OMP_NUM_THREADS", "1")
        mt = pool.submit(binarize_translation, raw_mt, str(root / "bin_mt"))
        lm = pool.submit(binarize_lm, raw_lm, str(root / "bin_lm"))
        mt_bin, lm_bin = mt.result(), lm.result()
        jobs = {
            "translation": pool.submit(train, mt_bin, str(root / "mt"), "mixed_transformer_iwslt_de_en", TRANSLATION, max_update=UPDATES),
            "lm": pool.submit(train, lm_bin, str(root / "lm"), "mixed_transformer_lm_tiny", LM_MIXED, max_update=UPDATES),
            "lm_fairseq": pool.submit(train, lm_bin, str(root / "lm_fairseq"), "transformer_lm", LM_FAIRSEQ, max_update=UPDATES),
        }
        checkpoints = {name: job.result().checkpoint for name, job in jobs.items()}
    checkpoints["lm_extractors"] = extractors_only(checkpoints["lm"], lm_bin, str(root / "extractors_only.pt"))
    sentences = {
        "translation": [line.split() for line in open(os.path.join(raw_mt, "test.tgt"), encoding="utf-8")],
        "lm": [line.split() for line in open(os.path.join(raw_lm, "test.txt"), encoding="utf-8")],
    }
    return {"bin": {"translation": mt_bin, "lm": lm_bin}, "checkpoints": checkpoints, "sentences": sentences}


def extractors_only(checkpoint, data, path):
    """The mixed LM's checkpoint with an Extractor in every decoder layer: the
    model is rebuilt by fairseq from the changed configuration and saved with
    its (untrained) weights in the same checkpoint format (a model without any
    attention distribution only has to be refused, so a training run would
    only cost time)."""
    import torch
    from fairseq import checkpoint_utils, tasks
    from omegaconf import OmegaConf

    state = checkpoint_utils.load_checkpoint_to_cpu(
        checkpoint, {"decoder_attention_kinds": "extractor_she,extractor_me,extractor_we", "data": data}
    )
    model = tasks.setup_task(state["cfg"].task).build_model(state["cfg"].model)
    state.update(model=model.state_dict(), cfg=OmegaConf.to_container(state["cfg"]))
    state.pop("last_optimizer_state", None)
    torch.save(state, path)
    return path


def analyse(capsys, data, checkpoint, tmp_path, *options, name="out.json"):
    path = tmp_path / name
    rc = main([data, "--path", checkpoint, "--cpu", "--output-json", str(path), *options])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(path.read_text()), out


def counts(sentences, include_first=False):
    """rows and entries of sentences of w words: the decoder input is </s> + w words."""
    rows = sum(len(s) + (1 if include_first else 0) for s in sentences)
    entries = sum(len(s) * (len(s) + 1) // 2 for s in sentences)
    return rows, entries


def check_softmax_rows_sum_to_one(layer):
    assert layer["ca"] * layer["rows"] + layer["ha"] * layer["entries"] == pytest.approx(layer["rows"], rel=1e-5)


def assert_same_statistics(a, b):
    for x, y in zip(a["layers"], b["layers"]):
        assert (x["rows"], x["entries"]) == (y["rows"], y["entries"])
        for field in ("ca", "ca_std", "ha", "ha_std", "ratio"):
            if x[field] is None:
                assert y[field] is None
            else:
                assert y[field] == pytest.approx(x[field], abs=1e-5), (x["layer"], field)


def test_translation_with_extractor_softmax_and_cosformer_layers(trained, tmp_path, capsys):
    data, checkpoint = trained["bin"]["translation"], trained["checkpoints"]["translation"]
    result, out = analyse(capsys, data, checkpoint, tmp_path, "--per-head")
    assert "| 0 | extractor_she | n/a | n/a | n/a | n/a | n/a | n/a | n/a |" in out
    assert result["task"] == "translation" and result["split"] == "test"
    assert result["sentences"] == SPLITS["test"] and result["padding_positions"] > 0
    extractor, softmax, cosformer = result["layers"]
    assert [l["kind"] for l in result["layers"]] == ["extractor_she", "softmax", "cosformer"]
    assert not extractor["has_attention_distribution"]
    assert all(extractor[k] is None for k in ("ca", "ca_std", "ha", "ha_std", "ratio", "rows", "entries"))
    rows, entries = counts(trained["sentences"]["translation"])
    for layer in (softmax, cosformer):
        assert (layer["rows"], layer["entries"]) == (rows, entries)
        assert 0 < layer["ca"] < 1 and 0 < layer["ha"] < 1 and layer["ratio"] == pytest.approx(layer["ca"] / layer["ha"])
        assert f"| {layer['layer']} | {layer['kind']} | {layer['ca']:.4f} |" in out
        # heads averaged: the per-head means average to the layer's numbers
        heads = layer["heads"]
        assert len(heads) == 4
        assert sum(h["ca"] for h in heads) / 4 == pytest.approx(layer["ca"], abs=1e-9)
        assert sum(h["ha"] for h in heads) / 4 == pytest.approx(layer["ha"], abs=1e-9)
    check_softmax_rows_sum_to_one(softmax)
    # one sentence per batch has no padding at all: the same numbers
    unpadded, _ = analyse(capsys, data, checkpoint, tmp_path, "--max-sentences", "1", name="unpadded.json")
    assert unpadded["batches"] == SPLITS["test"] and unpadded["padding_positions"] == 0
    assert_same_statistics(result, unpadded)


def test_language_model_with_mixed_layout(trained, tmp_path, capsys):
    data, checkpoint = trained["bin"]["lm"], trained["checkpoints"]["lm"]
    result, out = analyse(capsys, data, checkpoint, tmp_path, "--include-first-position")
    assert result["task"] == "language_modeling"
    assert "| 1 | extractor_we | n/a |" in out
    cosformer, extractor, softmax = result["layers"]
    assert extractor["ca"] is None and not extractor["has_attention_distribution"]
    rows, entries = counts(trained["sentences"]["lm"], include_first=True)
    for layer in (cosformer, softmax):
        assert (layer["rows"], layer["entries"]) == (rows, entries)
    # the first position's only key is itself: weight 1 under softmax
    check_softmax_rows_sum_to_one(softmax)
    unpadded, _ = analyse(capsys, data, checkpoint, tmp_path, "--include-first-position", "--max-sentences", "1", name="u.json")
    assert_same_statistics(result, unpadded)
    default, _ = analyse(capsys, data, checkpoint, tmp_path, name="default.json")
    assert default["layers"][2]["rows"] == rows - SPLITS["test"]
    assert default["layers"][2]["ca"] < softmax["ca"]  # leaving out weight-1 rows lowers CA


def test_fairseq_transformer_lm(trained, tmp_path, capsys):
    data, checkpoint = trained["bin"]["lm"], trained["checkpoints"]["lm_fairseq"]
    result, out = analyse(capsys, data, checkpoint, tmp_path, "--per-head")
    assert result["arch"] == "transformer_lm"
    rows, entries = counts(trained["sentences"]["lm"])
    assert len(result["layers"]) == 2
    for layer in result["layers"]:
        assert layer["kind"] == "softmax (fairseq MultiheadAttention)"
        assert (layer["rows"], layer["entries"]) == (rows, entries)
        check_softmax_rows_sum_to_one(layer)
        # per-head weights, not fairseq's fast-path average repeated
        assert len({round(h["ca"], 6) for h in layer["heads"]}) == 4
        assert sum(h["ca"] for h in layer["heads"]) / 4 == pytest.approx(layer["ca"], abs=1e-9)
    unpadded, _ = analyse(capsys, data, checkpoint, tmp_path, "--per-head", "--max-sentences", "1", name="u.json")
    assert_same_statistics(result, unpadded)


def test_bounding_the_work(trained, tmp_path, capsys):
    data, checkpoint = trained["bin"]["translation"], trained["checkpoints"]["translation"]
    first5, _ = analyse(capsys, data, checkpoint, tmp_path, "--max-sentences-total", "5", name="first5.json")
    assert first5["sentences"] == 5
    assert (first5["layers"][1]["rows"], first5["layers"][1]["entries"]) == counts(trained["sentences"]["translation"][:5])
    one_batch, _ = analyse(capsys, data, checkpoint, tmp_path, "--max-sentences", "4", "--max-batches", "1", name="b.json")
    assert one_batch["batches"] == 1 and one_batch["sentences"] == 4


def test_heatmap_of_one_sentence(trained, tmp_path, capsys):
    from fairseq_plugins.analysis.runner import load, sentence_attention

    data, checkpoint = trained["bin"]["translation"], trained["checkpoints"]["translation"]
    png = tmp_path / "sentence.png"
    _, out = analyse(capsys, data, checkpoint, tmp_path, "--heatmap", str(png), "--sentence-index", "2")
    with Image.open(png) as image:
        image.load()
        assert image.format == "PNG"
    assert sorted(os.listdir(tmp_path)) == ["out.json", "sentence.png"]
    analyse(capsys, data, checkpoint, tmp_path, "--heatmap", str(tmp_path / "first.png"), name="first.json")
    assert (tmp_path / "first.png").stat().st_size > 0  # without --sentence-index: example 0
    sentence = sentence_attention(load(checkpoint, data, cpu=True), "test", 2)
    words = trained["sentences"]["translation"][2]
    assert sentence.tokens == ["</s>"] + words  # prev_output_tokens: </s> then the target words
    assert sorted(sentence.probs) == [1, 2]  # the Extractor layer has no distribution
    length = len(words) + 1
    assert tuple(sentence.probs[1].shape) == (4, length, length)
    assert sentence.probs[1].sum(-1).sub(1).abs().max() < 1e-5  # softmax rows


def test_module_entry_point(trained, tmp_path):
    data, checkpoint = trained["bin"]["lm"], trained["checkpoints"]["lm"]
    path = tmp_path / "lm.json"
    process = subprocess.run(
        [sys.executable, "-m", "fairseq_plugins.analysis", data, "--path", checkpoint, "--cpu", "--split", "valid",
         "--output-json", str(path), "--user-dir", PLUGIN_DIR],  # --user-dir as for fairseq's CLIs: harmless
        capture_output=True, text=True,
    )
    assert process.returncode == 0, process.stderr
    assert "| layer | kind | CA | CA std | HA | HA std | CA/HA | rows | entries |" in process.stdout
    result = json.loads(path.read_text())
    assert result["split"] == "valid" and result["sentences"] == SPLITS["valid"]
    assert "loaded 4 examples" not in process.stderr  # fairseq's loader chatter (INFO) is kept quiet


def run_error(capsys, *argv):
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2
    return err


def test_bad_input(trained, tmp_path, capsys):
    data, checkpoint = trained["bin"]["translation"], trained["checkpoints"]["translation"]
    missing = str(tmp_path / "missing.pt")
    assert f"--path: checkpoint file not found: {missing}" in run_error(capsys, data, "--path", missing, "--cpu")
    err = run_error(capsys, str(tmp_path / "nodata"), "--path", checkpoint, "--cpu")
    assert "DATA: data directory not found" in err
    err = run_error(capsys, data, "--path", checkpoint, "--cpu", "--gen-subset", "nosuch")
    assert "--gen-subset: split 'nosuch' not found" in err and "available splits: test, train, valid" in err
    err = run_error(capsys, data, "--path", checkpoint, "--cpu", "--heatmap", str(tmp_path / "h.png"), "--sentence-index", "24")
    assert "--sentence-index: 24 is out of range for split 'test' (24 examples: 0..23)" in err
    not_a_checkpoint = tmp_path / "junk.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    assert "--path: cannot read" in run_error(capsys, data, "--path", str(not_a_checkpoint), "--cpu")
    # every layer an Extractor: nothing to measure
    err = run_error(capsys, trained["bin"]["lm"], "--path", trained["checkpoints"]["lm_extractors"], "--cpu")
    assert "no decoder layer" in err and "(layer 0: extractor_she, layer 1: extractor_me, layer 2: extractor_we)" in err
    assert not (tmp_path / "h.png").exists()


@pytest.mark.parametrize("options, message", [
    (["--max-tokens", "0"], "--max-tokens must be a positive integer, got 0"),
    (["--max-sentences", "0"], "--max-sentences must be a positive integer, got 0"),
    (["--max-batches", "-1"], "--max-batches must be a positive integer, got -1"),
    (["--max-sentences-total", "0"], "--max-sentences-total must be a positive integer, got 0"),
    (["--sentence-index", "3"], "--sentence-index: an option of --heatmap, which is not given (it would be ignored)"),
    (["--heatmap", "{d}/h.png", "--sentence-index", "-1"], "--sentence-index: expected at least 0, got -1"),
    (["--output-json", "{d}"], "--output-json: {d} is a folder (expected the path of a file to write)"),
    (["--heatmap", "{d}/folder.png"], "--heatmap: {d}/folder.png is a folder (expected the path of a file to write)"),
], ids=["max-tokens", "max-sentences", "max-batches", "max-sentences-total", "sentence-index-without-heatmap",
        "negative-sentence-index", "output-json-a-folder", "heatmap-a-folder"])
def test_bad_options_are_refused_before_the_checkpoint_is_loaded(tmp_path, capsys, monkeypatch, options, message):
    from fairseq_plugins.analysis import runner

    def load(*args, **kwargs):
        raise AssertionError("the checkpoint was loaded before the options were checked")

    monkeypatch.setattr(runner, "load", load)
    (tmp_path / "folder.png").mkdir()
    err = run_error(capsys, str(tmp_path), "--path", str(tmp_path / "checkpoint.pt"), "--cpu",
                    *[option.format(d=tmp_path) for option in options])
    assert err.splitlines() == ["error: " + message.format(d=tmp_path)]
    assert sorted(os.listdir(tmp_path)) == ["folder.png"]
