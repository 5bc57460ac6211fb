"""End to end through fairseq's real CLIs: the mFormer translation presets
(softmax and cosFormer layers mixed, shrunk) learn the synthetic task and
beam-decode it (mformer_wmt_en_de, shrunk, is the same model: test_mformer_wmt_end_to_end.py checks
that; the other presets: test_end_to_end.py)."""
import pytest

from fairseq_plugins.cli.pipeline import generate
from translation_presets import PRESETS, save_root, trained, translation_data  # noqa: F401  (fixtures)


@pytest.mark.parametrize("preset", [p for p in PRESETS if p.startswith("mformer_") and p != "mformer_wmt_en_de"])
def test_preset_learns_synthetic_translation_and_beam_decodes(preset, translation_data, save_root):
    result = trained(preset, translation_data, save_root)
    decoded = generate(translation_data, result.checkpoint, beam=5)
    assert len(decoded.hypotheses) == 100
    assert decoded.bleu >= 90, f"{preset}: BLEU {decoded.bleu}\n{decoded.log[-1500:]}"
