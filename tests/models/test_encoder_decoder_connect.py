"""--encoder-decoder-connect (the "En-De Connect" of the mixed-attention search space): each decoder
layer's encoder-decoder attention attends to the outputs of the last k encoder layers concatenated along
time, checked against a naive construction for every encoder-decoder kind, in full passes and in
step-by-step decoding with left-padded sources and beam reordering."""
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.models.architecture import Architecture, DecoderLayer, EncoderLayer, architecture_options
from fairseq_plugins.modules import ATTENTION_REGISTRY, ENCODER_DECODER, AttentionConfigError, build_attention, valid_kinds

CROSS_KINDS = [k for k in valid_kinds(ENCODER_DECODER) if getattr(ATTENTION_REGISTRY[k].cls, "supports_key_copies", False)]
TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0.0",
        "--encoder-layers", "3", "--decoder-layers", "2", "--max-source-positions", "32", "--max-target-positions", "32"]
WORDS = [f"w{i}" for i in range(20)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        with open(path / name, "w") as f:
            f.writelines(f"{w} 10\n" for w in WORDS)
    return str(path)


def build(data_dir, *extra):
    argv = [data_dir, "--task", "translation", "--arch", "mixed_transformer", "-s", "src", "-t", "tgt",
            "--user-dir", os.path.dirname(fairseq_plugins.__file__)]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv + TINY + list(extra))
    torch.manual_seed(0)
    return tasks.setup_task(args).build_model(args).eval()


def batch(bsz=3, src_len=7, tgt_len=5):
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, 4 + len(WORDS), (bsz, src_len), generator=gen)
    src[1, :2] = 1  # left padding (pad index 1), as fairseq batches sources
    src[2, :4] = 1
    prev = torch.randint(4, 4 + len(WORDS), (bsz, tgt_len), generator=gen)
    prev[:, 0] = 2
    return src, (src != 1).sum(1), prev


def hand_keys(model, src, lengths, k):
    """The keys of the last k encoder layers by hand: every layer's output caught by a hook, the last one
    through the final layer norm (if any), concatenated along time (last layer first); masks repeated."""
    outputs = []
    hooks = [layer.register_forward_hook(lambda m, i, o: outputs.append(o)) for layer in model.encoder.layers]
    try:
        with torch.no_grad():
            model.encoder(src, lengths)
    finally:
        for hook in hooks:
            hook.remove()
    last = outputs[-1] if model.encoder.layer_norm is None else model.encoder.layer_norm(outputs[-1])
    copies = [last] + [outputs[-i] for i in range(2, k + 1)]
    mask = src.eq(1)
    return torch.cat(copies, dim=0), torch.cat([mask] * k, dim=1)


def naive_full_pass(model, src, lengths, prev):
    """The same weights in a connect-1 model whose encoder-decoder attentions are replaced by the kind's naive
    reference (registry; per-copy positions) over the hand-made keys of each layer's k."""
    reference = build_like(model)
    for layer, choices in zip(reference.decoder.layers, model.architecture.decoder_layers):
        keys, mask = hand_keys(model, src, lengths, choices.encoder_decoder_connect)
        attention = layer.encoder_attn
        attention.key_copies = choices.encoder_decoder_connect
        naive = ATTENTION_REGISTRY[choices.cross_attention_kind].naive_reference

        def forward(query, key, value, *args, _a=attention, _n=naive, _keys=keys, _mask=mask, **kwargs):
            return _n(_a, query, _keys, _keys, _mask), None

        attention.forward = forward
    with torch.no_grad():
        return reference(src, lengths, prev)[0]


_BUILD_ARGS = {}


def build_like(model):
    reference = build(*_BUILD_ARGS[id(model)][:1], *_BUILD_ARGS[id(model)][1], "--encoder-decoder-connect", "1")
    reference.load_state_dict(model.state_dict())
    return reference


def built(data_dir, kind, connect, *extra):
    model = build(data_dir, "--cross-attention-kinds", kind, "--encoder-decoder-connect", connect, *extra)
    _BUILD_ARGS[id(model)] = (data_dir, ["--cross-attention-kinds", kind, *extra])
    return model


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("connect", ["2", "1,3"])
@pytest.mark.parametrize("kind", CROSS_KINDS)
def test_full_pass_equals_naive_construction(data_dir, kind, connect, normalize_before):
    extra = ["--encoder-normalize-before"] if normalize_before else []
    model = built(data_dir, kind, connect, *extra)
    src, lengths, prev = batch()
    with torch.no_grad():
        actual = model(src, lengths, prev)[0]
    torch.testing.assert_close(actual, naive_full_pass(model, src, lengths, prev), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", CROSS_KINDS)
def test_step_by_step_decoding_with_beam_reordering_equals_full_pass(data_dir, kind):
    model = built(data_dir, kind, "2")
    src, lengths, prev = batch()
    order = torch.tensor([2, 0, 0, 1, 2])  # beam-style: rows repeated and permuted
    with torch.no_grad():
        full_before = model(src, lengths, prev)[0]
        full_after = model(src[order], lengths[order], prev[order])[0]
        encoder_out = model.encoder.forward_torchscript({"src_tokens": src, "src_lengths": lengths})  # as the generator
        assert len(encoder_out["encoder_states"]) == 4  # embeddings + 3 layers: returned because connect > 1
        state = {}
        switch = 2
        for t in range(prev.size(1)):
            if t == switch:
                model.decoder.reorder_incremental_state_scripting(state, order)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
            tokens = prev[:, : t + 1] if t < switch else prev[order][:, : t + 1]
            step = model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)[0]
            expected = full_before if t < switch else full_after
            torch.testing.assert_close(step[:, -1], expected[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", CROSS_KINDS)
def test_connect_1_is_todays_model_exactly(data_dir, kind):
    today = build(data_dir, "--cross-attention-kinds", kind)
    explicit = build(data_dir, "--cross-attention-kinds", kind, "--encoder-decoder-connect", "1")
    src, lengths, prev = batch()
    with torch.no_grad():
        assert torch.equal(today(src, lengths, prev)[0], explicit(src, lengths, prev)[0])
        assert today.encoder(src, lengths)["encoder_states"] == []  # no intermediate outputs unless needed
    assert [layer.encoder_decoder_connect for layer in today.architecture.decoder_layers] == [1, 1]


def test_connected_model_differs_from_connect_1(data_dir):
    src, lengths, prev = batch()
    with torch.no_grad():
        one = build(data_dir)(src, lengths, prev)[0]
        two = build(data_dir, "--encoder-decoder-connect", "2")(src, lengths, prev)[0]
    assert not torch.allclose(one, two)


@pytest.mark.parametrize("extra, message", [
    (["--encoder-decoder-connect", "4"],
     "--encoder-decoder-connect (decoder layer 0): 4 encoder layers, but the encoder has 3; give 1 to 3"),
    (["--encoder-decoder-connect", "1,2,3"], "--encoder-decoder-connect has 3 values (1,2,3) but the model has 2 layers"),
    (["--encoder-decoder-connect", "0"], "--encoder-decoder-connect: cannot read '0' as a list of positive integers"),
    (["--encoder-decoder-connect", "x"], "--encoder-decoder-connect: cannot read 'x' as a list of positive integers"),
    (["--encoder-decoder-connect", "3", "--encoder-layers-to-keep", "0,2"],
     "--encoder-decoder-connect (decoder layer 0): 3 encoder layers, but the encoder has 2 (after --encoder-layers-to-keep)"),
    (["--encoder-decoder-connect", "2", "--encoder-layerdrop", "0.1"],
     "--encoder-decoder-connect > 1 cannot be combined with --encoder-layerdrop"),
])
def test_option_errors(data_dir, extra, message):
    with pytest.raises(AttentionConfigError) as error:
        build(data_dir, *extra)
    assert message in str(error.value)


def test_architecture_json_round_trips_connect(data_dir):
    architecture = Architecture(
        decoder_embed_dim=16, encoder_embed_dim=16, encoder_layers=(EncoderLayer("softmax", 2, 32),) * 3,
        decoder_layers=(DecoderLayer("softmax", 2, 32, "cosformer", 2, 1), DecoderLayer("softmax", 2, 32, "softmax", 2, 3)))
    again = Architecture.from_json(architecture.to_json())
    assert again == architecture
    assert [layer["encoder_decoder_connect"] for layer in json.loads(architecture.to_json())["decoder_layers"]] == [1, 3]
    assert architecture_options(architecture)["encoder_decoder_connect"] == "1,3"
    model = build(data_dir, "--cross-attention-kinds", "cosformer,softmax", "--encoder-decoder-connect", "1,3")
    assert model.architecture.decoder_layers[1].encoder_decoder_connect == 3
    assert Architecture.from_json(model.architecture.to_json()) == model.architecture
    bad = architecture.to_dict()
    bad["decoder_layers"][1]["encoder_decoder_connect"] = 4
    with pytest.raises(AttentionConfigError, match=r"--encoder-decoder-connect \(decoder layer 1\): 4 encoder layers, but the encoder has 3"):
        Architecture.from_dict(bad)


# ------------------------------------------------- the attention math ---
def explicit_cosformer_over_copies(module, query, copies, key_padding_mask):
    """cosFormer encoder-decoder attention (eq. 9) written as an explicit loop over the copies: each copy's
    keys have their own positions 0..S-1 (counted from the copy's first real key); numerator and
    denominator sum over every copy's keys."""
    tgt_len, bsz, _ = query.shape
    heads, dim, horizon = module.num_heads, module.head_dim, module.horizon
    q = F.relu(F.linear(query, module.q_proj.weight, module.q_proj.bias))
    out = query.new_zeros(tgt_len, bsz, heads * dim)
    for b in range(bsz):
        real = [j for j in range(copies[0].size(0)) if not key_padding_mask[b, j]]
        for h in range(heads):
            sl = slice(h * dim, (h + 1) * dim)
            for i in range(tgt_len):
                numerator, denominator = query.new_zeros(dim), query.new_zeros(())
                for source in copies:
                    k = F.relu(F.linear(source, module.k_proj.weight, module.k_proj.bias))
                    v = F.linear(source, module.v_proj.weight, module.v_proj.bias)
                    for position, j in enumerate(real):
                        weight = (q[i, b, sl] @ k[j, b, sl]) * math.cos(math.pi / 2 * (i - position) / horizon)
                        numerator = numerator + weight * v[j, b, sl]
                        denominator = denominator + weight
                out[i, b, sl] = numerator / denominator.clamp_min(module.eps)
    return F.linear(out, module.out_proj.weight, module.out_proj.bias)


class Options:
    cosformer_max_positions = 8  # < 3 copies x 5 keys: the horizon holds per copy


def test_cosformer_over_concatenated_copies_equals_loop_over_copies():
    torch.manual_seed(0)
    module = build_attention("cosformer", ENCODER_DECODER, 8, 2, Options(), key_copies=3).double()
    src_len, bsz, tgt_len = 5, 3, 4
    copies = [torch.randn(src_len, bsz, 8, dtype=torch.double) for _ in range(3)]
    mask = torch.zeros(bsz, src_len, dtype=torch.bool)
    mask[1, :2] = True  # left padding
    mask[2, :4] = True
    query = torch.randn(tgt_len, bsz, 8, dtype=torch.double)
    keys, keys_mask = torch.cat(copies), mask.repeat(1, 3)
    expected = explicit_cosformer_over_copies(module, query, copies, mask)
    actual, weights = module(query, keys, keys, key_padding_mask=keys_mask, need_weights=True)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(ATTENTION_REGISTRY["cosformer"].naive_reference(module, query, keys, keys, keys_mask), expected)
    assert weights.shape == (bsz, tgt_len, 3 * src_len)
    # step by step: the constant-size state is computed once from the keys (static_kv) and reused
    state = {}
    for t in range(tgt_len):
        step, _ = module(query[t : t + 1], keys if t == 0 else None, keys if t == 0 else None,
                         key_padding_mask=keys_mask if t == 0 else None, incremental_state=state, static_kv=True, need_weights=False)
        torch.testing.assert_close(step[0], expected[t])
    # the horizon holds per copy: 3 copies of 5 keys need M >= 5, not 15
    assert module.horizon < 3 * src_len


@pytest.mark.parametrize("kind", CROSS_KINDS)
def test_every_kind_over_copies_equals_its_naive_reference(kind):
    torch.manual_seed(0)
    module = build_attention(kind, ENCODER_DECODER, 8, 2, Options(), key_copies=2).double().eval()
    keys = torch.randn(10, 2, 8, dtype=torch.double)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, :3] = True
    query = torch.randn(3, 2, 8, dtype=torch.double)
    actual, _ = module(query, keys, keys, key_padding_mask=mask.repeat(1, 2))
    torch.testing.assert_close(actual, ATTENTION_REGISTRY[kind].naive_reference(module, query, keys, keys, mask.repeat(1, 2)))


def test_a_kind_without_key_copies_is_refused():
    from fairseq_plugins.modules.registry import check_key_copies

    class NoCopies:
        supports_key_copies = False

    ATTENTION_REGISTRY["_nocopies"] = ATTENTION_REGISTRY["softmax"].__class__(
        "_nocopies", NoCopies, (ENCODER_DECODER,), None, "test")
    try:
        with pytest.raises(AttentionConfigError, match="--encoder-decoder-connect \\(decoder layer 0\\): attention kind '_nocopies' cannot attend to 2"):
            check_key_copies("_nocopies", 2, "--encoder-decoder-connect (decoder layer 0)")
        check_key_copies("_nocopies", 1)
    finally:
        del ATTENTION_REGISTRY["_nocopies"]


def test_alignment_attention_is_over_source_positions(data_dir):
    """k = 2 in the last decoder layer (the alignment layer): the decoder's returned attention has S columns,
    the sum over the two copies of the head-averaged weights over the 2*S keys (what fairseq-generate
    --print-alignment reads)."""
    model = built(data_dir, "softmax", "1,2")
    src, lengths, prev = batch()
    attention = model.decoder.layers[-1].encoder_attn
    queries = []
    hook = attention.register_forward_pre_hook(lambda m, args, kwargs: queries.append(kwargs["query"]), with_kwargs=True)
    try:
        with torch.no_grad():
            attn = model(src, lengths, prev)[1]["attn"][0]
    finally:
        hook.remove()
    assert attn.shape == (src.size(0), prev.size(1), src.size(1))
    keys, mask = hand_keys(model, src, lengths, 2)
    with torch.no_grad():
        _, per_head = attention(query=queries[0], key=keys, value=keys, key_padding_mask=mask, static_kv=True,
                                need_weights=True, need_head_weights=True)
    per_copy = per_head.mean(dim=0).view(src.size(0), prev.size(1), 2, src.size(1))
    torch.testing.assert_close(attn, per_copy.sum(dim=2))
    torch.testing.assert_close(attn.sum(-1), torch.ones(src.size(0), prev.size(1)))
    assert attn.masked_select(src.eq(1).unsqueeze(1)).abs().max() == 0  # nothing on padding
