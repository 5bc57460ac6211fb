"""PNG heatmap of one sentence's decoder self-attention: one panel per decoder
layer (heads averaged), query tokens down, key tokens across, drawn with
matplotlib's Agg backend (no display needed) and written atomically."""
import math
from typing import Dict, Optional, Sequence

import torch

from ..files import atomic_output


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def write_heatmap(
    path: str,
    tokens: Sequence[str],
    layers: Sequence[tuple],
    probs: Dict[int, torch.Tensor],
    title: Optional[str] = None,
) -> str:
    """Draw ``probs[i]`` (H x T x T or T x T; heads are averaged) for every
    ``(i, kind)`` in ``layers``; layers missing from ``probs`` get a panel
    saying they have no attention distribution. Returns ``path``."""
    plt = _pyplot()
    n = len(layers)
    if n == 0:
        raise ValueError("no layers to draw")
    length = len(tokens)
    columns = min(n, 3)
    rows = math.ceil(n / columns)
    side = min(16.0, max(3.0, 0.28 * length + 1.5))  # inches per panel
    font = max(4, min(9, int(220 / max(length, 1))))
    step = max(1, math.ceil(length / 100))  # long sentences: label every step-th token
    fig, axes = plt.subplots(
        rows, columns, figsize=(side * columns + 1.2, side * rows + 0.8), squeeze=False, layout="constrained"
    )
    try:
        image = None
        for slot, ax in enumerate(axes.flat):
            if slot >= n:
                ax.axis("off")
                continue
            index, kind = layers[slot]
            ax.set_title(f"layer {index}: {kind}", fontsize=9)
            ax.set_xlim(-0.5, length - 0.5)
            ax.set_ylim(length - 0.5, -0.5)
            ax.set_aspect("equal")
            if index not in probs:
                ax.text(0.5, 0.5, "n/a\n(no attention\ndistribution)", ha="center", va="center", fontsize=9, transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            matrix = probs[index]
            if matrix.dim() == 3:
                matrix = matrix.mean(dim=0)
            if tuple(matrix.shape) != (length, length):
                raise ValueError(f"layer {index}: attention of shape {tuple(matrix.shape)} does not match {length} tokens")
            image = ax.imshow(matrix.float().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            ticks = list(range(0, length, step))
            ax.set_xticks(ticks)
            ax.set_yticks(ticks)
            ax.set_xticklabels([tokens[i] for i in ticks], rotation=90, fontsize=font)
            ax.set_yticklabels([tokens[i] for i in ticks], fontsize=font)
            ax.set_xlabel("key", fontsize=8)
            ax.set_ylabel("query", fontsize=8)
        if image is not None:
            fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (heads averaged)")
        if title:
            fig.suptitle(title, fontsize=10)
        with atomic_output(path, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
    finally:
        plt.close(fig)
    return path

