"""The shrunk translation presets the end-to-end tests train (shared by
test_end_to_end.py, test_mformer_end_to_end.py and test_mformer_wmt_end_to_end.py:
several files, so that the test workers of `make test` train them side by side;
each file trains its presets once and its tests share them)."""
import pytest

from fairseq_plugins.cli.pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, train
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

# Each preset at its own layout, shrunk in width (and in depth where the layout
# allows it without changing which layers use which kind).
PRESETS = {
    "mixed_transformer_iwslt_de_en": ["--encoder-layers", "2", "--decoder-layers", "2"],
    "cosformer_iwslt_de_en": ["--encoder-layers", "2", "--decoder-layers", "2"],
    "mformer_iwslt_de_en": ["--decoder-layers", "2"],  # 6 encoder layers, cosFormer in 2 and 4
    "mformer_wmt_en_de": ["--encoder-layer-ffn-embed-dims", "128", "--decoder-layer-ffn-embed-dims", "128"],
}
# Enough for every preset to pass the BLEU bar of 90 with a margin (one thread, this CPU kind, BLEU at
# 250 / 300 / 350 / 400 updates: mformer_iwslt_de_en 90.9 / 93.4 / 100 / 98.9, cosformer_iwslt_de_en
# 91.2 / 79.7 / 97.7 / 97.9, mixed_transformer_iwslt_de_en 98.8 / 99.1 / 100 / 100).
MAX_UPDATE = 400
_trained = {}  # per test process: preset -> TrainResult


@pytest.fixture(scope="module")
def translation_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("translation")
    write_translation_task(str(root / "raw"))
    return binarize_translation(str(root / "raw"), str(root / "bin"))


@pytest.fixture(scope="module")
def save_root(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


def trained(preset, data_bin, save_root):
    if preset not in _trained:
        _trained[preset] = train(
            data_bin, str(save_root / preset), preset, TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + PRESETS[preset], max_update=MAX_UPDATE
        )
    return _trained[preset]


