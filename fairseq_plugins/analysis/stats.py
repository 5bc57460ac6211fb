"""Current vs historical attention of a causal self-attention layer (the
statistics of Sha et al. 2022, Bird-Eye Transformers, Table 1).

Input: one layer's attention distributions ``probs`` (B x H x T x T, query
rows by keys, as :class:`~fairseq_plugins.modules.recording.AttentionRecorder`
records them) and ``real`` (B x T, True at non-padding positions of the
decoder input).

Definitions (``A`` is the head-averaged matrix ``A[b, t, s] = mean_h
probs[b, h, t, s]``, the weights fairseq returns with ``need_weights=True``;
per-head numbers use ``probs[b, h]`` instead):

* a *row* (b, t) is a real query position that has at least one real key
  strictly before it. The first real position of every sentence has no
  history: its only key is itself, so a normalised distribution gives it
  weight 1 by construction, and it is **left out** of CA (with
  ``include_first=True`` it is counted in CA). It has no entries for HA either
  way.
* **CA** (current attention) = mean over rows of the diagonal weight
  ``A[b, t, t]``; ``ca_std`` is the population standard deviation over the
  same rows. (Each row has exactly one diagonal entry, so per row and per
  entry agree.)
* an *entry* (b, t, s) is a strictly-lower-triangle weight ``A[b, t, s]``,
  ``s < t``, whose query t and key s are both real.
* **HA** (historical attention) = mean over all entries, pooled **per entry**
  (a row with t historical keys contributes t entries, so longer prefixes
  weigh more); ``ha_std`` is the population standard deviation over the same
  entries.
* **ratio** = CA / HA (None when HA is 0 or undefined).

Rows and entries are pooled over every sentence of every batch (not averaged
per sentence first). Means and variances are accumulated in float64 with
Chan's pairwise merge, so the result does not depend on how the data was
batched.
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from torch import Tensor


class AttentionStatisticsError(ValueError):
    pass


class Moments:
    """Count, mean and sum of squared deviations of a stream of values, for
    ``shape`` independent streams (e.g. one per head); merged batch by batch."""

    def __init__(self, shape=()):
        self.count = 0
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.m2 = torch.zeros(shape, dtype=torch.float64)

    def add(self, values: Tensor):
        """``values``: ``shape`` x N (the same N values-count for every stream)."""
        n = values.shape[-1]
        if n == 0:
            return
        values = values.detach().to(device="cpu", dtype=torch.float64)
        batch_mean = values.mean(dim=-1)
        batch_m2 = ((values - batch_mean.unsqueeze(-1)) ** 2).sum(dim=-1)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + batch_m2 + delta**2 * (self.count * n / total)
        self.count = total

    def std(self) -> Tensor:
        return (self.m2 / self.count).clamp_min(0).sqrt()


@dataclass
class LayerStatistics:
    ca: Optional[float]
    ca_std: Optional[float]
    ha: Optional[float]
    ha_std: Optional[float]
    ratio: Optional[float]
    rows: Optional[int]
    entries: Optional[int]
    heads: Optional[List["LayerStatistics"]] = field(default=None)

    def to_dict(self) -> dict:
        out = {
            "ca": self.ca,
            "ca_std": self.ca_std,
            "ha": self.ha,
            "ha_std": self.ha_std,
            "ratio": self.ratio,
            "rows": self.rows,
            "entries": self.entries,
        }
        if self.heads is not None:
            out["heads"] = [dict(head=h, **s.to_dict()) for h, s in enumerate(self.heads)]
        return out


def _summary(ca: Moments, ha: Moments, index=None) -> LayerStatistics:
    def pick(t):
        return float(t if index is None else t[index])

    ca_mean = pick(ca.mean) if ca.count else None
    ca_std = pick(ca.std()) if ca.count else None
    ha_mean = pick(ha.mean) if ha.count else None
    ha_std = pick(ha.std()) if ha.count else None
    ratio = ca_mean / ha_mean if ca_mean is not None and ha_mean else None
    return LayerStatistics(ca_mean, ca_std, ha_mean, ha_std, ratio, ca.count, ha.count)


def row_and_entry_masks(real: Tensor, include_first: bool = False):
    """(rows B x T, entries B x T x T) as defined in the module docstring."""
    if real.dim() != 2:
        raise AttentionStatisticsError(f"real-position mask must be B x T, got shape {tuple(real.shape)}")
    real = real.bool()
    seq_len = real.shape[1]
    # number of real positions strictly before t
    history = real.long().cumsum(dim=1) - real.long()
    rows = real & (history > 0) if not include_first else real
    strictly_lower = torch.ones(seq_len, seq_len, dtype=torch.bool, device=real.device).tril(-1)
    entries = strictly_lower.unsqueeze(0) & real.unsqueeze(2) & real.unsqueeze(1)
    return rows, entries


class AttentionStatistics:
    """Accumulates CA and HA of one layer over batches (see module docstring)."""

    def __init__(self, per_head: bool = False, include_first: bool = False):
        self.per_head = per_head
        self.include_first = include_first
        self.num_heads: Optional[int] = None
        self._ca = Moments()
        self._ha = Moments()
        self._head_ca: Optional[Moments] = None
        self._head_ha: Optional[Moments] = None

    def update(self, probs: Tensor, real: Tensor):
        if probs.dim() != 4 or probs.shape[-1] != probs.shape[-2]:
            raise AttentionStatisticsError(
                f"attention weights must be B x H x T x T (causal self-attention), got shape {tuple(probs.shape)}"
            )
        bsz, heads, seq_len, _ = probs.shape
        if tuple(real.shape) != (bsz, seq_len):
            raise AttentionStatisticsError(
                f"real-position mask has shape {tuple(real.shape)}, expected {(bsz, seq_len)} for weights {tuple(probs.shape)}"
            )
        if self.num_heads is None:
            self.num_heads = heads
            if self.per_head:
                self._head_ca, self._head_ha = Moments((heads,)), Moments((heads,))
        elif self.num_heads != heads:
            raise AttentionStatisticsError(f"head count changed from {self.num_heads} to {heads} between batches")
        rows, entries = row_and_entry_masks(real.to(probs.device), self.include_first)
        probs = probs.detach().to(torch.float64)
        averaged = probs.mean(dim=1)  # B x T x T
        diagonal = averaged.diagonal(dim1=-2, dim2=-1)  # B x T
        self._ca.add(diagonal[rows])
        self._ha.add(averaged[entries])
        if self.per_head:
            per_head = probs.transpose(0, 1)  # H x B x T x T
            self._head_ca.add(per_head.diagonal(dim1=-2, dim2=-1)[:, rows])
            self._head_ha.add(per_head[:, entries])

    def result(self) -> LayerStatistics:
        stats = _summary(self._ca, self._ha)
        if self.per_head and self.num_heads is not None:
            stats.heads = [_summary(self._head_ca, self._head_ha, h) for h in range(self.num_heads)]
        return stats


def attention_statistics(probs: Tensor, real: Tensor, per_head: bool = False, include_first: bool = False) -> LayerStatistics:
    """CA/HA of one batch (see the module docstring for the definitions)."""
    accumulator = AttentionStatistics(per_head=per_head, include_first=include_first)
    accumulator.update(probs, real)
    return accumulator.result()
