"""The heatmap is a PNG (signature, decodable, the expected panels drawn) and
is written atomically; the markdown table marks layers without a
distribution as n/a."""
import os

import numpy as np
import pytest
import torch
from PIL import Image

from fairseq_plugins.analysis.cli import markdown
from fairseq_plugins.analysis.heatmap import write_heatmap
from fairseq_plugins.analysis.runner import AnalysisResult, LayerInfo
from fairseq_plugins.analysis.stats import LayerStatistics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKENS = ["</s>", "T1", "T2", "T3"]


def causal(length, heads=2):
    weights = torch.tril(torch.rand(heads, length, length)) + torch.eye(length)
    return weights / weights.sum(-1, keepdim=True)


def test_heatmap_is_a_valid_png_with_one_panel_per_layer(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "attention.png"
    layers = [(0, "extractor_she"), (1, "softmax"), (2, "cosformer")]
    out = write_heatmap(str(path), TOKENS, layers, {1: causal(4), 2: causal(4)[0]}, title="test")
    assert out == str(path)
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    with Image.open(path) as image:
        image.load()  # decodes the whole file
        assert image.format == "PNG"
        width, height = image.size
        pixels = np.asarray(image.convert("RGB"))
    assert width > height > 100  # three panels side by side
    # the viridis colours of the weights are there (not a blank canvas)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20
    assert os.listdir(tmp_path) == ["attention.png"]  # no temporary file left behind


def test_heatmap_replaces_the_file_only_when_complete(tmp_path):
    path = tmp_path / "attention.png"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match="does not match 4 tokens"):
        write_heatmap(str(path), TOKENS, [(0, "softmax")], {0: causal(5)})
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["attention.png"]
    write_heatmap(str(path), TOKENS, [(0, "softmax")], {0: causal(4)})
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_markdown_table_marks_layers_without_distribution():
    layers = [LayerInfo(0, "extractor_she", 4, False), LayerInfo(1, "softmax", 2, True)]
    heads = [LayerStatistics(0.6, 0.1, 0.2, 0.05, 3.0, 5, 9), LayerStatistics(0.4, 0.1, 0.3, 0.05, 4 / 3, 5, 9)]
    stats = LayerStatistics(0.5, 0.0894, 0.25, 0.05, 2.0, 5, 9, heads)
    table = markdown(AnalysisResult(layers, {1: stats}), per_head=True).splitlines()
    assert table[0] == "| layer | kind | CA | CA std | HA | HA std | CA/HA | rows | entries |"
    assert table[2] == "| 0 | extractor_she | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
    assert table[3] == "| 1 | softmax | 0.5000 | 0.0894 | 0.2500 | 0.0500 | 2.00 | 5 | 9 |"
    assert table[4] == ""
    assert table[7] == "| 0 | n/a | n/a | n/a | n/a | n/a | n/a |"
    assert table[8] == "| 1 | 0 | 0.6000 | 0.1000 | 0.2000 | 0.0500 | 3.00 |"
    assert table[9] == "| 1 | 1 | 0.4000 | 0.1000 | 0.3000 | 0.0500 | 1.33 |"
