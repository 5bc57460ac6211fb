"""fairseq_plugins/cli/model_costs.py and the per-kind counts of complexity.py
(KIND_COSTS): parameters equal the built modules and models (every registered
kind in every placement, every preset), and forward FLOPs equal
torch.utils.flop_counter.FlopCounterMode's count of a small model."""
import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import fairseq_plugins  # noqa: F401  (registers kinds, models, presets)
from fairseq_plugins import complexity
from fairseq_plugins.cli import model_costs
from fairseq_plugins.modules.extractors import costs as extractor_costs
from fairseq_plugins.modules import ATTENTION_REGISTRY, ENCODER_DECODER, build_attention


def _dictionary(size: int) -> Dictionary:
    dictionary = Dictionary()
    for i in range(size - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    assert len(dictionary) == size
    return dictionary


def _task(size: int):
    dictionary = _dictionary(size)
    return SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)


def _parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields tied weights once


def test_every_registered_kind_has_counts():
    # a new kind without counts would make the preset table of docs/presets.md impossible to compute
    assert set(complexity.KIND_COSTS) == set(ATTENTION_REGISTRY)


def test_a_kind_without_counts_is_a_clear_error():
    with pytest.raises(ValueError, match="no parameter/FLOP count for attention kind 'nope'.*KIND_COSTS"):
        complexity.kind_cost("nope")


def _kind_cases():
    """(kind, placement, option overrides): every kind in every placement, its conformance variants,
    and the Extractor options that change its size."""
    for name, spec in sorted(ATTENTION_REGISTRY.items()):
        for placement in spec.placements:
            yield name, placement, {}
            for variant, value in spec.conformance_variants.items():
                if placement in value.placements:
                    yield name, placement, dict(value.overrides)
        if name.startswith("extractor_"):
            yield name, spec.placements[0], {"extractor_no_output_projection": True, "extractor_lags": 5}


@pytest.mark.parametrize("kind,placement,overrides", list(_kind_cases()), ids=lambda v: str(v))
def test_kind_parameters_equal_the_module(kind, placement, overrides):
    d, heads, kdim = 16, 4, (24 if placement == ENCODER_DECODER else 16)
    cfg = argparse.Namespace(max_target_positions=12, max_source_positions=12, cosformer_max_positions=None, **overrides)
    module = build_attention(kind, placement, d, heads, cfg, kdim=kdim, vdim=kdim)
    options = model_costs.attention_options(argparse.Namespace(decoder_attention_kinds=kind, **vars(cfg)))
    assert complexity.kind_cost(kind).parameters(placement, d, heads, kdim, options) == _parameters(module)


@pytest.mark.parametrize("kind,placement", [(kind, placement) for kind, spec in sorted(ATTENTION_REGISTRY.items())
                                             if spec.cls.supports_head_dim for placement in spec.placements])
def test_kind_costs_with_a_head_dimension_of_their_own(kind, placement):
    """4 heads of 6 dimensions in a 16-wide layer: parameters and decoding state of a 24-wide attention."""
    d, heads, kdim, head_dim = 16, 4, (24 if placement == ENCODER_DECODER else 16), 6
    cfg = argparse.Namespace(max_target_positions=12, max_source_positions=12, cosformer_max_positions=None)
    module = build_attention(kind, placement, d, heads, cfg, kdim=kdim, vdim=kdim, head_dim=head_dim)
    base = model_costs.attention_options(argparse.Namespace(decoder_attention_kinds=kind, **vars(cfg)))
    options = complexity.with_head_dim(base, heads, head_dim)
    cost = complexity.kind_cost(kind)
    assert cost.parameters(placement, d, heads, kdim, options) == _parameters(module)
    assert cost.parameters(placement, d, heads, kdim, options) > cost.parameters(placement, d, heads, kdim, base)  # 16 wide
    if placement != "encoder_self":  # the state's tensors of a decoded sequence, element by element
        state = {}
        query = torch.randn(1, 1, d)
        memory = torch.randn(5, 1, kdim) if placement == ENCODER_DECODER else query
        module.eval()(query, memory, memory, incremental_state=state, static_kv=placement == ENCODER_DECODER, need_weights=False)
        stored = sum(t.numel() for buffer in state.values() for t in buffer.values()
                     if torch.is_tensor(t) and t.is_floating_point())
        assert stored == cost.decoding_state_elements(placement, d, heads, 5 if placement == ENCODER_DECODER else 1, kdim, options)


def test_extractor_products_are_its_counted_multiplications_without_the_element_wise_one():
    # eq. 24's X_adj * X_ext (d multiplications per token) is element-wise, every other one a product
    options = complexity.AttentionOptions(lags=7)
    for kind in extractor_costs.EXTRACTOR_KINDS:
        counted = extractor_costs.extractor_training(kind, 16, 7, 10).multiplications
        elementwise = 0 if kind == "extractor_me" else 10 * 16
        assert complexity.kind_cost(kind).macs("decoder_self", 16, 4, 10, 10, 16, options) == counted - elementwise


def test_visible_pairs_of_the_masks():
    assert complexity.visible_pairs("encoder_self", 5, 5) == 25
    assert complexity.visible_pairs("encoder_decoder", 4, 7) == 28
    assert complexity.visible_pairs("decoder_self", 5, 5) == 15  # j <= i
    assert complexity.visible_pairs("decoder_self", 5, 5, diag_free=True) == 11  # j < i, and the first token itself
    with pytest.raises(ValueError, match="as many keys as queries"):
        complexity.visible_pairs("decoder_self", 4, 5)


@pytest.mark.parametrize("arch", model_costs.presets())
def test_preset_parameters_equal_the_built_model(arch):
    vocab = 37
    cost = model_costs.model_cost(model_costs.preset_args(arch))
    with torch.device("meta"):  # no memory, no initialisation: the largest presets build in a fraction of a second
        model = ARCH_MODEL_REGISTRY[arch].build_model(model_costs.preset_args(arch), _task(vocab))
    assert cost.total_parameters(vocab) == _parameters(model)
    # the dictionary-sized part is exactly the matrices with a row (or column) per entry
    assert cost.total_parameters(vocab + 1) - cost.total_parameters(vocab) == cost.parameters_per_entry


SMALL = [
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "48", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
    "--decoder-attention-heads", "2", "--encoder-attention-kinds", "softmax,cosformer",
    "--cross-attention-kinds", "cosformer,softmax", "--cross-attention-heads", "4,2", "--dropout", "0",
]


def test_forward_flops_equal_flop_counter_mode_on_a_small_model():
    """One training-mode forward pass (no padding) of a 2+2-layer model with softmax and cosFormer in the
    encoder, softmax decoder self-attention, cosFormer and softmax encoder-decoder attention.

    FlopCounterMode counts 2 FLOPs per multiply-add of every matrix product that runs (mm, addmm, bmm;
    sdpa on the math backend, whose products it sees) and nothing else; our count does the same for
    the products each kind's definition needs. The one difference, stated here exactly: fairseq's
    softmax decoder self-attention computes the whole T x T score and value products and masks the
    future, where the count covers the T (T + 1) / 2 visible pairs. (Training mode: in eval mode
    fairseq asks every encoder-decoder layer for its weights, which cosFormer computes separately.)"""
    vocab, S, T, d = 29, 9, 6, 32
    cost = model_costs.model_cost(model_costs.preset_args("mixed_transformer_iwslt_de_en", SMALL), S, T)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY["mixed_transformer_iwslt_de_en"].build_model(
        model_costs.preset_args("mixed_transformer_iwslt_de_en", SMALL), _task(vocab))
    model.train()
    src = torch.randint(4, vocab, (1, S))
    prev = torch.randint(4, vocab, (1, T))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, torch.tensor([S]), prev)
    masked_future = 2 * 2 * (T * T - T * (T + 1) // 2) * d  # q.k and a.v products of the masked pairs, 2 FLOPs each
    softmax_decoder_layers = 2
    assert counter.get_total_flops() == cost.total_flops(vocab) + softmax_decoder_layers * masked_future
    # the output projection is the per-entry part
    output_projection = sum(counter.get_flop_counts()["MixedTransformerModel.decoder.output_projection"].values())
    assert output_projection == vocab * cost.flops_per_entry == vocab * 2 * T * d


def test_flops_and_parameters_with_heads_of_their_own_dimension():
    """The small model with heads of their own dimension (attention widths other than 32): encoder layer 0
    4 x 12 = 48, decoder self-attention 2 x 8 = 16, encoder-decoder attention of layer 0 4 x 4 = 16."""
    vocab, S, T = 29, 9, 6
    args = SMALL + ["--encoder-layer-attention-head-dims", "12,auto", "--decoder-layer-attention-head-dims", "8",
                    "--cross-attention-head-dims", "4,auto"]
    cost = model_costs.model_cost(model_costs.preset_args("mixed_transformer_iwslt_de_en", args), S, T)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY["mixed_transformer_iwslt_de_en"].build_model(
        model_costs.preset_args("mixed_transformer_iwslt_de_en", args), _task(vocab))
    assert model.encoder.layers[0].self_attn.q_proj.weight.shape == (48, 32)
    assert model.decoder.layers[0].encoder_attn.out_proj.weight.shape == (32, 16)
    assert cost.total_parameters(vocab) == _parameters(model)
    model.train()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.randint(4, vocab, (1, S)), torch.tensor([S]), torch.randint(4, vocab, (1, T)))
    masked_future = 2 * 2 * (T * T - T * (T + 1) // 2) * 16  # softmax decoder self-attention 16 wide
    assert counter.get_total_flops() == cost.total_flops(vocab) + 2 * masked_future


def test_language_model_flops_equal_flop_counter_mode():
    """A tiny LM whose decoder self-attention is cosFormer in no layer and softmax in both (the LM path:
    no encoder, no cross-attention, shared input/output embeddings)."""
    vocab, T, d = 31, 7, 128
    cost = model_costs.model_cost(model_costs.preset_args("mixed_transformer_lm_tiny"), target_length=T)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY["mixed_transformer_lm_tiny"].build_model(model_costs.preset_args("mixed_transformer_lm_tiny"), _task(vocab))
    model.train()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.randint(4, vocab, (1, T)))
    masked_future = 2 * 2 * (T * T - T * (T + 1) // 2) * d
    assert counter.get_total_flops() == cost.total_flops(vocab) + 2 * masked_future
    assert cost.parameters_per_entry == d  # shared input/output embeddings


def test_unsupported_options_are_an_error_naming_them():
    args = model_costs.preset_args("mixed_transformer_lm_tiny", ["--adaptive-softmax-cutoff", "10,20"])
    with pytest.raises(ValueError, match="--adaptive-softmax-cutoff"):
        model_costs.model_cost(args)


def test_cli_table_and_errors(tmp_path, capsys):
    output = tmp_path / "costs.md"
    assert model_costs.main(["--arch", "mixed_transformer_lm_tiny", "--arch", "cosformer_lm_tiny", "--vocab", "1000",
                             "--target-length", "64", "--output", str(output)]) == 0
    cost = model_costs.model_cost(model_costs.preset_args("mixed_transformer_lm_tiny"), target_length=64)
    lines = output.read_text().splitlines()
    assert lines[:2] == ["Forward FLOPs of one sequence of T = 64 tokens.", ""]  # the lengths counted at, stated
    rows = lines[4:]
    assert [row.split("|")[1].strip() for row in rows] == ["`mixed_transformer_lm_tiny`", "`cosformer_lm_tiny`"]
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells[2] == f"{cost.parameters:,}" and cells[6] == f"{cost.total_parameters(1000):,}"
    assert not list(tmp_path.glob("*.partial"))
    for argv, message in ((["--arch", "transformer"], "--arch transformer: not a preset"),
                          (["--target-length", "0"], "--source-length and --target-length must be >= 1"),
                          # a language model has no source: the length would be ignored
                          (["--arch", "mixed_transformer_lm_tiny", "--arch", "cosformer_lm_tiny", "--source-length", "64"],
                           "error: --source-length: an option of encoder-decoder presets, and only language models are "
                           "counted (--arch mixed_transformer_lm_tiny, cosformer_lm_tiny; it would be ignored)")):
        with pytest.raises(SystemExit):
            model_costs.main(argv)
        assert message in capsys.readouterr().err


def test_the_table_states_the_lengths_it_counts_at(capsys):
    """S and T above the table (the cells do not say them); --source-length counts with an encoder-decoder among
    the presets, language models at T alone."""
    assert model_costs.main(["--arch", "mixed_transformer_lm_tiny", "--arch", "mixed_transformer_cpu_small",
                             "--source-length", "32", "--target-length", "16"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "Forward FLOPs of one sentence pair of S = 32 source and T = 16 target tokens (language models: T = 16 tokens).")
    assert model_costs.main(["--arch", "mixed_transformer_cpu_small"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "Forward FLOPs of one sentence pair of S = 128 source and T = 128 target tokens.")


def test_readme_table_is_the_scripts_output():
    # the guide's counts are those of the code at this revision, not a copy that can drift
    readme = (Path(__file__).resolve().parents[2] / "docs" / "presets.md").read_text(encoding="utf-8")
    start = "<!-- model_costs: python -m fairseq_plugins.cli.model_costs -->\n"
    assert readme.count(start) == 1
    table = readme.split(start, 1)[1].split("<!-- /model_costs -->", 1)[0]
    expected = model_costs.markdown_table([model_costs.model_cost(model_costs.preset_args(arch)) for arch in model_costs.presets()])
    assert table == expected, "docs/presets.md's preset table is out of date: rerun python -m fairseq_plugins.cli.model_costs"
