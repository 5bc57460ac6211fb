"""Syntax hints of BET(SG) (Sha et al. 2022, Sec. 3.3): where to store them and
how to read them back.

A hint dataset is a fairseq indexed dataset (``mmap``) parallel to a binarised
target: one item per sentence, one non-negative integer per target token plus
one for the end-of-sentence token fairseq appends (n + 1 values for a line of n
whitespace-separated tokens).

Meaning of a value. Decoder row t is the step whose input is the previous
target token (the end-of-sentence token for t = 0, as in fairseq's
``prev_output_tokens`` and in language-model streams) and that predicts target
token t. The value d_t is a *backward distance between rows*: the pointer loss
asks row t to attend to row t - d_t (0 = itself, the paper's fallback "x_t").
Distances are relative, so they survive fairseq's batching, padding and a
language model's ``TokenBlockDataset`` blocking; a row whose t - d_t falls
before the start of its block has no hint there.

Paths, next to the binarised data (``fairseq-preprocess --destdir``):

* translation: ``{data}/{split}.{src}-{tgt}.{tgt}.hints.{bin,idx}``
* language modelling: ``{data}/{split}.hints.{bin,idx}``
"""
import os
from typing import Iterable, Optional, Sequence

import numpy as np
import torch
from fairseq.data import data_utils, indexed_dataset

HINTS_SUFFIX = "hints"
# No value is a token id, so the dtype is fixed rather than fitted to a vocabulary.
HINT_DTYPE = np.int32


class HintDataError(ValueError):
    """A hint dataset is missing, malformed or does not match its text."""


def hint_dataset_prefix(data_dir: str, split: str, src: Optional[str] = None, tgt: Optional[str] = None) -> str:
    """Path prefix (without .bin/.idx) of the hint dataset of ``split``.

    With ``src`` and ``tgt`` (translation) the hints belong to the target side.
    """
    if (src is None) != (tgt is None):
        raise ValueError("hint_dataset_prefix: give both src and tgt (translation) or neither (language modelling)")
    if src is None:
        return os.path.join(data_dir, f"{split}.{HINTS_SUFFIX}")
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{tgt}.{HINTS_SUFFIX}")


def hint_dataset_exists(prefix: str) -> bool:
    return indexed_dataset.MMapIndexedDataset.exists(prefix)


def write_hint_dataset(prefix: str, sentences: Iterable[Sequence[int]]) -> int:
    """Write ``sentences`` (each a sequence of n + 1 distances) to ``prefix``.{bin,idx}.

    Written to temporary files first and renamed at the end, so an interrupted
    run never leaves a dataset that looks complete. Returns the number of
    sentences written.
    """
    tmp_prefix = f"{prefix}.tmp{os.getpid()}"
    builder = indexed_dataset.MMapIndexedDatasetBuilder(indexed_dataset.data_file_path(tmp_prefix), dtype=HINT_DTYPE)
    count = 0
    try:
        for distances in sentences:
            values = torch.as_tensor(np.asarray(distances, dtype=np.int64))
            if values.dim() != 1 or values.numel() == 0:
                raise HintDataError(f"sentence {count + 1}: hints must be a non-empty list of distances")
            if (values < 0).any():
                raise HintDataError(f"sentence {count + 1}: hint distances must be >= 0, got {values.tolist()}")
            builder.add_item(values)
            count += 1
        builder.finalize(indexed_dataset.index_file_path(tmp_prefix))
    except BaseException:
        for path in (indexed_dataset.data_file_path(tmp_prefix), indexed_dataset.index_file_path(tmp_prefix)):
            if os.path.exists(path):
                os.remove(path)
        raise
    os.replace(indexed_dataset.data_file_path(tmp_prefix), indexed_dataset.data_file_path(prefix))
    os.replace(indexed_dataset.index_file_path(tmp_prefix), indexed_dataset.index_file_path(prefix))
    return count


def load_hint_dataset(prefix: str):
    """Load a hint dataset (items are int64 tensors of distances)."""
    if not hint_dataset_exists(prefix):
        raise HintDataError(
            f"hint dataset {prefix}.bin/.idx not found; write it with data_prep/syntax_hints.py "
            "(see recipes/README.md, BET(SG))"
        )
    return data_utils.load_indexed_dataset(prefix, None, dataset_impl="mmap")


def check_parallel(hints, target_sizes, hint_name: str, target_name: str):
    """Every hint item must have exactly as many values as its target sentence.

    ``target_sizes`` are the binarised target lengths (tokens + end of sentence).
    Fails naming the first mismatching sentence (1-based line of the text).
    """
    hint_sizes = np.asarray(hints.sizes)
    target_sizes = np.asarray(target_sizes)
    if len(hint_sizes) != len(target_sizes):
        raise HintDataError(
            f"{hint_name} has {len(hint_sizes)} sentences but {target_name} has {len(target_sizes)}; "
            "produce the hints from the same text file that was binarised"
        )
    mismatch = np.nonzero(hint_sizes != target_sizes)[0]
    if len(mismatch):
        line = int(mismatch[0])
        raise HintDataError(
            f"{hint_name}: line {line + 1} has {int(hint_sizes[line])} hints but {target_name} has "
            f"{int(target_sizes[line])} tokens there (tokens + end of sentence); "
            "produce the hints from the same text file that was binarised"
        )
