"""The mformer_wmt_en_de preset, shrunk as the end-to-end tests shrink it (translation_presets.PRESETS), is
exactly the model test_mformer_end_to_end.py trains from mformer_iwslt_de_en: the same architecture and
every option training depends on, and the same initial parameters at the same seed. Its training to the
synthetic task's bar (BLEU >= 90, beam 5) is proven there; training it here again computed the very same
numbers (the two trained checkpoints were bit-identical), so this checks the identity instead, and the
unshrunk preset's own layout is checked in tests/models (the paper's Table 3)."""
import torch
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.cli.pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING
from translation_presets import PRESETS, translation_data  # noqa: F401  (fixture)

# Options that name the preset, or say the same per-layer widths as a list, not what is computed
NAMING = {"arch", "_name", "preset", "encoder_layer_ffn_embed_dims", "decoder_layer_ffn_embed_dims", "cross_attention_heads"}


def build(preset, data_bin):
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
        data_bin, "--user-dir", "fairseq_plugins", "--arch", preset, "--cpu", "--seed", "1",
        *TRANSLATION_TRAINING, *TINY_TRANSLATION_SIZES, *PRESETS[preset]])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return args, task.build_model(args)


def test_the_shrunk_wmt_preset_is_the_model_the_mformer_test_trains(translation_data):
    wmt_args, wmt = build("mformer_wmt_en_de", translation_data)
    iwslt_args, iwslt = build("mformer_iwslt_de_en", translation_data)
    assert wmt.architecture == iwslt.architecture
    kinds = [layer.attention_kind for layer in wmt.architecture.encoder_layers]
    assert kinds == ["softmax", "cosformer", "softmax", "cosformer", "softmax", "softmax"]  # the paper's layout
    assert [layer.cross_attention_heads for layer in wmt.architecture.decoder_layers] == [4, 4]
    differing = {k for k in set(vars(wmt_args)) | set(vars(iwslt_args))
                 if getattr(wmt_args, k, None) != getattr(iwslt_args, k, None)}
    assert differing <= NAMING, {k: (getattr(wmt_args, k, None), getattr(iwslt_args, k, None)) for k in differing - NAMING}
    wmt_state, iwslt_state = wmt.state_dict(), iwslt.state_dict()
    assert wmt_state.keys() == iwslt_state.keys() and all(torch.equal(wmt_state[k], iwslt_state[k]) for k in wmt_state)
