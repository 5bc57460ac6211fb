"""fairseq_plugins/modules/shared.py: the choice of fused-attention backends, and the causal softmax's
maskless decoding step against its masks (the masks and padding helpers are covered through the kinds in
test_conformance.py)."""
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from fairseq_plugins.modules.shared import (backends_without_cudnn, causal_softmax, causal_visibility, masked_softmax,
                                            without_cudnn_attention)

FLASH, EFFICIENT, MATH, CUDNN = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH,
                                 SDPBackend.CUDNN_ATTENTION)


def switches():
    cuda = torch.backends.cuda
    return {FLASH: cuda.flash_sdp_enabled(), EFFICIENT: cuda.mem_efficient_sdp_enabled(), MATH: cuda.math_sdp_enabled(),
            CUDNN: cuda.cudnn_sdp_enabled()}


def test_backends_without_cudnn_keeps_what_is_enabled_but_cudnn():
    with sdpa_kernel([FLASH, EFFICIENT, MATH, CUDNN]):
        assert backends_without_cudnn() == [FLASH, EFFICIENT, MATH]
    with sdpa_kernel([MATH, CUDNN]):  # an enclosing choice (e.g. the math backend to count FLOPs) stays
        assert backends_without_cudnn() == [MATH]
    with sdpa_kernel([FLASH, MATH]):  # cuDNN off already: nothing to change
        assert backends_without_cudnn() is None
    with sdpa_kernel([CUDNN]):  # cuDNN alone: someone chose it
        assert backends_without_cudnn() is None


def test_without_cudnn_attention_turns_cudnn_off_on_cuda_only_and_restores_it():
    with sdpa_kernel([FLASH, MATH, CUDNN]):
        before = switches()
        with without_cudnn_attention(torch.device("cuda")):  # a device object needs no GPU
            assert switches() == {**before, CUDNN: False}
        assert switches() == before
        with without_cudnn_attention(torch.device("cpu")):
            assert switches() == before
        try:
            with without_cudnn_attention(torch.device("cuda")):
                raise KeyError("inside")
        except KeyError:
            pass
        assert switches() == before  # restored after an exception too


@pytest.mark.parametrize("diag_free", [False, True], ids=["causal", "diag-free"])
@pytest.mark.parametrize("keys", [1, 2, 9])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_a_causal_softmax_step_without_masks_equals_the_masked_one(diag_free, keys, dtype):
    """One query without padding (a decoding step) skips the masks: the same weights as the masked softmax
    over causal_visibility's keys, float32 at least, exactly 0 on its own key under the diagonal-free mask
    (from the second token; the first sees itself only)."""
    scores = torch.randn(2, 3, 1, keys, generator=torch.Generator().manual_seed(keys)).to(dtype)
    step = causal_softmax(scores, None, diag_free)
    masked = masked_softmax(scores, causal_visibility(1, keys, None, diag_free, scores.device).unsqueeze(1))
    assert step.dtype == masked.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.allclose(step, masked, atol=1e-12, rtol=0)
    if diag_free:
        assert bool((step[..., -1] == (1.0 if keys == 1 else 0.0)).all())
    # padding or hidden keys: the masks, not the shortcut
    pad = torch.zeros(2, keys, dtype=torch.bool)
    pad[1, 0] = keys > 1
    padded = causal_softmax(scores, pad, diag_free)
    assert torch.allclose(padded, masked_softmax(scores, causal_visibility(1, keys, pad, diag_free, scores.device)
                                                 .unsqueeze(1)), atol=1e-12, rtol=0)
    if keys > 1:
        assert float(padded[1, :, 0, 0].abs().max()) == 0.0  # the padded key
