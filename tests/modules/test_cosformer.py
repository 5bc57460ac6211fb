"""cosFormer beyond the conformance suite: chunking, long sequences, the
constant decoding state, the horizon and bad input."""
import math

import pytest
import torch

from fairseq_plugins.modules.cosformer import CosformerAttention, naive_cosformer
from fairseq_plugins.modules.registry import DECODER_SELF, ENCODER_DECODER, ENCODER_SELF


def causal(horizon=64, embed=16, heads=2, chunk_size=None, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    module = CosformerAttention(DECODER_SELF, embed, heads, horizon=horizon)
    if chunk_size is not None:
        module.chunk_size = chunk_size
    return module.to(dtype).eval()


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 7, 64])
def test_every_chunk_size_gives_the_naive_result(chunk_size):
    module = causal(chunk_size=chunk_size)
    x = torch.randn(13, 2, 16, dtype=torch.float64)
    pad = torch.zeros(2, 13, dtype=torch.bool)
    pad[1, 9:] = True
    out, _ = module(x, x, x, key_padding_mask=pad, need_weights=False)
    reference = naive_cosformer(module, x, x, x, pad)
    real = (~pad).T.unsqueeze(-1)
    assert torch.allclose(out * real, reference * real, atol=1e-6, rtol=0)


def test_left_padded_causal_sequence_counts_positions_from_first_real_token():
    module = causal(chunk_size=4)
    seq = torch.randn(6, 1, 16, dtype=torch.float64)
    alone, _ = module(seq, seq, seq, need_weights=False)
    padded = torch.cat([torch.full((3, 1, 16), 5.0, dtype=torch.float64), seq])
    pad = torch.tensor([[True] * 3 + [False] * 6])
    out, _ = module(padded, padded, padded, key_padding_mask=pad, need_weights=False)
    assert torch.allclose(out[3:], alone, atol=1e-10)


@pytest.mark.parametrize("placement", [ENCODER_SELF, DECODER_SELF])
def test_no_nan_or_inf_at_16k_tokens(placement):
    torch.manual_seed(0)
    length = 16384
    module = CosformerAttention(placement, 32, 2, horizon=length if placement == DECODER_SELF else None)
    x = torch.randn(length, 1, 32, requires_grad=True)
    out, _ = module(x, x, x, need_weights=False)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def test_decoding_state_has_constant_size():
    module = causal(horizon=4096)
    state = {}
    sizes = []
    x = torch.randn(1, 2, 16, dtype=torch.float64)
    for step in range(300):
        module(x, x, x, incremental_state=state, need_weights=False)
        buffer = module._get_input_buffer(state)
        sizes.append(sum(t.numel() for t in buffer.values()))
    assert len(set(sizes)) == 1, "the decoding state grew with the prefix"
    assert int(module._get_input_buffer(state)["position"][0]) == 300


def test_causal_sequence_longer_than_horizon_fails_clearly():
    module = causal(horizon=8)
    x = torch.randn(9, 1, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="--cosformer-max-positions"):
        module(x, x, x, need_weights=False)
    # exactly at the horizon is fine, and decoding past it fails too
    module(x[:8], x[:8], x[:8], need_weights=False)
    state = {}
    for t in range(8):
        module(x[t: t + 1], x[t: t + 1], x[t: t + 1], incremental_state=state, need_weights=False)
    with pytest.raises(ValueError, match="horizon"):
        module(x[8:9], x[8:9], x[8:9], incremental_state=state, need_weights=False)


def test_cross_attention_source_longer_than_horizon_fails_clearly():
    module = CosformerAttention(ENCODER_DECODER, 16, 2, horizon=8).double()
    query, memory = torch.randn(3, 1, 16, dtype=torch.float64), torch.randn(9, 1, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="--cosformer-max-positions"):
        module(query, memory, memory, static_kv=True, need_weights=False)
    # left padding does not count against the horizon
    pad = torch.tensor([[True] + [False] * 8])
    out, _ = module(query, memory, memory, key_padding_mask=pad, static_kv=True, need_weights=False)
    assert torch.isfinite(out).all()


def test_padding_between_real_tokens_is_refused_in_causal_attention():
    module = causal()
    x = torch.randn(5, 1, 16, dtype=torch.float64)
    pad = torch.tensor([[False, True, False, False, False]])
    with pytest.raises(ValueError, match="padding only at the start or the end"):
        module(x, x, x, key_padding_mask=pad, need_weights=False)


def test_arbitrary_attn_mask_is_refused():
    module = causal()
    x = torch.randn(4, 1, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="attn_mask"):
        module(x, x, x, attn_mask=torch.zeros(4, 4), need_weights=False)


def test_reweighting_matches_the_paper_formula_for_one_pair():
    """Two tokens, one head of width 1: the output of token 2 is the
    cos-re-weighted average of v1 and v2 (eq. 9 by hand)."""
    module = CosformerAttention(DECODER_SELF, 1, 1, horizon=10).double()
    with torch.no_grad():
        for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
            proj.weight.fill_(1.0)
            proj.bias.zero_()
        module.k_proj.weight.fill_(2.0)
    x = torch.tensor([[[1.0]], [[3.0]]], dtype=torch.float64)  # q = x, k = 2x, v = x
    out, _ = module(x, x, x, need_weights=False)
    w1 = 3.0 * 2.0 * math.cos(math.pi / 2 * 1 / 10)  # q_2 k_1 cos(pi/2 (2-1)/M)
    w2 = 3.0 * 6.0 * 1.0
    assert out[1, 0, 0].item() == pytest.approx((w1 * 1.0 + w2 * 3.0) / (w1 + w2), abs=1e-12)
    assert out[0, 0, 0].item() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("chunk_size", [1, 3, 5, 64])
@pytest.mark.parametrize("placement", [DECODER_SELF, ENCODER_SELF, ENCODER_DECODER])
def test_gradients_equal_autograd_through_the_naive_reference(placement, chunk_size):
    """The causal path has a hand-written backward: its gradients (inputs and
    every parameter) must equal autograd through eq. 9 term by term."""
    torch.manual_seed(0)
    module = CosformerAttention(placement, 8, 2, horizon=None if placement == ENCODER_SELF else 32).double()
    module.chunk_size = chunk_size
    length, src_len = 11, 9
    x = torch.randn(length, 2, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(src_len, 2, 8, dtype=torch.float64, requires_grad=True) if placement == ENCODER_DECODER else x
    pad = torch.zeros(2, memory.size(0), dtype=torch.bool)
    pad[1, -3:] = True
    if placement != DECODER_SELF:
        pad[0, :2] = True
    upstream = torch.randn(length, 2, 8, dtype=torch.float64)
    if placement != ENCODER_DECODER:
        upstream = upstream * (~pad).T.unsqueeze(-1)  # padded queries carry no gradient

    def grads(forward):
        module.zero_grad()
        inputs = [x] if memory is x else [x, memory]
        for t in inputs:
            t.grad = None
        (forward() * upstream).sum().backward()
        return [t.grad.clone() for t in inputs] + [p.grad.clone() for p in module.parameters()]

    fast = grads(lambda: module(x, memory, memory, key_padding_mask=pad, static_kv=placement == ENCODER_DECODER, need_weights=False)[0])
    naive = grads(lambda: naive_cosformer(module, x, memory, memory, pad))
    for a, b in zip(fast, naive):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()


def test_gradients_through_a_carried_state():
    """Decoding a chunk on top of a state (prefix) back-propagates into the state."""
    from fairseq_plugins.modules.cosformer.chunked import cosformer_causal

    torch.manual_seed(0)
    q, k = torch.rand(1, 2, 7, 4, dtype=torch.float64), torch.rand(1, 2, 7, 4, dtype=torch.float64)
    v1 = torch.cat([torch.randn(1, 2, 7, 4, dtype=torch.float64), torch.ones(1, 2, 7, 1, dtype=torch.float64)], -1)
    angle = (torch.arange(7, dtype=torch.float64) * math.pi / 2 / 20).view(1, 1, 7, 1)
    state = torch.rand(1, 2, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    qs = q.requires_grad_(True)

    def run(chunk):
        out, new_state = cosformer_causal(qs, k, v1, angle, 20, 1e-6, state, chunk)
        return out.sum() + new_state.sum()

    g_chunked = torch.autograd.grad(run(3), [qs, state])
    g_single = torch.autograd.grad(run(7), [qs, state])
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(g_chunked, g_single))
    assert torch.autograd.gradcheck(lambda s: cosformer_causal(qs.detach(), k, v1, angle, 20, 1e-6, s, 3)[0].sum(), (state,))


def _representable(module, x, dtype):
    """Parameters and input rounded to ``dtype`` (kept float32): autocast's casts of them are exact, so
    the float32 pass is a reference for autocast's own rounding (see test_conformance.make_for_amp)."""
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(param.to(dtype))
    return x.to(dtype).float()


def test_decoding_state_stays_float32_under_float16_autocast():
    """Under autocast (fairseq's --amp) the carried decoding state sums over the whole prefix in float32:
    here its sums pass float16's largest value, 65504, which a float16 state turns into inf."""
    torch.manual_seed(0)
    length = 300
    module = CosformerAttention(DECODER_SELF, 16, 2, horizon=length).eval()
    x = _representable(module, 100 * torch.randn(length, 2, 16, generator=torch.Generator().manual_seed(1)), torch.float16)
    state, steps = {}, []
    with torch.no_grad():
        reference, _ = module(x, x, x, need_weights=False)
        with torch.autocast("cpu", dtype=torch.float16):
            for t in range(length):
                steps.append(module(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state, need_weights=False)[0])
    carried = module._get_input_buffer(state)["state"]
    assert carried.dtype == torch.float32 and carried.abs().max() > torch.finfo(torch.float16).max
    steps = torch.cat(steps).float()
    assert torch.isfinite(steps).all()
    error = (steps - reference).abs().max() / reference.abs().max()
    assert error < 8 * 2.0**-11, error  # 8 unit roundoffs of float16, as AMP_TOL in test_conformance.py


def test_backward_inside_the_autocast_region():
    """PyTorch advises calling backward outside autocast, but some training loops call it inside: the
    causal form's hand-written backward declares (torch.amp.custom_bwd) that it runs as its forward,
    in float32 with autocast off, and gives the gradients of a backward outside the region. (Ops that
    autograd records are autocast again in such a backward, torch's documented caveat, so only the
    causal placement, whose attention is this Function, gives identical gradients.)"""
    torch.manual_seed(0)
    module = CosformerAttention(DECODER_SELF, 16, 2, horizon=256)
    x = _representable(module, torch.randn(200, 2, 16, generator=torch.Generator().manual_seed(1)), torch.bfloat16)
    grads = []
    for inside in (False, True):
        module.zero_grad(set_to_none=True)
        x_in = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = module(x_in, x_in, x_in, need_weights=False)
            if inside:
                out.float().square().sum().backward()
        if not inside:
            out.float().square().sum().backward()
        grads.append([x_in.grad] + [p.grad for p in module.parameters()])
    for outside, inside in zip(*grads):
        assert torch.isfinite(inside).all()
        assert torch.allclose(inside, outside, atol=1e-6 * outside.abs().max().item(), rtol=0), (inside - outside).abs().max()


def test_works_without_triton():
    """Triton is optional: with it missing (blocked here), the plugin imports, --cosformer-algorithm auto runs
    the torch forms (full pass, backward, decoding) and fused is refused with a one-line error."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import argparse, torch, fairseq_plugins\n"
        "from fairseq_plugins.modules import DECODER_SELF, build_attention\n"
        "from fairseq_plugins.modules.cosformer.algorithms import triton_available\n"
        "from fairseq_plugins.modules.registry import AttentionConfigError\n"
        "assert not triton_available()\n"
        "cfg = argparse.Namespace(max_target_positions=16, cosformer_algorithm='auto')\n"
        "module = build_attention('cosformer', DECODER_SELF, 8, 2, cfg)\n"
        "x = torch.randn(5, 2, 8, requires_grad=True)\n"
        "module(x, x, x, need_weights=False)[0].sum().backward()\n"
        "state = {}\n"
        "with torch.no_grad():\n"
        "    module(x[:1], x[:1], x[:1], incremental_state=state, need_weights=False)\n"
        "try:\n"
        "    build_attention('cosformer', DECODER_SELF, 8, 2, argparse.Namespace(max_target_positions=16, cosformer_algorithm='fused'))\n"
        "except AttentionConfigError as exc:\n"
        "    print(exc)\n"
        "assert 'triton' not in sys.modules or sys.modules['triton'] is None\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--cosformer-algorithm fused needs the optional dependency triton" in result.stdout
