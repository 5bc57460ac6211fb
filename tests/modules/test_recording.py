"""The attention recorder: records the per-head distributions of a decoder's
self-attention in an ordinary forward pass without changing its outputs."""
import argparse

import pytest
import torch

import fairseq_plugins  # noqa: F401
from fairseq_plugins.modules import DECODER_SELF, build_attention
from fairseq_plugins.modules.recording import AttentionRecorder, AttentionRecordingError

EMBED, HEADS = 16, 4


def module(kind):
    torch.manual_seed(0)
    cfg = argparse.Namespace(max_target_positions=16, max_source_positions=16, cosformer_max_positions=None)
    return build_attention(kind, DECODER_SELF, EMBED, HEADS, cfg).double().eval()


@pytest.mark.parametrize("kind", ["softmax", "cosformer"])
def test_records_head_weights_and_keeps_what_the_caller_asked_for(kind):
    attn = module(kind)
    x = torch.randn(5, 2, EMBED, dtype=torch.float64)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[1, 3:] = True
    plain, none = attn(query=x, key=x, value=x, key_padding_mask=pad, need_weights=False)
    _, expected = attn(query=x, key=x, value=x, key_padding_mask=pad, need_weights=True, need_head_weights=True)
    with AttentionRecorder([attn]) as recorder:
        out, weights = attn(query=x, key=x, value=x, key_padding_mask=pad, need_weights=False)
    assert none is None and weights is None
    assert torch.allclose(out, plain, atol=1e-10)
    probs = recorder.probs[0]
    assert probs.shape == (2, HEADS, 5, 5)
    assert torch.allclose(probs, expected.transpose(0, 1), atol=1e-10)
    # Causal distributions over real keys.
    assert torch.allclose(probs.triu(1), torch.zeros_like(probs))
    if kind == "softmax":  # cosFormer's ReLU kernel can give a row no weight at all
        assert torch.allclose(probs[0].sum(-1), torch.ones_like(probs[0, ..., 0]))
    assert probs[1, :, :3, 3:].abs().max() == 0
    # Hooks are gone after the context.
    assert not attn._forward_hooks and not attn._forward_pre_hooks


def test_head_averaged_weights_when_the_caller_asks_for_them():
    attn = module("softmax")
    x = torch.randn(4, 1, EMBED, dtype=torch.float64)
    with AttentionRecorder([attn]) as recorder:
        _, averaged = attn(query=x, key=x, value=x, need_weights=True)
    assert torch.allclose(averaged, recorder.probs[0].mean(dim=1), atol=1e-12)


def test_incremental_calls_are_not_recorded():
    attn = module("softmax")
    x = torch.randn(1, 1, EMBED, dtype=torch.float64)
    with AttentionRecorder([attn]) as recorder:
        attn(query=x, key=x, value=x, incremental_state={}, need_weights=False)
    assert recorder.probs == [None]


def test_kinds_without_a_distribution_are_refused():
    with pytest.raises(AttentionRecordingError, match="without an attention distribution"):
        AttentionRecorder([module("extractor_we")])


def test_fairseq_multihead_attention_gives_per_head_weights():
    """fairseq's own MultiheadAttention (fairseq's transformer models): its full-pass
    fast path would average the heads; the recorder selects the explicit path."""
    from fairseq.modules import MultiheadAttention

    torch.manual_seed(0)
    attn = MultiheadAttention(EMBED, HEADS, self_attention=True).eval()
    x = torch.randn(5, 3, EMBED)
    mask = torch.triu(torch.full((5, 5), float("-inf")), 1)
    with AttentionRecorder([attn]) as recorder:
        out, weights = attn(query=x, key=x, value=x, attn_mask=mask, need_weights=False)
    assert weights is None
    probs = recorder.probs[0]
    assert probs.shape == (3, HEADS, 5, 5)
    assert torch.allclose(out, attn(query=x, key=x, value=x, attn_mask=mask, need_weights=False)[0], atol=1e-6)
    assert torch.allclose(probs.sum(-1), torch.ones(3, HEADS, 5), atol=1e-6)
    assert probs.triu(1).abs().max() == 0
    # heads differ: not an average copied into every head
    assert (probs[:, 0] - probs[:, 1]).abs().max() > 1e-3
