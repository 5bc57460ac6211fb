"""Dataset wrappers that carry BET(SG) syntax hints (``data/syntax_hints.py``)
through fairseq's batching, as ``sample["pointer_hints"]``.

``pointer_hints`` is a LongTensor of the shape of ``sample["target"]``: entry
[b, t] is the key row (0-based column of the decoder's B x T x T self-attention
of that batch row) that decoder row t should point to, t - d_t, or -1 where
there is no hint (padding, or t - d_t before the start of the sentence or
language-model block). Hints never wrap around a block start.

The wrappers only add that key: every other entry of the batch and the order of
the batches are those of the wrapped fairseq dataset.
"""
from typing import List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, LanguagePairDataset, MonolingualDataset

from .syntax_hints import HintDataError

NO_HINT = -1
POINTER_HINTS = "pointer_hints"


def absolute_hints(distances: torch.Tensor) -> torch.Tensor:
    """Backward row distances d_t (of one sentence or block) -> key rows t - d_t, -1 where negative."""
    distances = torch.as_tensor(distances, dtype=torch.long)
    if distances.dim() != 1:
        raise HintDataError(f"hint distances must be one-dimensional, got shape {tuple(distances.shape)}")
    rows = torch.arange(distances.numel(), dtype=torch.long) - distances
    return rows.masked_fill(rows < 0, NO_HINT)


def collate_pointer_hints(
    batch_ids: torch.Tensor,
    samples: Sequence[dict],
    target: torch.Tensor,
    pad_idx: int,
    left_pad: bool,
) -> torch.Tensor:
    """Place every sample's ``pointer_hints`` (key rows within its unpadded
    sequence) into a tensor shaped like the collated ``target``.

    ``batch_ids`` are the ids in the order of the batch rows (collaters may sort
    samples); rows beyond the samples (fairseq's pad-to-batch-size) hold -1.
    With left padding a sequence of n tokens occupies the last n columns, so its
    key rows move by the same offset.
    """
    out = torch.full_like(target, NO_HINT, dtype=torch.long)
    if len(samples) == 0:
        return out
    sample_ids = torch.tensor([int(s["id"]) for s in samples], dtype=torch.long)
    match = batch_ids.view(-1, 1).eq(sample_ids.view(1, -1))
    if not bool((match.sum(1) == 1).all()) or match.size(0) != len(samples):
        raise HintDataError("collated batch ids do not match the samples one to one; cannot place pointer hints")
    order = match.long().argmax(1)
    hints: List[torch.Tensor] = [samples[i][POINTER_HINTS] for i in order.tolist()]
    lengths = torch.tensor([h.numel() for h in hints], dtype=torch.long)
    bsz, width = len(hints), target.size(1)
    real = target[:bsz].ne(pad_idx).sum(1)
    if not torch.equal(real, lengths):
        bad = int(torch.nonzero(real != lengths)[0, 0])
        raise HintDataError(
            f"sample {int(batch_ids[bad])}: {int(lengths[bad])} pointer hints for {int(real[bad])} target tokens"
        )
    padded = torch.nn.utils.rnn.pad_sequence(hints, batch_first=True, padding_value=NO_HINT)
    columns = torch.arange(padded.size(1)).view(1, -1)
    valid = columns < lengths.view(-1, 1)
    offset = (width - lengths) if left_pad else torch.zeros_like(lengths)
    shifted = torch.where(padded >= 0, padded + offset.view(-1, 1), torch.full_like(padded, NO_HINT))
    rows = torch.arange(bsz).view(-1, 1).expand_as(padded)
    out[rows[valid], (columns + offset.view(-1, 1))[valid]] = shifted[valid]
    return out


class _HintWrapper(BaseWrapperDataset):
    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    @property
    def supports_prefetch(self):
        return False  # hint datasets are memory-mapped: nothing to prefetch


class HintedLanguagePairDataset(_HintWrapper):
    """A :class:`~fairseq.data.LanguagePairDataset` whose items and batches
    carry the pointer hints of the target side.

    ``hints[i]`` holds the n + 1 backward distances of target sentence i (its
    tokens and end of sentence), as the target item has them.
    """

    def __init__(self, dataset: LanguagePairDataset, hints):
        if not isinstance(dataset, LanguagePairDataset):
            raise TypeError(f"HintedLanguagePairDataset wraps a LanguagePairDataset, got {type(dataset).__name__}")
        if dataset.tgt is None:
            raise HintDataError("pointer hints belong to the target side, but the dataset has no target")
        if dataset.append_bos or dataset.append_eos_to_target:
            raise HintDataError("pointer hints do not support LanguagePairDataset's append_bos / append_eos_to_target")
        if len(hints) != len(dataset):
            raise HintDataError(f"{len(hints)} hint items for {len(dataset)} sentence pairs")
        super().__init__(dataset)
        self.hints = hints

    def __getitem__(self, index):
        example = dict(self.dataset[index])
        hints = absolute_hints(self.hints[index])
        # Bucketed datasets pad items themselves: count the real tokens.
        n = int(example["target"].ne(self.dataset.tgt_dict.pad()).sum())
        if hints.numel() != n:
            raise HintDataError(f"sentence {index + 1}: {hints.numel()} hints for {n} target tokens")
        example[POINTER_HINTS] = hints
        return example

    def collater(self, samples, pad_to_length=None):
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if not batch or batch.get("target") is None:
            return batch
        batch[POINTER_HINTS] = collate_pointer_hints(
            batch["id"], samples, batch["target"], self.dataset.tgt_dict.pad(), self.dataset.left_pad_target
        )
        return batch


class HintedMonolingualDataset(_HintWrapper):
    """A language model's :class:`~fairseq.data.MonolingualDataset` whose items
    and batches carry pointer hints.

    ``hint_blocks`` must be a ``TokenBlockDataset`` over the hint distances built
    exactly like the token blocks (same sizes, block size and break mode):
    ``hint_blocks[i]`` then holds the distances of the targets of block i, and
    rows whose hint falls before the block start get -1. With ``add_bos_token``
    the dataset prepends <s> to source and target; its row has no hint and every
    other key row moves by one.
    """

    def __init__(self, dataset: MonolingualDataset, hint_blocks):
        if not isinstance(dataset, MonolingualDataset):
            raise TypeError(f"HintedMonolingualDataset wraps a MonolingualDataset, got {type(dataset).__name__}")
        if dataset.targets != ["future"]:
            raise HintDataError(
                f"pointer hints need the standard future target, got targets {dataset.targets} "
                "(--self-target / --past-target are not supported)"
            )
        if len(hint_blocks) != len(dataset) or not np.array_equal(np.asarray(hint_blocks.sizes), np.asarray(dataset.sizes)):
            raise HintDataError("hint blocks do not line up with the token blocks (different block sizes)")
        super().__init__(dataset)
        self.hint_blocks = hint_blocks

    def __getitem__(self, index):
        example = dict(self.dataset[index])
        hints = absolute_hints(self.hint_blocks[index])
        if self.dataset.add_bos_token:
            hints = torch.cat([hints.new_full((1,), NO_HINT), torch.where(hints >= 0, hints + 1, hints)])
        target = example["target"]
        if hints.numel() != target.numel():
            raise HintDataError(f"block {index}: {hints.numel()} hints for {target.numel()} target tokens")
        example[POINTER_HINTS] = hints
        return example

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if not batch:
            return batch
        batch[POINTER_HINTS] = collate_pointer_hints(
            batch["id"], samples, batch["target"], self.dataset.vocab.pad(), left_pad=False
        )
        return batch


def unwrap_hints(dataset):
    """The fairseq dataset under a hint wrapper (or ``dataset`` itself)."""
    return dataset.dataset if isinstance(dataset, _HintWrapper) else dataset


def has_hints(dataset: Optional[object]) -> bool:
    return isinstance(dataset, _HintWrapper)
