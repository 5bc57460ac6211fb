"""A checkpoint that cannot be used is one ``error:`` line naming the file and what is wrong (exit 2), through
fairseq's real commands (fairseq-generate, fairseq-train's resume) and the hub interface: truncated or
empty, trained on data with another dictionary, a language model's on translation data, and a save folder
whose checkpoint has other attention kinds than the options ask for (which trained on silently before).
Nothing is overwritten: the checkpoint in the save folder stays as it was."""
import hashlib
import os
import shutil
import subprocess

import pytest

from fairseq_plugins.cli.pipeline import EVALUATE_ALL, PLUGIN_DIR, fairseq_command, train
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task
from fairseq_plugins.errors import CheckpointError

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500",
        "--criterion", "cross_entropy", "--share-all-embeddings"]


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


def one_line_error(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:] + result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    splits = {"train": 60, "valid": 10, "test": 10}
    data = binarize_translation(write_translation_task(str(root / "raw"), splits=splits), str(root / "bin"))
    other = binarize_translation(write_translation_task(str(root / "raw_other"), splits=splits, vocab=12),
                                 str(root / "bin_other"))
    checkpoint = train(data, str(root / "ck"), "mixed_transformer", TINY, max_update=2).checkpoint
    lm_data = binarize_lm(write_lm_corpus(str(root / "raw_lm"), splits=splits), str(root / "bin_lm"))
    lm = train(lm_data, str(root / "lm"), "mixed_transformer_lm_tiny", ["--task", "language_modeling", "--optimizer", "adam",
               "--lr", "1e-3", "--max-tokens", "500", "--tokens-per-sample", "32"], max_update=2).checkpoint
    return root, data, other, checkpoint, lm


def generate(data, checkpoint):
    return run(fairseq_command("generate") + [data, "--user-dir", PLUGIN_DIR, "--path", str(checkpoint), "--cpu",
                                              "--batch-size", "8", "--beam", "1", *EVALUATE_ALL])


@pytest.mark.parametrize("cut", ["truncated", "empty"])
def test_a_damaged_checkpoint_is_named_by_generate_the_hub_and_a_resume(trained, tmp_path, cut):
    root, data, _, checkpoint, _ = trained
    damaged = tmp_path / "save" / "checkpoint_last.pt"
    damaged.parent.mkdir()
    content = open(checkpoint, "rb").read()
    damaged.write_bytes(content[: len(content) // 2] if cut == "truncated" else b"")
    expected = (f"error: {damaged}: truncated or not a checkpoint ({len(content) // 2} bytes; torch cannot read it: "
                if cut == "truncated" else f"error: {damaged}: an empty file, not a checkpoint")
    assert one_line_error(generate(data, damaged)).startswith(expected)

    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    with pytest.raises(CheckpointError, match=f"^{expected[len('error: '):]}".replace("(", r"\(").replace(")", r"\)")):
        MixedTransformerModel.from_pretrained(str(damaged.parent), "checkpoint_last.pt", data_name_or_path=data)

    before = digest(damaged)
    resumed = run(fairseq_command("train") + [data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer", *TINY, "--cpu",
                                              "--save-dir", str(damaged.parent), "--max-update", "4", "--num-workers", "0"])
    assert one_line_error(resumed).startswith(expected)
    assert digest(damaged) == before


def test_a_checkpoint_of_other_data_or_another_model_is_named(trained):
    root, data, other, checkpoint, lm = trained
    assert one_line_error(generate(other, checkpoint)).startswith(
        f"error: {checkpoint}: trained with a dictionary of ")
    assert "the checkpoint belongs to other data" in one_line_error(generate(other, checkpoint))
    message = one_line_error(generate(data, lm))
    assert message.startswith(f"error: {lm}: "), message


def test_resuming_into_a_folder_of_other_attention_kinds_is_refused(trained, tmp_path):
    root, data, _, checkpoint, _ = trained
    save = tmp_path / "save"
    save.mkdir()
    shutil.copy(checkpoint, save / "checkpoint_last.pt")
    before = digest(save / "checkpoint_last.pt")
    resumed = run(fairseq_command("train") + [data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer", *TINY, "--cpu",
                                              "--decoder-attention-kinds", "cosformer", "--save-dir", str(save),
                                              "--max-update", "4", "--num-workers", "0"])
    assert one_line_error(resumed) == (
        f"error: {save / 'checkpoint_last.pt'}: its layers have other attention kinds than the options ask for (1 layers; "
        "e.g. decoder self-attention layer 0: softmax in the checkpoint, cosformer asked by --decoder-attention-kinds): "
        "resume with the checkpoint's kinds, or train into another --save-dir")
    assert digest(save / "checkpoint_last.pt") == before
    assert sorted(os.listdir(save)) == ["checkpoint_last.pt"]


def eval_lm(data, checkpoint, *extra):
    return run(fairseq_command("eval_lm") + [data, "--user-dir", PLUGIN_DIR, "--path", str(checkpoint), "--cpu",
                                             "--max-tokens", "512", "--num-workers", "0", *EVALUATE_ALL, *extra])


@pytest.mark.parametrize("extra, message", [
    (["--tokens-per-sample", "64"], "--tokens-per-sample 64: more than the model's 32 positions (--max-target-positions; "
                                    "a checkpoint's: what it was trained for); give --tokens-per-sample 32 or less"),
    (["--tokens-per-sample", "32", "--add-bos-token"],
     "--tokens-per-sample 32 + 1 (the BOS token of --add-bos-token): more than the model's 32 positions "
     "(--max-target-positions; a checkpoint's: what it was trained for); give --tokens-per-sample 31 or less, or leave "
     "out --add-bos-token if the model was trained without it"),
    (["--tokens-per-sample", "32", "--context-window", "32"],
     "--tokens-per-sample: 0 tokens per block are left to score; expected at least 1 (with fairseq-eval-lm: give a "
     "--context-window smaller than --tokens-per-sample)"),
    # 24 tokens scored per block, after 24 of context: the model sees 48 positions
    (["--tokens-per-sample", "48", "--context-window", "24"],
     "--tokens-per-sample 48: more than the model's 32 positions (--max-target-positions; a checkpoint's: what it was "
     "trained for); give --tokens-per-sample 32 or less"),
], ids=["longer-blocks", "bos-token", "context-window", "context-and-block"])
def test_eval_lm_blocks_that_do_not_fit_the_model_are_refused(trained, extra, message):
    root, _, _, _, lm = trained
    assert one_line_error(eval_lm(str(root / "bin_lm"), lm, *extra)) == f"error: {message}"


def test_a_configuration_error_inside_fairseq_train_is_one_line(trained, tmp_path):
    """The plugin's own errors inside fairseq's commands (errors.py's excepthook): one line and exit 2, the
    traceback with FAIRSEQ_PLUGINS_DEBUG=1; nothing is written."""
    _, data, _, _, _ = trained
    command = fairseq_command("train") + [data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer", *TINY, "--cpu",
                                          "--decoder-attention-kinds", "no_such_kind", "--save-dir", str(tmp_path / "save"),
                                          "--max-update", "1", "--num-workers", "0"]
    line = one_line_error(run(command))
    assert line.startswith("error: ") and "no_such_kind" in line, line
    debug = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "FAIRSEQ_PLUGINS_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "AttentionConfigError" in debug.stderr
    assert not (tmp_path / "save").exists() or not os.listdir(tmp_path / "save")
