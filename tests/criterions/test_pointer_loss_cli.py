"""A few updates through fairseq's real CLIs with the syntax tasks and the
pointer criterion: the pointer loss is logged for training and validation, the
checkpoint needs no extra safe globals, and fairseq-generate / fairseq-eval-lm
work with the tasks unchanged."""
import random
import re

import torch

from fairseq_plugins.cli.pipeline import PLUGIN_DIR, eval_lm, fairseq_command, generate, run
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task
from fairseq_plugins.data.syntax_hints import hint_dataset_prefix, write_hint_dataset

SPLITS = {"train": 48, "valid": 12, "test": 12}
TINY = ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4", "--dropout", "0.0"]
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "400", "--cpu", "--num-workers", "0", "--no-progress-bar",
         "--log-format", "simple", "--log-interval", "1", "--max-update", "4", "--validate-interval-updates", "2",
         "--no-epoch-checkpoints", "--criterion", "label_smoothed_cross_entropy_with_pointer", "--label-smoothing", "0.1",
         "--pointer-loss-weight", "0.5", "--syntax-hints", "required"]


def write_hints(raw_file, prefix, seed):
    rng = random.Random(seed)
    with open(raw_file) as f:
        lines = f.read().splitlines()
    write_hint_dataset(prefix, [[rng.randint(0, t) for t in range(len(line.split()) + 1)] for line in lines])


def logged(log, kind):
    """Values of pointer_loss in the log lines of one kind (train_inner, train, valid)."""
    pattern = r"\| INFO \| " + kind + r" \|.*?pointer_loss[ =]([0-9.]+)"
    return [float(m) for m in re.findall(pattern, log)]


def test_translation_training_logs_the_pointer_loss(tmp_path):
    raw = write_translation_task(str(tmp_path / "raw"), splits=SPLITS)
    data = binarize_translation(raw, str(tmp_path / "bin"))
    for i, split in enumerate(SPLITS):
        write_hints(f"{raw}/{split}.tgt", hint_dataset_prefix(data, split, "src", "tgt"), i)
    log = run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--task", "translation_with_syntax", "--arch", "mixed_transformer",
        "--encoder-layers", "1", "--decoder-layers", "2", "--decoder-attention-kinds", "bet,softmax",
        "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
        "--save-dir", str(tmp_path / "ckpt"), *TINY, *TRAIN,
    ])
    for kind in ("train_inner", "train", "valid"):
        values = logged(log, kind)
        assert values and all(0 < v < 20 for v in values), (kind, log[-3000:])
    assert re.search(r"pointer_rows[ =]\d+", log)
    checkpoint = str(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint) == []
    decoded = generate(data, checkpoint, beam=2, extra=["--task", "translation_with_syntax", "--max-len-b", "10"])
    assert len(decoded.hypotheses) == SPLITS["test"]


def test_language_model_training_logs_the_pointer_loss(tmp_path):
    raw = write_lm_corpus(str(tmp_path / "raw"), splits=SPLITS)
    data = binarize_lm(raw, str(tmp_path / "bin"))
    for i, split in enumerate(SPLITS):
        write_hints(f"{raw}/{split}.txt", hint_dataset_prefix(data, split), i)
    lm = ["--task", "language_modeling_with_syntax", "--tokens-per-sample", "16", "--sample-break-mode", "none"]
    log = run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer_lm_tiny", "--decoder-layers", "2",
        "--decoder-attention-kinds", "softmax,bet", "--save-dir", str(tmp_path / "ckpt"), *lm, *TINY, *TRAIN,
    ])
    for kind in ("train_inner", "train", "valid"):
        assert logged(log, kind), (kind, log[-3000:])
    perplexity = eval_lm(data, str(tmp_path / "ckpt" / "checkpoint_last.pt"), extra=lm + ["--context-window", "4"])
    assert perplexity > 1
