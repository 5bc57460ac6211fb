"""CA/HA on hand-built attention matrices with answers worked out by hand.

Batch of two sentences, two heads, T = 4:

* sentence 0: four real tokens;
* sentence 1: left-padded, position 0 is padding. Its pad row and the pad
  key column hold garbage (7, 3, 0.5) that must not count.

Head-averaged rows (real keys only):

    sentence 0: t=0 [1]  t=1 [.6 .4]  t=2 [.2 .3 .5]  t=3 [.15 .2 .25 .4]
    sentence 1: t=1 [1]  t=2 [.4 .6]  t=3 [.2 .2 .6]

Rows (first real position left out): diagonals .4 .5 .4 | .6 .6 -> CA = 2.5/5 = .5.
Entries: .6 .2 .3 .15 .2 .25 | .4 .2 .2 -> HA = 2.5/9; CA/HA = 1.8.
"""
import statistics

import pytest
import torch

from fairseq_plugins.analysis.stats import (
    AttentionStatistics,
    AttentionStatisticsError,
    attention_statistics,
    row_and_entry_masks,
)

G = 0.5  # garbage weight on the pad key (strictly lower triangle: must be excluded)

HEAD0 = [
    [[1, 0, 0, 0], [0.4, 0.6, 0, 0], [0.1, 0.3, 0.6, 0], [0.1, 0.2, 0.3, 0.4]],
    [[7, 7, 7, 7], [G, 1.0, 0, 0], [G, 0.3, 0.7, 0], [G, 0.1, 0.1, 0.8]],
]
HEAD1 = [
    [[1, 0, 0, 0], [0.8, 0.2, 0, 0], [0.3, 0.3, 0.4, 0], [0.2, 0.2, 0.2, 0.4]],
    [[3, 3, 3, 3], [G, 1.0, 0, 0], [G, 0.5, 0.5, 0], [G, 0.3, 0.3, 0.4]],
]
REAL = torch.tensor([[True, True, True, True], [False, True, True, True]])

CA_VALUES = [0.4, 0.5, 0.4, 0.6, 0.6]
HA_VALUES = [0.6, 0.2, 0.3, 0.15, 0.2, 0.25, 0.4, 0.2, 0.2]


def probs():
    # B x H x T x T
    return torch.tensor([HEAD0, HEAD1], dtype=torch.float64).transpose(0, 1).contiguous()


def test_head_averaged_ca_ha_with_padding_and_first_row_left_out():
    stats = attention_statistics(probs(), REAL)
    assert stats.rows == 5 and stats.entries == 9
    assert stats.ca == pytest.approx(0.5, abs=1e-12)
    assert stats.ha == pytest.approx(2.5 / 9, abs=1e-12)
    assert stats.ratio == pytest.approx(1.8, abs=1e-12)
    assert stats.ca_std == pytest.approx(statistics.pstdev(CA_VALUES), abs=1e-12)
    assert stats.ca_std == pytest.approx(0.008**0.5, abs=1e-12)
    assert stats.ha_std == pytest.approx(statistics.pstdev(HA_VALUES), abs=1e-12)
    # softmax-like rows sum to 1 over real keys: CA * rows + HA * entries = rows
    assert stats.ca * stats.rows + stats.ha * stats.entries == pytest.approx(stats.rows, abs=1e-12)


def test_first_position_counts_in_ca_only_when_asked():
    stats = attention_statistics(probs(), REAL, include_first=True)
    # the first real position of each sentence (sentence 1: position 1) has weight 1 on itself
    assert stats.rows == 7 and stats.entries == 9
    assert stats.ca == pytest.approx(4.5 / 7, abs=1e-12)
    assert stats.ca_std == pytest.approx(statistics.pstdev(CA_VALUES + [1.0, 1.0]), abs=1e-12)
    assert stats.ha == pytest.approx(2.5 / 9, abs=1e-12)  # no strictly-lower entries in first rows


def test_per_head_numbers():
    stats = attention_statistics(probs(), REAL, per_head=True)
    assert len(stats.heads) == 2
    h0, h1 = stats.heads
    assert h0.ca == pytest.approx(3.1 / 5) and h1.ca == pytest.approx(1.9 / 5)
    assert h0.ha == pytest.approx(1.9 / 9) and h1.ha == pytest.approx(3.1 / 9)
    assert h0.ca_std == pytest.approx(statistics.pstdev([0.6, 0.6, 0.4, 0.7, 0.8]))
    assert h1.ha_std == pytest.approx(statistics.pstdev([0.8, 0.3, 0.3, 0.2, 0.2, 0.2, 0.5, 0.3, 0.3]))
    assert h0.ratio == pytest.approx((3.1 / 5) / (1.9 / 9))
    assert (h0.rows, h0.entries) == (5, 9)
    # CA and HA are linear: the heads' means average to the head-averaged numbers
    assert (h0.ca + h1.ca) / 2 == pytest.approx(stats.ca) and (h0.ha + h1.ha) / 2 == pytest.approx(stats.ha)
    assert attention_statistics(probs(), REAL).heads is None


def test_batching_does_not_change_the_result():
    whole = attention_statistics(probs(), REAL, per_head=True)
    acc = AttentionStatistics(per_head=True)
    p = probs()
    acc.update(p[:1], REAL[:1])
    # the second sentence alone, without its pad position: a batch of a different length
    acc.update(p[1:, :, 1:, 1:], REAL[1:, 1:])
    split = acc.result()
    for field in ("ca", "ca_std", "ha", "ha_std", "ratio"):
        assert getattr(split, field) == pytest.approx(getattr(whole, field), abs=1e-12), field
        for h in range(2):
            assert getattr(split.heads[h], field) == pytest.approx(getattr(whole.heads[h], field), abs=1e-12)
    assert (split.rows, split.entries) == (whole.rows, whole.entries)


def test_pad_rows_and_pad_keys_are_ignored_whatever_they_hold():
    p = probs()
    p[1, :, 0, :] = 123.0  # pad query row
    p[1, :, :, 0] = -5.0  # pad key column
    p[0, :, :, :][torch.ones(4, 4, dtype=torch.bool).triu(1).expand(2, 4, 4)] = 9.0  # above the diagonal: never read
    stats = attention_statistics(p, REAL)
    assert stats.ca == pytest.approx(0.5) and stats.ha == pytest.approx(2.5 / 9)


def test_masks():
    rows, entries = row_and_entry_masks(REAL)
    assert rows.tolist() == [[False, True, True, True], [False, False, True, True]]
    assert entries[1].nonzero().tolist() == [[2, 1], [3, 1], [3, 2]]
    assert int(entries[0].sum()) == 6
    right_padded = torch.tensor([[True, True, False]])
    rows, entries = row_and_entry_masks(right_padded, include_first=True)
    assert rows.tolist() == [[True, True, False]]
    assert entries[0].nonzero().tolist() == [[1, 0]]


def test_attention_only_on_the_current_token():
    eye = torch.eye(5, dtype=torch.float64).expand(1, 3, 5, 5)
    stats = attention_statistics(eye, torch.ones(1, 5, dtype=torch.bool))
    assert stats.ca == 1.0 and stats.ha == 0.0 and stats.ha_std == 0.0
    assert stats.ratio is None  # CA / 0 is undefined


def test_uniform_causal_attention():
    # row t spreads 1/(t+1) over its t+1 keys: CA = mean_{t>=1} 1/(t+1); HA = sum_t t/(t+1) / sum_t t
    length = 6
    uniform = torch.tril(torch.ones(length, length, dtype=torch.float64))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, 4, length, length)
    stats = attention_statistics(uniform, torch.ones(2, length, dtype=torch.bool))
    assert stats.ca == pytest.approx(sum(1 / (t + 1) for t in range(1, length)) / (length - 1))
    assert stats.ha == pytest.approx(sum(t / (t + 1) for t in range(1, length)) / sum(range(1, length)))
    assert stats.rows == 2 * (length - 1) and stats.entries == 2 * length * (length - 1) // 2


def test_a_sentence_of_one_token_has_no_rows():
    stats = attention_statistics(torch.ones(1, 2, 1, 1), torch.ones(1, 1, dtype=torch.bool))
    assert (stats.rows, stats.entries) == (0, 0)
    assert stats.ca is None and stats.ha is None and stats.ratio is None


def test_shape_errors():
    with pytest.raises(AttentionStatisticsError, match="B x H x T x T"):
        attention_statistics(torch.zeros(1, 2, 3, 4), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(AttentionStatisticsError, match="B x H x T x T"):
        attention_statistics(torch.zeros(2, 3, 3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(AttentionStatisticsError, match="real-position mask"):
        attention_statistics(torch.zeros(1, 2, 3, 3), torch.ones(1, 4, dtype=torch.bool))
    acc = AttentionStatistics()
    acc.update(torch.zeros(1, 2, 3, 3), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(AttentionStatisticsError, match="head count"):
        acc.update(torch.zeros(1, 4, 3, 3), torch.ones(1, 3, dtype=torch.bool))
