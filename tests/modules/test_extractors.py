"""Extractors beyond the conformance suite: windows shorter and longer than the
sequence, both convolution paths, decoding past l tokens, bad sizes."""
import argparse

import pytest
import torch

from fairseq_plugins.modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_SELF, AttentionConfigError, build_attention
from fairseq_plugins.modules.extractors import options as extractors
from fairseq_plugins.modules.extractors.conv import choose_conv_impl, fft_length

KINDS = ["extractor_she", "extractor_he", "extractor_we", "extractor_me"]
EMBED = 8


def cfg(**options):
    options.setdefault("max_target_positions", 64)
    return argparse.Namespace(**options)


def extractor(kind, lags, conv_impl="auto", output_projection=True, seed=0, embed=EMBED):
    """In float64, with every bias non-zero (the paper initialises them to zero,
    which would hide a bias that training and decoding treat differently)."""
    torch.manual_seed(seed)
    module = build_attention(
        kind, DECODER_SELF, embed, 2,
        cfg(extractor_lags=lags, extractor_conv_impl=conv_impl, extractor_no_output_projection=not output_projection),
    )
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("bias"):
                param.uniform_(-1, 1)
    return module.double().eval()


def sequence(length, bsz=3, seed=1, embed=EMBED):
    return torch.randn(length, bsz, embed, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def padding(length, bsz=3):
    """Row 1 left-padded, row 2 right-padded (fairseq's two conventions)."""
    pad = torch.zeros(bsz, length, dtype=torch.bool)
    pad[1, :2] = True
    pad[2, length - 3:] = True
    return pad


def forward(module, x, pad=None, **kwargs):
    out, weights = module(x, x, x, key_padding_mask=pad, need_weights=False, **kwargs)
    assert weights is None
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length,lags", [(5, 9), (9, 9), (14, 4), (6, 1)], ids=["t<l", "t=l", "t>l", "l=1"])
@pytest.mark.parametrize("conv_impl", ["direct", "fft"])
def test_fast_path_equals_naive_reference(kind, length, lags, conv_impl):
    module = extractor(kind, lags, conv_impl)
    x = sequence(length)
    pad = padding(length)
    real = (~pad).T.unsqueeze(-1)
    naive = ATTENTION_REGISTRY[kind].naive_reference
    assert torch.allclose(forward(module, x, pad) * real, naive(module, x, x, x, pad) * real, atol=1e-10, rtol=0)
    assert torch.allclose(forward(module, x), naive(module, x, x, x, None), atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", ["extractor_she", "extractor_he", "extractor_we"])
def test_without_output_projection(kind):
    module = extractor(kind, 4, output_projection=False)
    assert module.out_proj is None and not any(name.startswith("out_proj") for name, _ in module.named_parameters())
    x = sequence(7)
    assert torch.allclose(forward(module, x), ATTENTION_REGISTRY[kind].naive_reference(module, x, x, x, None), atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length,lags", [(40, 16), (33, 33), (50, 3)])
def test_fft_and_direct_paths_agree(kind, length, lags):
    module = extractor(kind, lags)
    x = sequence(length, bsz=2)
    pad = torch.zeros(2, length, dtype=torch.bool)
    pad[1, :5] = True
    outputs = {}
    for impl in ("direct", "fft"):
        module.conv_impl = impl
        outputs[impl] = forward(module, x, pad)
    assert torch.allclose(outputs["direct"], outputs["fft"], atol=1e-10, rtol=0)
    # and in float32 as trained
    module = module.float()
    for impl in ("direct", "fft"):
        module.conv_impl = impl
        outputs[impl] = forward(module, x.float(), pad)
    assert torch.allclose(outputs["direct"], outputs["fft"], atol=1e-4, rtol=1e-4)


def test_fft_gradients_equal_direct_gradients():
    grads = {}
    for impl in ("direct", "fft"):
        module = extractor("extractor_she", 6, impl)
        x = sequence(11).requires_grad_(True)
        (forward(module, x) ** 2).sum().backward()
        grads[impl] = [x.grad] + [p.grad for p in module.parameters()]
    for direct, fft in zip(grads["direct"], grads["fft"]):
        assert torch.allclose(direct, fft, atol=1e-9, rtol=0)


def test_cost_rule():
    # one lag never pays for transforms; long windows do (d = 128, batch 8)
    assert choose_conv_impl("vector", 8, 128, 1, 128) == "direct"
    assert choose_conv_impl("scalar", 8, 1024, 1024, 128) == "fft"
    # SHE's dense convolution runs near GEMM speed: the FFT pays only for long windows
    assert choose_conv_impl("matrix", 8, 128, 16, 128) == "direct"
    assert choose_conv_impl("matrix", 8, 128, 128, 128) == "fft"
    module = extractor("extractor_me", 64)
    assert module.conv_impl_for(8, 64) == "fft" and module.conv_impl_for(8, 2) == "direct"
    module.conv_impl = "direct"
    assert module.conv_impl_for(8, 64) == "direct"
    assert fft_length(97) == 100 and fft_length(128) == 128 and fft_length(1) == 1


def decode(module, x, pad=None, mask_form="step", chunk=1, reorder=None):
    """Feed ``x`` ``chunk`` tokens at a time with incremental state; fairseq passes
    the padding of the new tokens (``step``) or of the whole prefix (``prefix``)."""
    state, outputs = {}, []
    for start in range(0, x.size(0), chunk):
        if reorder is not None and start == reorder[0]:
            module.reorder_incremental_state(state, reorder[1])
            x, outputs = x.index_select(1, reorder[1]), [o.index_select(1, reorder[1]) for o in outputs]
            pad = pad.index_select(0, reorder[1]) if pad is not None else None
        end = min(start + chunk, x.size(0))
        step_pad = None
        if pad is not None:
            step_pad = pad[:, start:end] if mask_form == "step" else pad[:, :end]
        outputs.append(forward(module, x[start:end], step_pad, incremental_state=state))
        window = module._get_input_buffer(state)["window"]
        assert window.shape == (x.size(1), min(end, module.lags), x.size(2))
    return torch.cat(outputs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mask_form", ["step", "prefix"])
def test_decoding_token_by_token_beyond_the_window(kind, mask_form):
    module = extractor(kind, 4)
    x = sequence(15)
    pad = torch.zeros(3, 15, dtype=torch.bool)
    pad[2, 9:] = True  # a finished hypothesis keeps being fed padding
    full = forward(module, x, pad)
    real = (~pad).T.unsqueeze(-1)
    assert torch.allclose(decode(module, x, pad, mask_form) * real, full * real, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_in_chunks_and_after_beam_reorder(kind):
    module = extractor(kind, 5)
    x = sequence(17, bsz=4)
    full = forward(module, x)
    assert torch.allclose(decode(module, x, chunk=3), full, atol=1e-10, rtol=0)
    new_order = torch.tensor([3, 3, 0, 1])
    decoded = decode(module, x, reorder=(9, new_order))
    expected = forward(module, torch.cat([x[:9].index_select(1, new_order), x[9:].index_select(1, new_order)]))
    assert torch.allclose(decoded, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_left_padding_does_not_shift_the_lags(kind):
    module = extractor(kind, 6)
    seq = sequence(8, bsz=1)
    padded = torch.cat([torch.full((5, 1, EMBED), 3.0, dtype=torch.float64), seq])
    pad = torch.tensor([[True] * 5 + [False] * 8])
    assert torch.allclose(forward(module, padded, pad)[5:], forward(module, seq), atol=1e-10, rtol=0)


def test_num_heads_is_accepted_and_ignored():
    torch.manual_seed(0)
    one = build_attention("extractor_we", DECODER_SELF, EMBED, 1, cfg(extractor_lags=4))
    torch.manual_seed(0)
    four = build_attention("extractor_we", DECODER_SELF, EMBED, 4, cfg(extractor_lags=4))
    assert (four.num_heads, four.head_dim) == (4, EMBED // 4)
    x = sequence(6).float()
    assert torch.equal(forward(one, x), forward(four, x))


def test_lags_default_to_max_target_positions():
    assert build_attention("extractor_me", DECODER_SELF, EMBED, 1, cfg(max_target_positions=23)).lags == 23


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(extractor_lags=0), "--extractor-lags must be >= 1"),
        (dict(extractor_lags=65), "--extractor-lags 65 is larger than the 64 target positions"),
        (dict(max_target_positions=None), "set --extractor-lags"),
        (dict(extractor_lags=4, extractor_conv_impl="winograd"), "--extractor-conv-impl"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_bad_options_fail_when_built(kind, options, message):
    with pytest.raises(AttentionConfigError, match=message):
        build_attention(kind, DECODER_SELF, EMBED, 1, cfg(**options))


def test_she_too_large_for_memory_fails_before_allocating(monkeypatch):
    # 100000 lags of 8192 x 8192 float32 matrices: 27 TB
    with pytest.raises(AttentionConfigError, match="--extractor-lags.*extractor_he / extractor_we"):
        build_attention("extractor_she", DECODER_SELF, 8192, 1, cfg(extractor_lags=100_000, max_target_positions=100_000))
    # the limit is half the physical memory
    with pytest.raises(AttentionConfigError, match="more than half"):
        extractors.check_she_size(lags=128, embed_dim=128, memory_bytes=2 * 128 * 128 * 128 * 4 - 1)
    extractors.check_she_size(lags=128, embed_dim=128, memory_bytes=2 * 128 * 128 * 128 * 4)
    # on a machine of 1 GiB: SHE with 4096 lags at d = 256 needs 1 GiB; WE's vectors are small
    monkeypatch.setattr(extractors, "physical_memory_bytes", lambda: 2**30)
    options = cfg(extractor_lags=4096, max_target_positions=4096)
    with pytest.raises(AttentionConfigError, match="--extractor-lags 4096"):
        build_attention("extractor_she", DECODER_SELF, 256, 1, options)
    assert build_attention("extractor_we", DECODER_SELF, 256, 1, options).lags == 4096


def test_only_decoder_self_attention_and_no_arbitrary_mask():
    with pytest.raises(AttentionConfigError, match="cannot be used for encoder_self"):
        build_attention("extractor_she", ENCODER_SELF, EMBED, 1, cfg())
    module = extractor("extractor_we", 4)
    x = sequence(5)
    with pytest.raises(ValueError, match="attn_mask"):
        module(x, x, x, attn_mask=torch.zeros(5, 5, dtype=torch.float64))
    out, weights = module(x, x, x, need_weights=True, need_head_weights=True)
    assert weights is None and out.shape == x.shape


@pytest.mark.parametrize("conv_impl", ["direct", "fft"])
def test_bfloat16_inputs(conv_impl):
    module = extractor("extractor_he", 8, conv_impl)
    x = sequence(12)
    reference = forward(module, x)
    out = forward(module.to(torch.bfloat16), x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.double(), reference, atol=0.1 * reference.abs().max().item(), rtol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("conv_impl", ["direct", "fft"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_both_paths_under_autocast(kind, conv_impl, dtype):
    """Forward and backward under CPU autocast (fairseq's --amp) on each
    convolution path, past the window (the conformance suite runs the path the
    cost rule picks): finite, and within 8 unit roundoffs of the autocast dtype
    of float32 (see AMP_TOL in test_conformance.py), with parameters and inputs
    representable in that dtype so that only autocast's own rounding differs."""
    length, lags = 40, 12
    torch.manual_seed(0)
    module = build_attention(kind, DECODER_SELF, 16, 2, cfg(extractor_lags=lags, extractor_conv_impl=conv_impl)).train()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(param.to(dtype))
    x = sequence(length, embed=16).float().to(dtype).float()
    pad = padding(length)
    real = (~pad).T.unsqueeze(-1)
    weights = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    results = []
    for amp in (False, True):
        module.zero_grad(set_to_none=True)
        x_in = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=dtype, enabled=amp):
            out = forward(module, x_in, pad).float() * real
        (out * weights).sum().backward()
        results.append([out.detach(), x_in.grad] + [p.grad for p in module.parameters()])
    tol = 8 * (2.0**-8 if dtype == torch.bfloat16 else 2.0**-11)
    for reference, low in zip(*results):
        assert torch.isfinite(low).all()
        assert (low - reference).abs().max() < tol * reference.abs().max(), (low - reference).abs().max() / reference.abs().max()
