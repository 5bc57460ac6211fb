"""Small deterministic data sets that tests and the demo generate themselves
(tooling, not training-time data: hence cli/, beside the pipeline that binarises them).

* Translation: a source sentence of 3-8 words from a 24-word vocabulary; its
  translation maps every word through a fixed bijection to a target
  vocabulary, keeping the order. A model that learns it reaches BLEU ~100.
* Language modelling: sentences that count upward from a random start word in
  a cyclic 32-word vocabulary, so every token after the first is predictable.
"""
import os
import random
from typing import Dict, Tuple

from ..files import write_lines
from .pipeline import fairseq_command, run

SPLITS: Dict[str, int] = {"train": 3000, "valid": 100, "test": 100}


def translation_pair(rng: random.Random, vocab: int = 24, min_len: int = 3, max_len: int = 8) -> Tuple[str, str]:
    words = [rng.randrange(vocab) for _ in range(rng.randint(min_len, max_len))]
    source = " ".join(f"s{w}" for w in words)
    target = " ".join(f"T{(7 * w + 3) % vocab}" for w in words)
    return source, target


def write_translation_task(raw_dir: str, splits: Dict[str, int] = SPLITS, seed: int = 1, **kwargs) -> str:
    """Write {split}.src / {split}.tgt into raw_dir; returns raw_dir."""
    os.makedirs(raw_dir, exist_ok=True)
    rng = random.Random(seed)
    for split, size in splits.items():
        pairs = [translation_pair(rng, **kwargs) for _ in range(size)]
        write_lines(os.path.join(raw_dir, f"{split}.src"), [s for s, _ in pairs])
        write_lines(os.path.join(raw_dir, f"{split}.tgt"), [t for _, t in pairs])
    return raw_dir


def write_lm_corpus(raw_dir: str, splits: Dict[str, int] = SPLITS, seed: int = 1, vocab: int = 32) -> str:
    """Write {split}.txt of counting sentences into raw_dir; returns raw_dir."""
    os.makedirs(raw_dir, exist_ok=True)
    rng = random.Random(seed)
    for split, size in splits.items():
        lines = []
        for _ in range(size):
            start, length = rng.randrange(vocab), rng.randint(4, 12)
            lines.append(" ".join(f"w{(start + i) % vocab}" for i in range(length)))
        write_lines(os.path.join(raw_dir, f"{split}.txt"), lines)
    return raw_dir


def binarize_translation(raw_dir: str, data_bin: str, workers: int = 1) -> str:
    """fairseq-preprocess with a joined dictionary (the presets share all embeddings)."""
    run(fairseq_command("preprocess") + [
        "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw_dir}/train", "--validpref", f"{raw_dir}/valid",
        "--testpref", f"{raw_dir}/test", "--destdir", data_bin, "--joined-dictionary", "--workers", str(workers),
    ])
    return data_bin


def binarize_lm(raw_dir: str, data_bin: str, workers: int = 1) -> str:
    run(fairseq_command("preprocess") + [
        "--only-source", "--trainpref", f"{raw_dir}/train.txt", "--validpref", f"{raw_dir}/valid.txt",
        "--testpref", f"{raw_dir}/test.txt", "--destdir", data_bin, "--workers", str(workers),
    ])
    return data_bin
