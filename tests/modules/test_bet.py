"""Bird-Eye attention (``bet``) and the diagonal ablations of the ``softmax``
kind: known answers, options and their errors, the cached token scores of
decoding, recording, and the options from fairseq's command line."""
import argparse
import math
import os

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.modules import (
    ATTENTION_REGISTRY,
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    AttentionConfigError,
    build_attention,
    check_kind,
)
from fairseq_plugins.modules.bet import BetAttention, naive_bet_attention, naive_bet_token_scores
from fairseq_plugins.modules.recording import AttentionRecorder
from fairseq_plugins.modules.shared import causal_additive_mask
from fairseq_plugins.modules.softmax import naive_softmax_attention

EMBED, HEADS = 16, 4
TOL = 1e-9

# (kind, options) of every module whose diagonal is hidden or changed
DIAG_FREE = [("bet", {}), ("bet", {"bet_score_weights": "shared"}), ("softmax", {"softmax_diag_free": True})]
VARIANTS = DIAG_FREE + [
    ("bet", {"bet_no_diag_free": True}),
    ("softmax", {"softmax_diag_scale": 0.2}),
    ("softmax", {"softmax_diag_scale": 2.0}),
]
VARIANT_IDS = [f"{kind}-{','.join(f'{k}={v}' for k, v in opts.items()) or 'default'}" for kind, opts in VARIANTS]
DIAG_FREE_IDS = VARIANT_IDS[: len(DIAG_FREE)]


def cfg(**opts):
    return argparse.Namespace(max_target_positions=64, max_source_positions=64, **opts)


def make(kind, placement=DECODER_SELF, embed=EMBED, heads=HEADS, dtype=torch.float64, seed=0, **opts):
    torch.manual_seed(seed)
    return build_attention(kind, placement, embed, heads, cfg(**opts)).to(dtype).eval()


def rand(*shape, seed=1, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def head_weights(module, x, pad=None):
    _, weights = module(x, x, x, key_padding_mask=pad, need_head_weights=True)
    return weights  # H x B x T x S


# ------------------------------------------------------- diagonal-free mask ---
@pytest.mark.parametrize("kind,opts", DIAG_FREE, ids=DIAG_FREE_IDS)
def test_diag_free_first_row_sees_itself_and_later_rows_never_the_diagonal(kind, opts):
    module = make(kind, **opts)
    assert module.hides_diagonal
    weights = head_weights(module, rand(6, 2, EMBED))
    first = weights[:, :, 0]
    assert torch.equal(first[..., 0], torch.ones_like(first[..., 0])) and torch.equal(first[..., 1:], torch.zeros_like(first[..., 1:]))
    diagonal = weights.diagonal(dim1=-2, dim2=-1)[..., 1:]
    assert torch.equal(diagonal, torch.zeros_like(diagonal))  # exactly zero, not small
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    below = weights.tril(-1)[..., 1:, :]
    assert (below.sum(-1) - 1).abs().max() < 1e-12


@pytest.mark.parametrize("kind,opts", [("bet", {}), ("bet", {"bet_no_diag_free": True}), ("softmax", {"softmax_diag_free": True}),
                                       ("softmax", {"softmax_diag_scale": 0.2}), ("softmax", {"softmax_diag_scale": -1.5})],
                         ids=["bet", "bet-no-diag-free", "diag-free", "reduced-diag", "negative-diag"])
def test_a_decoding_steps_weights_are_its_row_of_the_full_pass(kind, opts):
    """fairseq's decoding steps (one token, no padding) take the kinds' maskless path: each step's per-head
    weights are its row of the full pass's, the diagonal-free ones 0 on the token itself from the second."""
    module = make(kind, **opts)
    x = rand(9, 2, EMBED)
    full = head_weights(module, x)  # H x B x T x S
    state = {}
    for t in range(x.size(0)):
        out, weights = module(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state, need_head_weights=True)
        assert torch.allclose(weights, full[:, :, t : t + 1, : t + 1], atol=TOL, rtol=0)
        if module.hides_diagonal and t > 0:
            assert torch.equal(weights[..., -1], torch.zeros_like(weights[..., -1]))


@pytest.mark.parametrize("kind,opts", DIAG_FREE, ids=DIAG_FREE_IDS)
def test_diag_free_under_left_padding_first_real_token_sees_itself(kind, opts):
    module = make(kind, **opts)
    x = rand(6, 2, EMBED)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[0, :3] = True  # sequence 0: three pads, then its first real token at position 3
    weights = head_weights(module, x, pad)
    row = weights[:, 0, 3]
    assert torch.equal(row[:, 3], torch.ones_like(row[:, 3])) and row[:, :3].abs().max() == 0 and row[:, 4:].abs().max() == 0
    assert weights[:, 0, :3].abs().max() == 0, "a query before the first real token attends to nothing"
    assert weights[:, 0, 4:, :3].abs().max() == 0 and weights[:, 0, 4:].diagonal(offset=4, dim1=-2, dim2=-1).abs().max() == 0
    # the unpadded sequence 1: its first token sees itself
    assert torch.equal(weights[:, 1, 0, 0], torch.ones_like(weights[:, 1, 0, 0]))
    # and the real part of sequence 0 is the sequence alone
    alone, _ = module(x[3:, :1], x[3:, :1], x[3:, :1])
    batched, _ = module(x, x, x, key_padding_mask=pad)
    assert torch.allclose(alone[:, 0], batched[3:, 0], atol=TOL, rtol=0)
    assert torch.isfinite(batched).all(), "padded queries must not produce NaN"


def test_bet_no_diag_free_keeps_the_diagonal():
    module = make("bet", bet_no_diag_free=True)
    assert not module.hides_diagonal and not module.diag_free
    weights = head_weights(module, rand(6, 2, EMBED))
    assert (weights.diagonal(dim1=-2, dim2=-1) > 0).all()
    hidden = make("bet")
    assert hidden.hides_diagonal and hidden.diag_free


def test_hides_diagonal_only_where_the_diagonal_is_hidden():
    assert not make("softmax").hides_diagonal
    assert not make("softmax", softmax_diag_scale=0.2).hides_diagonal
    assert make("softmax", softmax_diag_free=True).hides_diagonal
    # the ablations act on causal self-attention only
    for placement in (ENCODER_SELF, ENCODER_DECODER):
        module = make("softmax", placement, softmax_diag_free=True)
        assert not module.hides_diagonal and not module.changes_diagonal
        plain = make("softmax", placement)
        x, memory = rand(5, 2, EMBED), rand(7, 2, EMBED, seed=2)
        key = x if placement == ENCODER_SELF else memory
        assert torch.equal(module(x, key, key)[0], plain(x, key, key)[0])


# --------------------------------------------------------- diagonal scale ---
def test_diag_scale_one_on_the_explicit_path_equals_fairseq_softmax():
    """The explicit path (used by the ablations) with factor 1 reproduces
    fairseq's own computation: outputs, per-head and averaged weights, also
    with fairseq's future mask, padding, and incremental decoding."""
    module = make("softmax")
    x = rand(7, 3, EMBED)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[2, 4:] = True
    for mask in (None, causal_additive_mask(7, 7, x)):
        for need_head_weights in (False, True):
            expected = module(x, x, x, key_padding_mask=pad, attn_mask=mask, need_head_weights=need_head_weights)
            actual = module._forward_changed_diagonal(x, x, x, pad, None, True, False, mask, need_head_weights)
            assert actual[1].shape == expected[1].shape
            assert torch.allclose(actual[0], expected[0], atol=1e-6, rtol=0)
            assert torch.allclose(actual[1].to(expected[1].dtype), expected[1], atol=1e-6, rtol=0)
    state_fairseq, state_explicit = {}, {}
    for t in range(7):
        step = x[t : t + 1]
        expected, _ = module(step, step, step, incremental_state=state_fairseq)
        actual, _ = module._forward_changed_diagonal(step, step, step, None, state_explicit, False, False, None, False)
        assert torch.allclose(actual, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("factor", [0.2, 2.0, -1.5, 0.0])
def test_diag_scale_equals_a_hand_computation(factor):
    """One head of width 2, identity projections, tokens x = (1,0), (0,1), (1,1):
    scores x_i.x_j / sqrt(2) with the diagonal times the factor."""
    module = make("softmax", embed=2, heads=1, softmax_diag_scale=factor)
    with torch.no_grad():
        for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
            proj.weight.copy_(torch.eye(2))
            proj.bias.zero_()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64).unsqueeze(1)
    out, weights = module(x, x, x, need_weights=True)
    r = 1 / math.sqrt(2)

    def softmax(*scores):
        exps = [math.exp(s) for s in scores]
        return [e / sum(exps) for e in exps]

    expected_weights = [
        [1.0, 0.0, 0.0],  # token 0 sees only itself, whatever its (scaled) score
        softmax(0.0, factor * r) + [0.0],  # x1.x0 = 0, x1.x1 = 1
        softmax(r, r, factor * 2 * r),  # x2.x0 = x2.x1 = 1, x2.x2 = 2
    ]
    expected = torch.tensor(expected_weights, dtype=torch.float64)
    assert torch.allclose(weights[0], expected, atol=1e-12, rtol=0)
    assert torch.allclose(out[:, 0], expected @ x[:, 0], atol=1e-12, rtol=0)
    # the naive reference agrees
    assert torch.allclose(naive_softmax_attention(module, x, x, x), out, atol=1e-12, rtol=0)


@pytest.mark.parametrize("factor", [0.0, -2.0])
def test_diag_scale_keeps_padded_diagonals_masked(factor):
    """0 * -inf and a negative factor must not unmask a padded diagonal (NaN / +inf)."""
    module = make("softmax", softmax_diag_scale=factor)
    x = rand(6, 2, EMBED)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    out, weights = module(x, x, x, key_padding_mask=pad, need_head_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert weights[:, 1, :, 4:].abs().max() == 0
    reference = naive_softmax_attention(module, x, x, x, pad)
    assert torch.allclose(out[:4, 1], reference[:4, 1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind,opts", VARIANTS, ids=VARIANT_IDS)
def test_fairseq_future_mask_changes_nothing(kind, opts):
    """fairseq's decoder passes its future mask to softmax layers: the
    ablations give the same result with it; bet refuses any attn_mask."""
    module = make(kind, **opts)
    x = rand(6, 2, EMBED)
    mask = causal_additive_mask(6, 6, x)
    if kind == "bet":
        with pytest.raises(ValueError, match="attn_mask"):
            module(x, x, x, attn_mask=mask)
        return
    assert torch.allclose(module(x, x, x, attn_mask=mask)[0], module(x, x, x)[0], atol=1e-12, rtol=0)


# -------------------------------------------------------------- options ---
def test_diag_free_with_diag_scale_names_both_options():
    with pytest.raises(AttentionConfigError, match="--softmax-diag-free.*--softmax-diag-scale"):
        make("softmax", softmax_diag_free=True, softmax_diag_scale=0.2)
    make("softmax", softmax_diag_free=True, softmax_diag_scale=1.0)  # the default scale is not "set"


@pytest.mark.parametrize("scale", [float("inf"), float("nan")])
def test_diag_scale_must_be_finite(scale):
    with pytest.raises(AttentionConfigError, match="--softmax-diag-scale"):
        make("softmax", softmax_diag_scale=scale)


def test_bad_score_weights_name_the_option():
    with pytest.raises(AttentionConfigError, match="--bet-score-weights.*per-head, shared.*'global'"):
        make("bet", bet_score_weights="global")


@pytest.mark.parametrize("placement", [ENCODER_SELF, ENCODER_DECODER])
def test_bet_only_in_decoder_self_attention(placement):
    with pytest.raises(AttentionConfigError, match=f"'bet' cannot be used for {placement}.*supports decoder_self"):
        check_kind("bet", placement, "--some-option")
    with pytest.raises(AttentionConfigError, match=f"'bet' cannot be used for {placement}"):
        build_attention("bet", placement, EMBED, HEADS, cfg())
    with pytest.raises(AttentionConfigError, match="only supports decoder_self"):
        BetAttention(placement, EMBED, HEADS)


def test_score_weight_shapes_per_head_and_shared():
    per_head, shared = make("bet"), make("bet", bet_score_weights="shared")
    head_dim = EMBED // HEADS
    assert per_head.score_weight.shape == (HEADS, 2 * head_dim)
    assert shared.score_weight.shape == (2 * EMBED,)
    names = {n for n, _ in per_head.named_parameters()}
    assert names == {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
                     "out_proj.weight", "out_proj.bias", "score_weight"}  # eq. 7 has no bias
    # per head: one score per head and token; shared: one per token
    x = rand(5, 2, EMBED)
    assert naive_bet_token_scores(per_head, x).shape == (2, HEADS, 5)
    assert naive_bet_token_scores(shared, x).shape == (2, 1, 5)
    # both initialised like a bias-free nn.Linear(fan_in, 1)
    assert per_head.score_weight.abs().max() <= 1 / math.sqrt(2 * head_dim) and per_head.score_weight.std() > 0
    assert shared.score_weight.abs().max() <= 1 / math.sqrt(2 * EMBED) and shared.score_weight.std() > 0


def test_shared_scores_are_the_per_head_terms_summed():
    """shared w = [w_H ; w_K] over the heads' concatenations: with the per-head
    module's rows laid out that way the shared logit is the sum of the per-head
    logits (checked against the naive eq. 7)."""
    per_head, shared = make("bet"), make("bet", bet_score_weights="shared")
    shared.load_state_dict({k: v for k, v in per_head.state_dict().items() if k != "score_weight"}, strict=False)
    head_dim = EMBED // HEADS
    with torch.no_grad():
        w = per_head.score_weight.view(HEADS, 2, head_dim)
        shared.score_weight.copy_(torch.cat([w[:, 0].reshape(-1), w[:, 1].reshape(-1)]))
    x = rand(5, 2, EMBED)
    r_heads, r_shared = naive_bet_token_scores(per_head, x), naive_bet_token_scores(shared, x)
    logits = torch.logit(r_heads).sum(dim=1, keepdim=True)
    assert torch.allclose(torch.sigmoid(logits), r_shared, atol=1e-10)


def test_token_scores_rescale_the_key_columns():
    """eq. 8 known answer: with w = 0 every R_j = sigmoid(0) = 1/2, so (with the
    ordinary causal mask) A' = softmax(M_dp / 2)."""
    module = make("bet", bet_no_diag_free=True)
    x = rand(4, 1, EMBED)
    with torch.no_grad():
        module.score_weight.zero_()
    _, weights = module(x, x, x, need_head_weights=True)
    q = module.q_proj(x).view(4, HEADS, -1).transpose(0, 1)
    k = module.k_proj(x).view(4, HEADS, -1).transpose(0, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(EMBED // HEADS) / 2
    expected = torch.softmax(scores.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    assert torch.allclose(weights[:, 0], expected, atol=1e-12)


# ------------------------------------------------- decoding: cached scores ---
def decode(module, x, pads=None, reorders=(), chunks=None):
    """Step-by-step decoding (fairseq passes each step's padding, B x T_step);
    ``reorders``: [(step, new_order)] as beam search does (slot b then continues
    hypothesis new_order[b] with the token x[t, b]); ``chunks``: the
    number of tokens fed per call. Returns outputs and the state."""
    assert pads is None or not reorders, "this helper reorders histories only, not the padding of new tokens"
    state, outputs, t = {}, [], 0
    chunks = chunks or [1] * x.size(0)
    reorders = dict(reorders)
    for size in chunks:
        if t in reorders:
            order = reorders[t]
            module.reorder_incremental_state(state, order)
            # the hypotheses' new tokens stay x[t:] (unlike their histories)
            pads = pads.index_select(0, order) if pads is not None else None
            outputs = [o.index_select(1, order) for o in outputs]
        step = x[t : t + size]
        step_pad = pads[:, t : t + size] if pads is not None else None
        out, _ = module(step, step, step, key_padding_mask=step_pad, incremental_state=state, need_weights=False)
        outputs.append(out)
        t += size
    return torch.cat(outputs, dim=0), state


@pytest.mark.parametrize("score_weights", ["per-head", "shared"])
def test_decoding_caches_past_scores_and_equals_the_full_pass(score_weights):
    module = make("bet", bet_score_weights=score_weights)
    steps = 24
    x = rand(steps, 2, EMBED)
    full, full_weights = module(x, x, x)
    cached_scores = []
    state = {}
    outputs = []
    for t in range(steps):
        out, weights = module(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state)
        outputs.append(out)
        cached_scores.append(module._get_input_buffer(state)["prev_score"].clone())
        # a step's weights are its row of the full pass's A' (the diagonal-free mask: 0 on itself from t = 1)
        assert torch.allclose(weights, full_weights[:, t : t + 1, : t + 1], atol=TOL, rtol=0)
        assert (t == 0) == bool((weights[..., -1] == 1).all()) and (t == 0 or bool((weights[..., -1] == 0).all()))
    assert torch.allclose(torch.cat(outputs), full, atol=TOL, rtol=0)
    # the R of a past token is computed once, when the token is fed, and then only read
    for t in range(1, steps):
        assert torch.equal(cached_scores[t][..., :t], cached_scores[t - 1])
    # and it is eq. 7 of the full sequence (R_j depends only on tokens <= j)
    assert torch.allclose(cached_scores[-1], naive_bet_token_scores(module, x), atol=TOL, rtol=0)
    buffer = module._get_input_buffer(state)
    assert buffer["prev_key"].shape == buffer["prev_value"].shape == (2, HEADS, steps, EMBED // HEADS)
    assert buffer["prev_score"].shape == (2, HEADS if score_weights == "per-head" else 1, steps)


@pytest.mark.parametrize("opts", [{}, {"bet_score_weights": "shared"}, {"bet_no_diag_free": True}], ids=["per-head", "shared", "no-diag-free"])
def test_decoding_after_beam_reorders_and_in_chunks(opts):
    module = make("bet", **opts)
    steps = 20
    x = rand(steps, 4, EMBED)
    first, second = torch.tensor([1, 1, 3, 0]), torch.tensor([3, 2, 2, 1])
    decoded, _ = decode(module, x, reorders=[(6, first), (13, second)])
    # each row continues the history of the hypothesis it came from
    history = torch.cat([x[:6].index_select(1, first).index_select(1, second), x[6:13].index_select(1, second), x[13:]])
    expected, _ = module(history, history, history)
    assert torch.allclose(decoded, expected, atol=TOL, rtol=0)
    # several tokens per call (the new queries are the last T of S keys)
    chunked, _ = decode(module, x, chunks=[3, 1, 5, 2, 9])
    full, _ = module(x, x, x)
    assert torch.allclose(chunked, full, atol=TOL, rtol=0)


@pytest.mark.parametrize("kind,opts", VARIANTS, ids=VARIANT_IDS)
def test_decoding_left_padded_batches_equals_the_full_pass(kind, opts):
    """fairseq passes each step's padding (B x 1): the cache keeps the padding of
    the prefix, so the first real token after left padding sees only itself."""
    module = make(kind, **opts)
    x = rand(9, 3, EMBED)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[0, :4] = True
    pad[1, :1] = True
    full, _ = module(x, x, x, key_padding_mask=pad)
    decoded, _ = decode(module, x, pads=pad)
    real = (~pad).T.unsqueeze(-1).expand_as(full)
    assert torch.allclose(decoded[real], full[real], atol=1e-6, rtol=0)
    reference = (naive_bet_attention if kind == "bet" else naive_softmax_attention)(module, x, x, x, pad)
    assert torch.allclose(full[real], reference[real], atol=1e-6, rtol=0)


def test_bet_half_precision_softmax_in_float32():
    module64 = make("bet")
    module = make("bet", dtype=torch.bfloat16)
    x = rand(8, 2, EMBED)
    out, weights = module(x.bfloat16(), x.bfloat16(), x.bfloat16(), need_head_weights=True)
    _, weights64 = module64(x, x, x, need_head_weights=True)
    assert out.dtype == torch.bfloat16 and weights.dtype == torch.float32  # fairseq returns float32 weights too
    assert torch.allclose(weights.double(), weights64, atol=0.05)
    assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1)), atol=1e-5)


# ------------------------------------------------------------- recording ---
@pytest.mark.parametrize("kind,opts", VARIANTS, ids=VARIANT_IDS)
def test_recorder_records_bet_and_the_ablations(kind, opts):
    module = make(kind, **opts)
    x = rand(6, 2, EMBED)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    plain, _ = module(x, x, x, key_padding_mask=pad, need_weights=False)
    _, expected = module(x, x, x, key_padding_mask=pad, need_head_weights=True)
    with AttentionRecorder([module]) as recorder:
        out, weights = module(query=x, key=x, value=x, key_padding_mask=pad, need_weights=False)
    # real rows: the same output on the recorded (explicit) path; pad rows' outputs are
    # unspecified (bet's fused path lets pad queries see pad keys) and never read
    real = (~pad).T.unsqueeze(-1)
    assert weights is None and torch.allclose(out * real, plain * real, atol=1e-12)
    probs = recorder.probs[0]
    assert probs.shape == (2, HEADS, 6, 6)
    assert torch.allclose(probs, expected.transpose(0, 1), atol=1e-12)
    assert torch.allclose(probs.sum(-1), torch.ones_like(probs.sum(-1)), atol=1e-10)
    assert probs.triu(1).abs().max() == 0 and probs[1, :, :, 4:].abs().max() == 0
    if module.hides_diagonal:
        assert probs.diagonal(dim1=-2, dim2=-1)[..., 1:].abs().max() == 0
    # the recorded distributions carry gradients (BET(SG)'s pointer loss)
    module.train()
    with AttentionRecorder([module]) as recorder:
        module(query=x, key=x, value=x, key_padding_mask=pad, need_weights=False)
    recorder.probs[0][..., 0].sum().backward()
    assert module.q_proj.weight.grad is not None and module.q_proj.weight.grad.abs().sum() > 0


# ------------------------------------------- through fairseq's command line ---
WORDS = [f"w{i}" for i in range(20)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        with open(path / name, "w") as f:
            f.writelines(f"{w} 10\n" for w in WORDS)
    return str(path)


def build_model(data_dir, *extra):
    parser = options.get_training_parser()
    argv = [data_dir, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_transformer_iwslt_de_en",
            "--user-dir", os.path.dirname(fairseq_plugins.__file__), "--encoder-layers", "1", "--decoder-layers", "3",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0.0"]
    args = options.parse_args_and_arch(parser, input_args=argv + list(extra))
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args).eval()


def test_options_from_the_command_line(data_dir):
    model = build_model(
        data_dir, "--decoder-attention-kinds", "bet,softmax,softmax", "--bet-score-weights", "shared", "--softmax-diag-scale", "0.2"
    )
    bet, softmax, _ = (layer.self_attn for layer in model.decoder.layers)
    assert isinstance(bet, BetAttention) and bet.score_weights == "shared" and bet.hides_diagonal
    assert softmax.diag_scale == 0.2 and not softmax.hides_diagonal
    assert model.encoder.layers[0].self_attn.diag_scale == 1.0  # encoder self-attention is unaffected
    assert model.decoder.layers[0].encoder_attn.diag_scale == 1.0  # and so is encoder-decoder attention
    defaults = build_model(data_dir, "--decoder-attention-kinds", "bet", "--softmax-diag-free")
    assert all(l.self_attn.score_weights == "per-head" and l.self_attn.diag_free for l in defaults.decoder.layers)
    assert not defaults.decoder.layers[0].encoder_attn.hides_diagonal
    ablation = build_model(data_dir, "--decoder-attention-kinds", "bet", "--bet-no-diag-free")
    assert not any(l.self_attn.hides_diagonal for l in ablation.decoder.layers)
    with pytest.raises(AttentionConfigError, match="--softmax-diag-free.*--softmax-diag-scale"):
        build_model(data_dir, "--softmax-diag-free", "--softmax-diag-scale", "2.0")
    with pytest.raises(AttentionConfigError, match="--bet-score-weights"):
        build_model(data_dir, "--decoder-attention-kinds", "bet", "--bet-score-weights", "both")


def test_model_decoding_equals_teacher_forcing(data_dir):
    """A decoder mixing bet and the diag-free softmax: fairseq's incremental
    decoding (with its own cache handling and future mask) equals the full pass,
    and the recorder sees every layer's distribution."""
    model = build_model(data_dir, "--decoder-attention-kinds", "bet,softmax,bet", "--softmax-diag-free")
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, 24, (2, 5), generator=gen)
    prev = torch.randint(4, 24, (2, 7), generator=gen)
    prev[:, 0] = 2
    lengths = torch.full((2,), 5)
    with torch.no_grad():
        with AttentionRecorder.for_decoder_self_attention(model.decoder) as recorder:
            full, _ = model(src, lengths, prev)
        encoder_out = model.encoder(src, src_lengths=lengths)
        state = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0] for t in range(7)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert all(p.shape == (2, 2, 7, 7) for p in recorder.probs)
    for p in recorder.probs:
        assert p.diagonal(dim1=-2, dim2=-1)[..., 1:].abs().max() == 0
    assert ATTENTION_REGISTRY["bet"].placements == (DECODER_SELF,)
