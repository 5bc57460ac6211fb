"""The conformance suite: every registered attention kind, in every placement it
supports, must pass these checks, with its default options and with every
option variant it declares (``conformance_variants`` of ``register_attention``;
test ids ``kind[variant]-placement``). A new kind only registers itself (with a
naive reference) to be covered here."""
import argparse

import pytest
import torch

import fairseq_plugins  # noqa: F401  (registers the kinds)
from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, build_attention

EMBED, HEADS, TGT_LEN, SRC_LEN, BSZ = 16, 4, 7, 9, 3
# Every test sequence is at most MAX_POSITIONS long; kinds whose size depends on
# the maximum positions (e.g. a window of lags) then see it whole in the
# gradient test, which uses sequences of exactly this length.
MAX_POSITIONS = 12
# float64 everywhere; fairseq's incremental softmax path computes its softmax in
# float32 (fairseq.utils.softmax), hence 1e-6 rather than machine precision.
TOL = 1e-6

# The variant every kind that takes a head dimension of its own (``supports_head_dim``) runs besides its
# declared ones: heads of OWN_HEAD_DIM dimensions, an attention width (HEADS x 6 = 24) that is not the
# model width EMBED (a search space's head_dim: fixed).
OWN_HEAD_DIM_VARIANT, OWN_HEAD_DIM = "own_head_dim", 6


def _cases():
    """(kind, variant, placement): every kind with its default options (variant
    None), every option variant it declares, in the placements they act in, and
    OWN_HEAD_DIM_VARIANT where the kind supports it."""
    cases = []
    for kind, spec in sorted(ATTENTION_REGISTRY.items()):
        cases += [(kind, None, placement) for placement in spec.placements]
        for variant, declared in spec.conformance_variants.items():
            cases += [(kind, variant, placement) for placement in declared.placements]
        if getattr(spec.cls, "supports_head_dim", False):
            cases += [(kind, OWN_HEAD_DIM_VARIANT, placement) for placement in spec.placements]
    return cases


def variant_overrides(kind, variant):
    """The model options of a variant (none for the default and the head-dimension variant)."""
    if variant in (None, OWN_HEAD_DIM_VARIANT):
        return {}
    return dict(ATTENTION_REGISTRY[kind].conformance_variants[variant].overrides)


def build_case(kind, variant, placement, cfg):
    head_dim = OWN_HEAD_DIM if variant == OWN_HEAD_DIM_VARIANT else None
    module = build_attention(kind, placement, EMBED, HEADS, cfg, head_dim=head_dim)
    if head_dim is not None:  # the variant really has another attention width
        assert module.q_proj.weight.shape == (HEADS * OWN_HEAD_DIM, EMBED)
        assert module.out_proj.weight.shape == (EMBED, HEADS * OWN_HEAD_DIM)
    return module


def kind_id(kind, variant):
    return kind if variant is None else f"{kind}[{variant}]"


def case_params(placements=None, with_placement=True):
    return [
        pytest.param(kind, variant, placement, id=f"{kind_id(kind, variant)}-{placement}" if with_placement else kind_id(kind, variant))
        for kind, variant, placement in _cases()
        if placements is None or placement in placements
    ]


CASES = case_params()
DECODING_CASES = case_params((DECODER_SELF, ENCODER_DECODER))
DECODER_SELF_CASES = case_params((DECODER_SELF,), with_placement=False)
CROSS_CASES = case_params((ENCODER_DECODER,), with_placement=False)


def model_cfg(**overrides):
    cfg = argparse.Namespace(max_target_positions=MAX_POSITIONS, max_source_positions=MAX_POSITIONS, cosformer_max_positions=None)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def make(kind, variant, placement, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    module = build_case(kind, variant, placement, model_cfg(**variant_overrides(kind, variant)))
    return module.to(dtype).eval()


def inputs(placement, bsz=BSZ, tgt_len=TGT_LEN, src_len=SRC_LEN, dtype=torch.float64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(tgt_len, bsz, EMBED, generator=gen, dtype=dtype)
    if placement == ENCODER_DECODER:
        memory = torch.randn(src_len, bsz, EMBED, generator=gen, dtype=dtype)
        return query, memory
    return query, query


def call(module, query, memory, key_padding_mask=None, **kwargs):
    kwargs.setdefault("need_weights", False)
    out, weights = module(query, memory, memory, key_padding_mask=key_padding_mask, static_kv=module.placement == ENCODER_DECODER, **kwargs)
    return out, weights


def padding_for(placement, length, bsz=BSZ):
    """Left padding on row 1 (fairseq sources) and right padding on row 2 (fairseq targets)."""
    pad = torch.zeros(bsz, length, dtype=torch.bool)
    if placement != DECODER_SELF:
        pad[1, :2] = True  # left-padded keys
    pad[2, length - 3:] = True  # right-padded keys
    return pad


def real_queries(placement, pad, tgt_len):
    """Query positions whose output is meaningful (T x B x 1)."""
    if placement == ENCODER_DECODER:
        return torch.ones(tgt_len, pad.size(0), 1, dtype=torch.bool)
    return (~pad).T.unsqueeze(-1)


@pytest.mark.parametrize("kind,variant,placement", CASES)
def test_equals_naive_reference(kind, variant, placement):
    module = make(kind, variant, placement)
    query, memory = inputs(placement)
    pad = padding_for(placement, memory.size(0))
    out, _ = call(module, query, memory, pad)
    reference = ATTENTION_REGISTRY[kind].naive_reference(module, query, memory, memory, pad)
    mask = real_queries(placement, pad, query.size(0))
    assert torch.allclose(out * mask, reference * mask, atol=TOL, rtol=0), (out - reference).mul(mask).abs().max()
    if placement == DECODER_SELF:
        # and left padding (decoder inputs of left-padded batches); the outputs of
        # padded queries are free (fairseq's own softmax gives NaN there)
        pad = padding_for(placement, memory.size(0))
        pad[1, :2] = True
        out, _ = call(module, query, memory, pad)
        reference = ATTENTION_REGISTRY[kind].naive_reference(module, query, memory, memory, pad)
        mask = real_queries(placement, pad, query.size(0)).expand_as(out)
        assert torch.allclose(out[mask], reference[mask], atol=TOL, rtol=0), (out[mask] - reference[mask]).abs().max()
    # and without any padding mask
    out, _ = call(module, query, memory)
    reference = ATTENTION_REGISTRY[kind].naive_reference(module, query, memory, memory, None)
    assert torch.allclose(out, reference, atol=TOL, rtol=0)


@pytest.mark.parametrize("kind,variant,placement", DECODER_SELF_CASES)
def test_causality(kind, variant, placement):
    module = make(kind, variant, placement)
    query, _ = inputs(placement, tgt_len=MAX_POSITIONS)
    out, _ = call(module, query, query)
    for t in range(query.size(0) - 1):
        changed = query.clone()
        changed[t + 1:] = torch.randn_like(changed[t + 1:]) * 3
        out_changed, _ = call(module, changed, changed)
        assert torch.allclose(out[: t + 1], out_changed[: t + 1], atol=TOL, rtol=0), f"position <= {t} saw the future"
        assert not torch.allclose(out[t + 1:], out_changed[t + 1:]), "changing the future changed nothing at all"


def step_by_step(module, query, memory, pad=None, reorder=None):
    """Decode token by token; ``reorder=(step, new_order)`` reorders the state as beam search does."""
    state = {}
    outputs = []
    for t in range(query.size(0)):
        if reorder is not None and t == reorder[0]:
            module.reorder_incremental_state(state, reorder[1])
            query = query.index_select(1, reorder[1])
            memory = memory.index_select(1, reorder[1])
            if pad is not None:
                pad = pad.index_select(0, reorder[1])
            outputs = [o.index_select(1, reorder[1]) for o in outputs]
        if module.placement == DECODER_SELF:
            # fairseq passes the padding of the tokens fed so far (current step last).
            step_pad = pad[:, : t + 1] if pad is not None else None
            out, _ = call(module, query[t: t + 1], query[t: t + 1], step_pad, incremental_state=state)
        else:
            out, _ = call(module, query[t: t + 1], memory, pad, incremental_state=state)
        outputs.append(out)
    return torch.cat(outputs, dim=0)


@pytest.mark.parametrize("kind,variant,placement", DECODING_CASES)
def test_incremental_parity(kind, variant, placement):
    module = make(kind, variant, placement)
    query, memory = inputs(placement, tgt_len=10)
    pad = padding_for(placement, memory.size(0)) if placement == ENCODER_DECODER else None
    full, _ = call(module, query, memory, pad)
    incremental = step_by_step(module, query, memory, pad)
    assert torch.allclose(full, incremental, atol=TOL, rtol=0), (full - incremental).abs().max()


@pytest.mark.parametrize("kind,variant,placement", DECODING_CASES)
def test_incremental_parity_after_a_prefix_in_one_call(kind, variant, placement):
    """A prefix fed in incremental calls of several tokens (the full-pass algorithms fill the state; the
    second call's tokens come after cached ones), then token by token: the state each kind's full pass
    leaves is one its steps continue from, and several new tokens see neither their future nor less."""
    module = make(kind, variant, placement)
    query, memory = inputs(placement, tgt_len=MAX_POSITIONS)
    full, _ = call(module, query, memory)
    state, outputs = {}, []
    for start, end in [(0, 3), (3, MAX_POSITIONS - 4)] + [(t, t + 1) for t in range(MAX_POSITIONS - 4, MAX_POSITIONS)]:
        part = query[start:end]
        outputs.append(call(module, part, part if placement == DECODER_SELF else memory, incremental_state=state)[0])
    incremental = torch.cat(outputs, dim=0)
    assert torch.allclose(full, incremental, atol=TOL, rtol=0), (full - incremental).abs().max()


@pytest.mark.parametrize("kind,variant,placement", DECODER_SELF_CASES)
def test_incremental_parity_after_beam_reorder_self(kind, variant, placement):
    module = make(kind, variant, placement)
    query, memory = inputs(placement, tgt_len=10, bsz=4)
    new_order = torch.tensor([2, 0, 0, 3])  # a beam step keeps hypothesis 0 twice and drops 1
    incremental = step_by_step(module, query, memory, reorder=(4, new_order))
    # Expected: each row continues the history of the hypothesis it came from.
    expected_query = torch.cat([query[:4].index_select(1, new_order), query[4:].index_select(1, new_order)], dim=0)
    expected, _ = call(module, expected_query, expected_query)
    assert torch.allclose(expected, incremental, atol=TOL, rtol=0), (expected - incremental).abs().max()


@pytest.mark.parametrize("kind,variant,placement", CROSS_CASES)
@pytest.mark.parametrize("new_order", [[1, 1, 3, 2], [2, 3]], ids=["within-sentences", "sentence-finished"])
def test_incremental_parity_after_beam_reorder_cross(kind, variant, placement, new_order):
    """Beam search over 2 sentences x 2 beams: the encoder output is repeated per
    beam, reorders move hypotheses within a sentence or drop finished sentences."""
    module = make(kind, variant, placement)
    beams = 2
    query, memory = inputs(placement, tgt_len=10, bsz=2)
    pad = torch.zeros(2, memory.size(0), dtype=torch.bool)
    pad[0, :2] = True  # sentence 0 is left-padded
    memory, pad = memory.repeat_interleave(beams, dim=1), pad.repeat_interleave(beams, dim=0)
    query = torch.randn(10, 2 * beams, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    new_order = torch.tensor(new_order)
    incremental = step_by_step(module, query, memory, pad, reorder=(4, new_order))
    expected_query = torch.cat([query[:4].index_select(1, new_order), query[4:].index_select(1, new_order)], dim=0)
    expected, _ = call(module, expected_query, memory.index_select(1, new_order), pad.index_select(0, new_order))
    assert torch.allclose(expected, incremental, atol=TOL, rtol=0), (expected - incremental).abs().max()


@pytest.mark.parametrize("kind,variant,placement", CASES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_invariance(kind, variant, placement, side):
    """One sequence alone == the same sequence batched with longer ones, padded."""
    module = make(kind, variant, placement)
    length, longer = 5, 9
    query_long, memory_long = inputs(placement, bsz=3, tgt_len=longer if placement != ENCODER_DECODER else 6, src_len=longer)
    gen = torch.Generator().manual_seed(5)
    seq = torch.randn(length, 1, EMBED, generator=gen, dtype=torch.float64)
    if placement == ENCODER_DECODER:
        alone_query = query_long[:, :1]
        alone, _ = call(module, alone_query, seq)
        memory = memory_long.clone()
        pad = torch.zeros(3, longer, dtype=torch.bool)
        where = slice(longer - length, longer) if side == "left" else slice(0, length)
        memory[:, 0] = 0.0
        memory[where, 0] = seq[:, 0]
        pad[0] = True
        pad[0, where] = False
        batched, _ = call(module, query_long, memory, pad)
        assert torch.allclose(alone[:, 0], batched[:, 0], atol=TOL, rtol=0)
        return
    alone, _ = call(module, seq, seq)
    query = query_long.clone()
    pad = torch.zeros(3, longer, dtype=torch.bool)
    where = slice(longer - length, longer) if side == "left" else slice(0, length)
    query[:, 0] = 7.0  # garbage in padded positions must not leak
    query[where, 0] = seq[:, 0]
    pad[0] = True
    pad[0, where] = False
    batched, _ = call(module, query, query, pad)
    assert torch.allclose(alone[:, 0], batched[where, 0], atol=TOL, rtol=0), (alone[:, 0] - batched[where, 0]).abs().max()


@pytest.mark.parametrize("kind,variant,placement", CASES)
def test_every_parameter_receives_gradient(kind, variant, placement):
    module = make(kind, variant, placement, dtype=torch.float32).train()
    query, memory = inputs(placement, dtype=torch.float32, tgt_len=MAX_POSITIONS, src_len=MAX_POSITIONS)
    query.requires_grad_(True)
    pad = padding_for(placement, memory.size(0))
    out, _ = call(module, query, memory, pad)
    (out * torch.randn_like(out)).sum().backward()
    for name, param in module.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, f"{name} got a zero or non-finite gradient"


# Kinds whose full pass with default options runs torch's scaled_dot_product_attention (softmax: fairseq's fast path):
# the check below must see their calls, so that it cannot pass by seeing none.
FUSED_ATTENTION_KINDS = ("softmax", "bet")


@pytest.mark.parametrize("kind,variant,placement", CASES)
def test_fused_attention_never_runs_cudnn(kind, variant, placement, monkeypatch):
    """Every scaled_dot_product_attention call of a full pass (training, with padding) runs with
    PyTorch's cuDNN backend off (``without_cudnn_attention``: its gradients were wrong on an H100,
    docs/records/gpu.md). The guard acts on CUDA only; here it is made to act on the CPU to see it."""
    from fairseq_plugins.modules import shared

    monkeypatch.setattr(shared, "CUDNN_DEVICE_TYPES", ("cpu",))
    cudnn_on_at_call = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        cudnn_on_at_call.append(torch.backends.cuda.cudnn_sdp_enabled())
        return fused(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    module = make(kind, variant, placement, dtype=torch.float32).train()
    query, memory = inputs(placement, dtype=torch.float32)
    for pad in (None, padding_for(placement, memory.size(0))):
        call(module, query, memory, pad)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored after the pass
    assert not any(cudnn_on_at_call), f"{sum(cudnn_on_at_call)} of {len(cudnn_on_at_call)} fused calls ran with cuDNN on"
    if kind in FUSED_ATTENTION_KINDS and variant is None and placement != ENCODER_DECODER:
        assert cudnn_on_at_call, "no fused attention call seen: the check saw nothing"


@pytest.mark.parametrize("kind,variant,placement", CASES)
def test_attention_weights_are_distributions(kind, variant, placement):
    module = make(kind, variant, placement)
    query, memory = inputs(placement)
    pad = padding_for(placement, memory.size(0))
    out, weights = call(module, query, memory, pad, need_weights=True)
    out_plain, _ = call(module, query, memory, pad, need_weights=False)
    # at real query positions (outputs at pad positions are never read, and a kind's
    # fused path may compute them differently)
    real = real_queries(placement, pad, query.size(0))
    assert torch.allclose(out * real, out_plain * real, atol=1e-12, rtol=0), "asking for weights changed the output"
    if not module.returns_attention_weights:
        assert weights is None, "a kind without attention weights must return None"
        return
    assert weights is not None and weights.shape == (BSZ, query.size(0), memory.size(0))
    _, head_weights = call(module, query, memory, pad, need_head_weights=True)
    head_weights = head_weights.to(weights.dtype)  # fairseq's explicit path returns float32 weights
    assert head_weights.shape == (HEADS, BSZ, query.size(0), memory.size(0))
    assert torch.allclose(head_weights.mean(0), weights, atol=1e-6)
    rows = real_queries(placement, pad, query.size(0)).squeeze(-1).T  # B x T
    assert (head_weights >= -1e-12).all()
    # Each head's row is a distribution over keys; a kind whose normaliser can
    # vanish (ReLU features of cosFormer) may give an all-zero row instead.
    row_sums = head_weights.sum(-1)[:, rows]
    ones = torch.isclose(row_sums, torch.ones_like(row_sums), atol=1e-8)
    zeros = row_sums.abs() < 1e-12
    assert (ones | zeros).all() and ones.float().mean() > 0.5, row_sums
    assert weights.masked_select(pad.unsqueeze(1).expand_as(weights)).abs().max() < 1e-12, "weight on padding"
    if placement == DECODER_SELF:
        future = torch.ones(query.size(0), memory.size(0), dtype=torch.bool).triu(1)
        assert weights[:, future].abs().max() < 1e-12, "weight on future tokens"



# -- mixed precision ---------------------------------------------------------
# fairseq's --amp (and --fp16/--bf16 through autocast) trains under torch.autocast:
# every kind must run forward and backward there, in every placement, at a
# length past every chunk (cosFormer: 64 tokens) and window (AMP_LAGS) so that
# the chunked, windowed and carried-state paths all run.
AMP_LEN, AMP_SRC_LEN, AMP_POSITIONS, AMP_LAGS = 200, 150, 256, 48
# Decoding runs token by token (a call per token): past the window, not to AMP_LEN.
AMP_DECODE_LEN = 64
AMP_DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# Largest difference from the float32 pass, relative to the float32 tensor's
# largest entry: 8 unit roundoffs of the autocast dtype (2^-8 for bfloat16's 8
# significant bits, 2^-11 for float16's 11). Every low-precision op rounds its
# result once; through the projections, the attention and (for gradients) the
# backward the largest errors seen are 2.5 unit roundoffs, while cosFormer's
# sums over the T = 200 keys in bfloat16 (before they were made float32) missed
# by 40 to 70, and in float16 gave NaN gradients.
AMP_TOL = {torch.bfloat16: 8 * 2.0**-8, torch.float16: 8 * 2.0**-11}


def make_for_amp(kind, variant, placement, dtype):
    """A float32 module in train mode whose parameters are representable in
    ``dtype``: autocast's casts of them are then exact, so that the float32 pass
    is a reference for what the kind does under autocast (otherwise rounding a
    ReLU feature of cosFormer from 0 to a tiny positive value legitimately moves
    that head's output from 0 to an average of values)."""
    overrides = variant_overrides(kind, variant)
    overrides.setdefault("max_target_positions", AMP_POSITIONS)
    overrides.setdefault("max_source_positions", AMP_POSITIONS)
    overrides.setdefault("extractor_lags", AMP_LAGS)
    torch.manual_seed(0)
    module = build_case(kind, variant, placement, model_cfg(**overrides)).train()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(param.to(dtype))
    return module


def inputs_for_amp(placement, dtype, tgt_len=AMP_LEN):
    """Float32 inputs representable in ``dtype`` (see ``make_for_amp``)."""
    query, memory = inputs(placement, tgt_len=tgt_len, src_len=AMP_SRC_LEN, dtype=torch.float32)
    query = query.to(dtype).float()
    return query, query if placement != ENCODER_DECODER else memory.to(dtype).float()


def amp_pass(module, query, memory, pad, dtype):
    """Forward and backward under CPU autocast to ``dtype`` (None: plain float32).
    Returns the output at real queries, the gradients of the inputs, and those of
    all parameters flattened into one vector, all in float32."""
    module.zero_grad(set_to_none=True)
    cross = module.placement == ENCODER_DECODER
    query = query.detach().requires_grad_(True)
    memory = memory.detach().requires_grad_(True) if cross else query
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out, _ = call(module, query, memory, pad)
    out = out.float() * real_queries(module.placement, pad, query.size(0))
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(4))).sum().backward()
    grads = {"query": query.grad.float()}
    if cross:
        grads["memory"] = memory.grad.float()
    for name, param in module.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), f"{name}: no or a non-finite gradient"
    # One vector: a parameter's gradient may be zero in exact arithmetic (softmax
    # ignores a shift shared by all keys: the key bias gets none), which leaves
    # only rounding noise to compare per tensor.
    grads["parameters"] = torch.cat([param.grad.float().flatten() for param in module.parameters()])
    return out.detach(), grads


def relative_error(low, reference):
    return ((low - reference).abs().max() / reference.abs().max().clamp_min(1e-12)).item()


@pytest.mark.parametrize("dtype", AMP_DTYPES)
@pytest.mark.parametrize("kind,variant,placement", CASES)
def test_forward_and_backward_under_autocast(kind, variant, placement, dtype):
    module = make_for_amp(kind, variant, placement, dtype)
    query, memory = inputs_for_amp(placement, dtype)
    pad = padding_for(placement, memory.size(0))
    reference, reference_grads = amp_pass(module, query, memory, pad, None)
    out, grads = amp_pass(module, query, memory, pad, dtype)
    assert torch.isfinite(out).all(), "non-finite output under autocast"
    assert relative_error(out, reference) < AMP_TOL[dtype], f"output: {relative_error(out, reference):.2e}"
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), f"{name}: non-finite gradient under autocast"
        error = relative_error(grad, reference_grads[name])
        assert error < AMP_TOL[dtype], f"gradient of {name}: {error:.2e}"


@pytest.mark.parametrize("dtype", AMP_DTYPES)
@pytest.mark.parametrize("kind,variant,placement", DECODING_CASES)
def test_decoding_under_autocast(kind, variant, placement, dtype):
    """Step-by-step decoding under autocast (the carried state of linear
    attention, the caches of the others), past every window: close to the
    float32 full pass."""
    module = make_for_amp(kind, variant, placement, dtype).eval()
    query, memory = inputs_for_amp(placement, dtype, tgt_len=AMP_DECODE_LEN)
    pad = padding_for(placement, memory.size(0)) if placement == ENCODER_DECODER else None
    with torch.no_grad():
        reference, _ = call(module, query, memory, pad)
        with torch.autocast("cpu", dtype=dtype):
            steps = step_by_step(module, query, memory, pad).float()
    assert torch.isfinite(steps).all(), "non-finite decoding output under autocast"
    assert relative_error(steps, reference) < AMP_TOL[dtype], f"{relative_error(steps, reference):.2e}"
