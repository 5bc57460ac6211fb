"""The extraction of the Extractors (eqs. 23, 26, 28, 29 of Chen 2023) as a causal
convolution over time, as functions: ``direct_conv`` (conv1d), ``fft_conv``
(rfft/irfft), ``extract_last`` (one decoding step), ``extract`` (a full pass,
the path chosen per call); the cost rule ``choose_conv_impl`` (see the
docstring of ``attention.py``).

``lag_shape``: "matrix" (SHE, kernel taps x d x d, applied as x W), "vector"
(WE, HE: taps x d) or "scalar" (ME: taps); kernel[k] is the weight of lag k + 1."""
import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..precision import autocast_dtype
from ..shared import at_least_float32


def fft_length(minimum: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c, fast for pocketfft/cuFFT) >= minimum."""
    n = max(1, minimum)
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def _lag_sizes(lag_shape: str, channels: int) -> Tuple[int, int]:
    """(multiplications of one lag term for one position, kernel columns to transform)."""
    return {"matrix": (channels * channels, channels * channels), "vector": (channels, channels), "scalar": (channels, 1)}[lag_shape]


def direct_conv_mults(lag_shape: str, batch: int, length: int, taps: int, channels: int) -> int:
    """conv1d: every output position of every sequence multiplies ``taps`` lags,
    each costing d^2 (SHE's matrices) or d (vectors, scalars times d-vectors)."""
    return batch * length * taps * _lag_sizes(lag_shape, channels)[0]


def fft_conv_mults(lag_shape: str, batch: int, length: int, taps: int, channels: int) -> int:
    """rfft/irfft convolution: a real transform of n points costs about n log2 n
    real multiplications (a complex FFT of n/2 points, (n/4) log2(n/2)
    butterflies of 4 multiplications, plus the O(n) real-to-complex split);
    2 B d transforms (input, output) and d^2, d or 1 for the kernel; then n/2 + 1
    frequencies of B d^2 (SHE) or B d complex products of 4 real multiplications."""
    pair_mults, kernel_columns = _lag_sizes(lag_shape, channels)
    n = fft_length(length + taps - 1)
    transform = n * math.log2(max(n, 2))
    return int((2 * batch * channels + kernel_columns) * transform + 4 * (n // 2 + 1) * batch * pair_mults)


# Relative cost of one multiplication on each path (see the module docstring).
DENSE_CONV_COST = 1
DEPTHWISE_CONV_COST = 16
FFT_COST = 10


def choose_conv_impl(lag_shape: str, batch: int, length: int, taps: int, channels: int) -> str:
    """The cost rule of ``--extractor-conv-impl auto``: the path with the smaller
    estimated time, multiplications times the path's cost per multiplication
    (direct on ties)."""
    direct_cost = DENSE_CONV_COST if lag_shape == "matrix" else DEPTHWISE_CONV_COST
    direct = direct_conv_mults(lag_shape, batch, length, taps, channels) * direct_cost
    fft = fft_conv_mults(lag_shape, batch, length, taps, channels) * FFT_COST
    return "fft" if fft < direct else "direct"


class _mkldnn_disabled:
    """Context in which torch's convolutions do not use oneDNN (mkldnn)."""

    def __enter__(self):
        self.previous = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)

    def __exit__(self, *exc):
        torch._C._set_mkldnn_enabled(self.previous)
        return False


class _DenseConv1dWithoutOneDNN(torch.autograd.Function):
    """SHE's dense conv1d (no padding, stride 1) with forward *and* backward run
    outside oneDNN. On CPU (torch 2.13) oneDNN picks its reference (naive)
    backward-data kernel for d = 512, 128 taps from about 4,000 positions on
    (minutes per pass, benchmarks/attention_speed.py found it); torch's own
    implementation (im2col + GEMM) is as fast at shorter lengths and stays so.
    The backward backend is chosen when backward runs, hence the Function.

    Under autocast it computes in autocast's dtype, as autocast runs F.conv1d,
    but casts here and saves the cast inputs: the backward's
    convolution_backward, which autocast does not cast, then gets inputs and
    gradient of one dtype. Autograd casts the gradients back to the inputs'
    dtypes."""

    @staticmethod
    def forward(ctx, x, weight):
        dtype = autocast_dtype(x)
        if dtype is not None:
            x, weight = x.to(dtype), weight.to(dtype)
        ctx.save_for_backward(x, weight)
        with _mkldnn_disabled():
            return F.conv1d(x, weight)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = None
        with _mkldnn_disabled():
            if ctx.needs_input_grad[0]:
                grad_x = torch.nn.grad.conv1d_input(x.shape, weight, grad_out)
            if ctx.needs_input_grad[1]:
                grad_w = torch.nn.grad.conv1d_weight(x, weight.shape, grad_out)
        return grad_x, grad_w


def extract(source: Tensor, kernel: Tensor, lag_shape: str, num_outputs: int, impl: str) -> Tensor:
    """Causal convolution of ``source`` (B x L x d, pads zeroed; zeros before
    it) with the lag kernel (``taps`` = min(l, L) lags); returns the last
    ``num_outputs`` positions (B x T x d). impl: "direct" or "fft" (a single
    output always takes ``extract_last``)."""
    length = source.size(1)
    taps = kernel.size(0)
    if num_outputs == 1:
        return extract_last(source[:, length - taps:], kernel, lag_shape).unsqueeze(1)
    if impl == "fft":
        out = fft_conv(source, kernel, lag_shape)
    else:
        out = direct_conv(source, kernel, lag_shape)
    return out[:, length - num_outputs:]


def extract_last(window: Tensor, kernel: Tensor, lag_shape: str) -> Tensor:
    """One output from the last ``taps`` inputs (B x taps x d): a decoding step."""
    bsz, taps, dim = window.shape
    # newest first, so that row k has lag k + 1 like the kernel (flipping the
    # small window, not SHE's taps x d x d kernel)
    lagged = window.flip(1)
    if lag_shape == "matrix":
        return lagged.reshape(bsz, taps * dim) @ kernel.reshape(taps * dim, dim)
    if lag_shape == "vector":
        return (lagged * kernel).sum(dim=1)
    return torch.einsum("btd,t->bd", lagged, kernel)


def direct_conv(source: Tensor, kernel: Tensor, lag_shape: str) -> Tensor:
    """conv1d with taps - 1 zeros of left padding: B x L x d -> B x L x d."""
    dim = source.size(2)
    taps = kernel.size(0)
    x = F.pad(source.transpose(1, 2), (taps - 1, 0))  # B x d x (L + taps - 1)
    # conv1d correlates: output t uses input t + s of the padded sequence
    # with weight[..., s], i.e. lag taps - s: flip the lag axis.
    if lag_shape == "matrix":
        out = _DenseConv1dWithoutOneDNN.apply(x, kernel.flip(0).permute(2, 1, 0))  # weight: d_out x d_in x taps
    else:  # depthwise (d x 1 x taps); ME's one kernel repeated for every channel
        weight = kernel.flip(0).t() if lag_shape == "vector" else kernel.flip(0).expand(dim, taps)
        out = F.conv1d(x, weight.unsqueeze(1), groups=dim)
    return out.transpose(1, 2)


def fft_conv(source: Tensor, kernel: Tensor, lag_shape: str) -> Tensor:
    """rfft/irfft zero-padded to n >= L + taps - 1: B x L x d -> B x L x d
    (computed in float32 at least)."""
    bsz, length, _ = source.shape
    n = fft_length(length + kernel.size(0) - 1)  # no circular wrap into the kept outputs
    dtype = source.dtype
    source, kernel = source.to(at_least_float32(dtype)), kernel.to(at_least_float32(kernel.dtype))
    spectrum = torch.fft.rfft(source, n=n, dim=1)  # B x F x d
    kernel_spectrum = torch.fft.rfft(kernel, n=n, dim=0)  # F x (d x d | d | -)
    if lag_shape == "matrix":
        product = torch.matmul(spectrum.transpose(0, 1), kernel_spectrum).transpose(0, 1)
    elif lag_shape == "vector":
        product = spectrum * kernel_spectrum
    else:
        product = spectrum * kernel_spectrum.unsqueeze(-1)
    return torch.fft.irfft(product, n=n, dim=1)[:, :length].to(dtype)
