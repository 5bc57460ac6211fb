"""End to end through fairseq's real CLIs: the mformer_wmt_en_de preset (shrunk) learns the synthetic task
and beam-decodes it. A file of its own, apart from mformer_iwslt_de_en (test_mformer_end_to_end.py), so that
the test workers of `make test` train the two presets side by side."""
from fairseq_plugins.cli.pipeline import generate
from translation_presets import save_root, trained, translation_data  # noqa: F401  (fixtures)


def test_preset_learns_synthetic_translation_and_beam_decodes(translation_data, save_root):
    result = trained("mformer_wmt_en_de", translation_data, save_root)
    decoded = generate(translation_data, result.checkpoint, beam=5)
    assert len(decoded.hypotheses) == 100
    assert decoded.bleu >= 90, f"mformer_wmt_en_de: BLEU {decoded.bleu}\n{decoded.log[-1500:]}"
