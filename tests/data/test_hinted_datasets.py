"""Pointer hints: distances -> key rows, and their placement in collated batches (hand-computed)."""
import pytest
import torch

from fairseq_plugins.data.hinted_datasets import NO_HINT, absolute_hints, collate_pointer_hints
from fairseq_plugins.data.syntax_hints import HintDataError

PAD = 1


def test_absolute_hints_subtract_distances_and_drop_those_before_the_start():
    # rows 0..4 with distances 0, 2, 1, 3, 5: 0-0=0, 1-2<0, 2-1=1, 3-3=0, 4-5<0
    assert absolute_hints(torch.tensor([0, 2, 1, 3, 5])).tolist() == [0, -1, 1, 0, -1]


def samples_with(ids_and_hints):
    return [{"id": i, "pointer_hints": torch.tensor(h)} for i, h in ids_and_hints]


def test_collate_follows_the_batch_order_and_pads_with_no_hint():
    samples = samples_with([(7, [0, 0, 1]), (3, [0, 0, 1, 2, 0])])
    # the collater sorted sample 3 (5 tokens) first; target width 6 (pad to a multiple)
    target = torch.tensor([[5, 5, 5, 5, 2, PAD], [5, 5, 2, PAD, PAD, PAD]])
    hints = collate_pointer_hints(torch.tensor([3, 7]), samples, target, PAD, left_pad=False)
    assert hints.tolist() == [[0, 0, 1, 2, 0, -1], [0, 0, 1, -1, -1, -1]]


def test_collate_left_padding_shifts_key_rows_with_the_sequence():
    samples = samples_with([(0, [0, -1, 1]), (1, [0, 0, 1, 2])])
    target = torch.tensor([[PAD, 5, 5, 2], [5, 5, 5, 2]])
    hints = collate_pointer_hints(torch.tensor([0, 1]), samples, target, PAD, left_pad=True)
    # sequence 0 occupies columns 1..3: key rows 0 and 1 become columns 1 and 2; -1 stays -1
    assert hints.tolist() == [[-1, 1, -1, 2], [0, 0, 1, 2]]


def test_collate_rows_beyond_the_samples_have_no_hint():
    samples = samples_with([(4, [0, 0])])
    target = torch.tensor([[5, 2, PAD], [PAD, PAD, PAD]])  # fairseq's pad_to_bsz adds padding rows
    hints = collate_pointer_hints(torch.tensor([4]), samples, target, PAD, left_pad=False)
    assert hints.tolist() == [[0, 0, -1], [NO_HINT] * 3]


def test_collate_refuses_hints_that_do_not_match_the_target_length():
    samples = samples_with([(0, [0, 0, 1])])
    target = torch.tensor([[5, 2, PAD]])
    with pytest.raises(HintDataError, match="sample 0: 3 pointer hints for 2 target tokens"):
        collate_pointer_hints(torch.tensor([0]), samples, target, PAD, left_pad=False)
