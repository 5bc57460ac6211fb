"""fairseq_plugins/modules/shared.py: the choice of fused-attention backends (the masks and padding
helpers are covered through the kinds in test_conformance.py)."""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from fairseq_plugins.modules.shared import backends_without_cudnn, without_cudnn_attention

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
