"""Extractors: drop-in replacements for causal self-attention (Zhe Chen 2023,
"Attention Is Not All You Need Anymore", sections 5 and 7).

X is the sub-layer input (fairseq's decoder layer passes LN(x) when
normalize_before), rows x_1..x_t, and l the number of lags (the context
window, the order of a variable-length Markov chain; ``--extractor-lags``):

* ``extractor_she`` (super high-performance):
      x_ext_i = sum_{j=i-l+1..i, j>=1} x_j W_ext[i-j+1] + b_ext              (eq. 23)
  with one d x d matrix per lag, then the adjustment and output parts
      X_adj = (X W_adj + b_adj) o X_ext                                      (eq. 24)
      Y     = X_adj W_out + b_out    (omitted with --extractor-no-output-projection)  (eq. 25)
* ``extractor_we`` (worthwhile): per-lag weight *vectors*, x_j o w_ext[i-j+1]
  instead of x_j W_ext[i-j+1] (eq. 26), then eqs. 24-25;
* ``extractor_he`` (higher-performance): a shared linear map first,
  X_in = X W_in + b_in (eq. 27), then WE's per-lag vectors applied to X_in
  (eq. 28), then eqs. 24-25;
* ``extractor_me`` (minimalist): only the extraction, with one *scalar* per
  lag, x_ext_i = sum_j w_ext[i-j+1] x_j + b_ext (eq. 29); no adjustment, no
  output projection.

Decisions (the paper leaves them open or we had to fix them):

* Biases: every linear map carries a bias (the paper initialises biases to zero,
  so they exist): b_ext for the extraction of all four kinds, b_in (HE),
  b_adj and b_out (SHE/WE/HE). Training and decoding use the same parameters.
  ME thus has l + d parameters.
* Window (Markov reading): only the last l inputs contribute, so l may be
  smaller than the context and decoding past l tokens never fails.
* Padding: padded positions contribute nothing; they are zeroed right before
  the extraction (for HE after W_in, so b_in does not leak from pads). Lags
  count tensor positions, which for fairseq's left or right padding equal
  positions within each sequence, so real-token outputs do not depend on the
  padding.
* Heads: multi-head does not apply. ``num_heads`` is accepted (the decoder
  layer reads ``num_heads``/``head_dim``) but ignored; ``--attention-dropout``
  has no effect (there is no attention matrix).
* Weights: kinds return ``(output, None)`` even with need_weights=True.

Computation: the extraction is a causal convolution with kernel length l over
the time axis (SHE: d input and d output channels; WE/HE: depthwise; ME: one
kernel shared by all channels). Two exact implementations, chosen per call by
a cost rule (``choose_conv_impl``), or forced with
``--extractor-conv-impl {direct,fft}``:

* direct: ``torch.nn.functional.conv1d`` with k - 1 zeros of left padding;
  B * L * k * P multiplications, with k = min(l, L) taps (lags beyond the
  sequence see only zeros and are skipped) and P = d^2 for SHE, d otherwise;
* fft: ``torch.fft.rfft``/``irfft`` zero-padded to n >= L + k - 1 (no circular
  wrap-around into the kept outputs); about n log2 n multiplications per real
  transform (2 B d transforms for input and output, d^2 / d / 1 for the kernel
  of SHE / WE,HE / ME) plus 4 per complex product (n/2 + 1 frequencies,
  B d^2 or B d products per frequency).

The rule (``auto``): the smaller estimated time, i.e. multiplications times a
cost per multiplication of 1 for a dense conv1d (SHE direct, GEMM speed),
16 for a depthwise conv1d (WE/HE/ME direct) and 10 for the FFT path (complex
products, transforms, copies). The costs are measured forward + backward on a
2-core CPU with torch 2.13 (break-even at SHE direct/FFT multiplication ratios
near 10, WE near 0.6): at d = 128, B = 8, L = 128, SHE takes the FFT from
l = 44 lags, WE and HE from l = 13, ME from l = 12.
On other hardware force the faster path with ``--extractor-conv-impl``.

Incremental decoding keeps, per layer, the last min(t, l) extraction inputs in
a rolling B x min(t, l) x d tensor (batch as dim 0, so the generic beam reorder
applies); a new token costs O(l d^2) for SHE's extraction and O(l d) for the
other kinds' (plus O(d^2) for W_in, W_adj and W_out).
"""
import math
import os
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import autocast_dtype
from .costs import AttentionCosts, Counts, OperationCounts, lag_terms, linear, linear_parameters
from .registry import DECODER_SELF, AttentionConfigError, BaseAttention, register_attention

CONV_IMPLS = ("auto", "direct", "fft")
# Parameters are float32 in training; SHE's l x d x d extraction weights must
# fit in this fraction of the machine's physical memory.
PARAMETER_BYTES = 4
MEMORY_FRACTION = 0.5


# ------------------------------------------------------------ sizes, checks ---
def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resolve_lags(cfg) -> int:
    """``--extractor-lags``, by default ``max_target_positions``; checked against it."""
    lags = getattr(cfg, "extractor_lags", None) if cfg is not None else None
    positions = getattr(cfg, "max_target_positions", None) if cfg is not None else None
    if lags is None:
        if positions is None:
            raise AttentionConfigError(
                "extractors need a number of lags: set --extractor-lags (default: --max-target-positions, "
                "for language models --tokens-per-sample)"
            )
        lags = positions
    lags = int(lags)
    if lags < 1:
        raise AttentionConfigError(f"--extractor-lags must be >= 1, got {lags}")
    if positions is not None and lags > int(positions):
        raise AttentionConfigError(
            f"--extractor-lags {lags} is larger than the {positions} target positions the model is built for: "
            f"lower --extractor-lags or raise --max-target-positions (language models: --tokens-per-sample)"
        )
    return lags


def resolve_conv_impl(cfg) -> str:
    impl = getattr(cfg, "extractor_conv_impl", None) if cfg is not None else None
    impl = "auto" if impl is None else str(impl)
    if impl not in CONV_IMPLS:
        raise AttentionConfigError(f"--extractor-conv-impl must be one of {', '.join(CONV_IMPLS)}, got {impl!r}")
    return impl


def check_she_size(lags: int, embed_dim: int, memory_bytes: Optional[int] = None):
    """SHE has l d x d matrices: refuse sizes that cannot fit in memory."""
    needed = lags * embed_dim * embed_dim * PARAMETER_BYTES
    memory_bytes = physical_memory_bytes() if memory_bytes is None else memory_bytes
    if needed > MEMORY_FRACTION * memory_bytes:
        raise AttentionConfigError(
            f"extractor_she with --extractor-lags {lags} and embedding dimension {embed_dim} needs "
            f"{lags} x {embed_dim} x {embed_dim} extraction weights ({needed / 2**30:.1f} GiB in float32), more than "
            f"half of this machine's {memory_bytes / 2**30:.1f} GiB memory: lower --extractor-lags "
            f"(or the embedding dimension), or use extractor_he / extractor_we"
        )


# -------------------------------------------------------- causal convolution ---
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


# ------------------------------------------------------------------ modules ---
class Extractor(BaseAttention):
    """Shared parts of the four kinds. The extraction weights ``ext_weight`` are
    stored lag-major: ``ext_weight[k - 1]`` is W_ext[k] (SHE: d x d, applied as
    x W), w_ext[k] (WE/HE: d) or the scalar of lag k (ME)."""

    uses_future_mask = False
    returns_attention_weights = False
    # per kind
    lag_shape = "matrix"  # "matrix" (SHE), "vector" (WE, HE) or "scalar" (ME)
    has_input_map = False  # HE's W_in (eq. 27)
    has_adjustment = True  # eqs. 24-25

    def __init__(
        self,
        placement: str,
        embed_dim: int,
        num_heads: int,
        lags: int,
        output_projection: bool = True,
        conv_impl: str = "auto",
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
    ):
        super().__init__(placement, embed_dim, num_heads, kdim or embed_dim, vdim or embed_dim)
        if placement != DECODER_SELF:
            raise AttentionConfigError(f"{self.kind_name} is causal and only supports {DECODER_SELF}, not {placement}")
        if (kdim or embed_dim) != embed_dim or (vdim or embed_dim) != embed_dim:
            raise AttentionConfigError(f"{self.kind_name} is a self-attention replacement: kdim and vdim must equal embed_dim")
        if int(lags) < 1:
            raise AttentionConfigError(f"--extractor-lags must be >= 1, got {lags}")
        if conv_impl not in CONV_IMPLS:
            raise AttentionConfigError(f"--extractor-conv-impl must be one of {', '.join(CONV_IMPLS)}, got {conv_impl!r}")
        self.lags = int(lags)
        self.conv_impl = conv_impl
        if self.lag_shape == "matrix":
            check_she_size(self.lags, embed_dim)  # before allocating anything
            shape = (self.lags, embed_dim, embed_dim)
        elif self.lag_shape == "vector":
            shape = (self.lags, embed_dim)
        else:
            shape = (self.lags,)
        self.ext_weight = nn.Parameter(torch.empty(shape))
        self.ext_bias = nn.Parameter(torch.empty(embed_dim))
        self.in_proj = nn.Linear(embed_dim, embed_dim) if self.has_input_map else None
        self.adj_proj = nn.Linear(embed_dim, embed_dim) if self.has_adjustment else None
        self.output_projection = bool(output_projection) and self.has_adjustment
        self.out_proj = nn.Linear(embed_dim, embed_dim) if self.output_projection else None
        self.reset_parameters()

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, cfg):
        return cls(
            placement,
            embed_dim,
            num_heads,
            lags=resolve_lags(cfg),
            output_projection=not bool(getattr(cfg, "extractor_no_output_projection", False) if cfg is not None else False),
            conv_impl=resolve_conv_impl(cfg),
            kdim=kdim,
            vdim=vdim,
        )

    def reset_parameters(self):
        # Extraction weights as torch initialises a Conv1d with the same fan-in
        # (d * l for SHE's full convolution, l for the depthwise/shared kernels);
        # linear maps as fairseq's attention projections; every bias zero (paper).
        fan_in = self.lags * (self.embed_dim if self.lag_shape == "matrix" else 1)
        bound = 1.0 / math.sqrt(fan_in)
        nn.init.uniform_(self.ext_weight, -bound, bound)
        nn.init.zeros_(self.ext_bias)
        for proj in (self.in_proj, self.adj_proj, self.out_proj):
            if proj is not None:
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)

    def extra_repr(self):
        return (
            super().extra_repr()
            + f", lags={self.lags}, output_projection={self.output_projection}, conv_impl={self.conv_impl}"
        )

    # -- the extraction: a causal convolution over time ---------------------
    def conv_impl_for(self, batch: int, length: int) -> str:
        """``direct`` or ``fft`` for a full pass over ``length`` tokens."""
        if self.conv_impl != "auto":
            return self.conv_impl
        return choose_conv_impl(self.lag_shape, batch, length, min(self.lags, length), self.embed_dim)

    def _extract(self, source: Tensor, num_outputs: int) -> Tensor:
        """Causal convolution of ``source`` (B x L x d, pads zeroed; zeros before
        it) with the lag kernel; returns the last ``num_outputs`` positions (B x T x d)."""
        bsz, length, _ = source.shape
        taps = min(self.lags, length)
        kernel = self.ext_weight[:taps].to(source.dtype)  # kernel[k]: lag k + 1
        if num_outputs == 1:
            return self._extract_last(source[:, length - taps:], kernel).unsqueeze(1)
        if self.conv_impl_for(bsz, length) == "fft":
            out = self._fft_conv(source, kernel)
        else:
            out = self._direct_conv(source, kernel)
        return out[:, length - num_outputs:]

    def _extract_last(self, window: Tensor, kernel: Tensor) -> Tensor:
        """One output from the last ``taps`` inputs (B x taps x d): a decoding step."""
        bsz, taps, dim = window.shape
        # newest first, so that row k has lag k + 1 like the kernel (flipping the
        # small window, not SHE's taps x d x d kernel)
        lagged = window.flip(1)
        if self.lag_shape == "matrix":
            return lagged.reshape(bsz, taps * dim) @ kernel.reshape(taps * dim, dim)
        if self.lag_shape == "vector":
            return (lagged * kernel).sum(dim=1)
        return torch.einsum("btd,t->bd", lagged, kernel)

    def _direct_conv(self, source: Tensor, kernel: Tensor) -> Tensor:
        dim = source.size(2)
        taps = kernel.size(0)
        x = F.pad(source.transpose(1, 2), (taps - 1, 0))  # B x d x (L + taps - 1)
        # conv1d correlates: output t uses input t + s of the padded sequence
        # with weight[..., s], i.e. lag taps - s: flip the lag axis.
        if self.lag_shape == "matrix":
            out = _DenseConv1dWithoutOneDNN.apply(x, kernel.flip(0).permute(2, 1, 0))  # weight: d_out x d_in x taps
        else:  # depthwise (d x 1 x taps); ME's one kernel repeated for every channel
            weight = kernel.flip(0).t() if self.lag_shape == "vector" else kernel.flip(0).expand(dim, taps)
            out = F.conv1d(x, weight.unsqueeze(1), groups=dim)
        return out.transpose(1, 2)

    def _fft_conv(self, source: Tensor, kernel: Tensor) -> Tensor:
        bsz, length, _ = source.shape
        n = fft_length(length + kernel.size(0) - 1)  # no circular wrap into the kept outputs
        dtype = source.dtype
        if dtype in (torch.float16, torch.bfloat16):
            source, kernel = source.float(), kernel.float()
        spectrum = torch.fft.rfft(source, n=n, dim=1)  # B x F x d
        kernel_spectrum = torch.fft.rfft(kernel, n=n, dim=0)  # F x (d x d | d | -)
        if self.lag_shape == "matrix":
            product = torch.matmul(spectrum.transpose(0, 1), kernel_spectrum).transpose(0, 1)
        elif self.lag_shape == "vector":
            product = spectrum * kernel_spectrum
        else:
            product = spectrum * kernel_spectrum.unsqueeze(-1)
        return torch.fft.irfft(product, n=n, dim=1)[:, :length].to(dtype)

    # -- the sub-layer -------------------------------------------------------
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if before_softmax:
            raise ValueError(f"{self.kind_name} has no softmax: before_softmax=True is not supported")
        self._check_inputs(query, key, key_padding_mask)
        self._check_no_arbitrary_mask(attn_mask)
        if key is not None and key.shape != query.shape:
            raise ValueError(
                f"{self.kind_name} is self-attention only: key must be the query, "
                f"got shapes {tuple(key.shape)} and {tuple(query.shape)}"
            )
        tgt_len, bsz, _ = query.shape
        key_padding_mask = self._step_padding(key_padding_mask, tgt_len, incremental_state)
        x = query.transpose(0, 1)  # B x T x d
        source = self.in_proj(x) if self.in_proj is not None else x  # eq. 27 (HE)
        if key_padding_mask is not None:
            source = source.masked_fill(key_padding_mask.bool().unsqueeze(-1), 0.0)
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        history = buffer.get("window")
        if history is not None:
            source = torch.cat([history, source], dim=1)
        extracted = self._extract(source, tgt_len) + self.ext_bias  # eqs. 23, 26, 28, 29
        if incremental_state is not None:
            buffer["window"] = source[:, -self.lags:]  # the last min(t, l) inputs: all a later token can see
            self._set_input_buffer(incremental_state, buffer)
        out = extracted
        if self.adj_proj is not None:
            out = self.adj_proj(x) * out  # eq. 24
        if self.out_proj is not None:
            out = self.out_proj(out)  # eq. 25
        return out.transpose(0, 1), None


# -------------------------------------------------------- naive references ---
def _naive_extractor(module: Extractor, query: Tensor, key_padding_mask: Optional[Tensor], lag_term) -> Tensor:
    """Eqs. 23-29 term by term in float64: for every position i the sum over the
    real tokens j of the window (i - l < j <= i) of ``lag_term(x_j, k)``, k = i - j + 1,
    plus b_ext; then eq. 24 (adjustment) and eq. 25 (output) where the kind has them."""
    x = query.double()
    params = {name: p.double() for name, p in module.named_parameters()}
    if module.in_proj is not None:
        source = x @ params["in_proj.weight"].T + params["in_proj.bias"]  # eq. 27: X W_in + b_in
    else:
        source = x
    tgt_len, bsz, dim = x.shape
    extracted = x.new_zeros(tgt_len, bsz, dim)
    for b in range(bsz):
        for i in range(tgt_len):
            total = params["ext_bias"].clone()
            for j in range(max(0, i - module.lags + 1), i + 1):
                if key_padding_mask is not None and bool(key_padding_mask[b, j]):
                    continue
                total = total + lag_term(source[j, b], params["ext_weight"][i - j])  # W_ext[i - j + 1], 1-based
            extracted[i, b] = total
    out = extracted
    if module.adj_proj is not None:
        out = (x @ params["adj_proj.weight"].T + params["adj_proj.bias"]) * out  # eq. 24
    if module.out_proj is not None:
        out = out @ params["out_proj.weight"].T + params["out_proj.bias"]  # eq. 25
    return out.to(query.dtype)


def _naive_reference(name: str, lag_term, doc: str):
    """The registered naive reference of one kind: ``_naive_extractor`` with its lag term."""

    def naive(module, query, key, value, key_padding_mask=None):
        return _naive_extractor(module, query, key_padding_mask, lag_term)

    naive.__name__ = naive.__qualname__ = name
    naive.__doc__ = doc
    return naive


naive_extractor_she = _naive_reference(
    "naive_extractor_she", lambda x_j, w_k: x_j @ w_k,
    "Eq. 23: x_ext_i = sum_j x_j W_ext[i-j+1] + b_ext (a row vector times a d x d matrix).",
)
naive_extractor_we = _naive_reference(
    "naive_extractor_we", lambda x_j, w_k: x_j * w_k, "Eq. 26: x_ext_i = sum_j x_j o w_ext[i-j+1] + b_ext (element-wise)."
)
naive_extractor_he = _naive_reference(
    "naive_extractor_he", lambda x_in_j, w_k: x_in_j * w_k,
    "Eqs. 27-28: X_in = X W_in + b_in, then x_ext_i = sum_j x_in_j o w_ext[i-j+1] + b_ext.",
)
naive_extractor_me = _naive_reference(
    "naive_extractor_me", lambda x_j, w_k: w_k * x_j, "Eq. 29: x_ext_i = sum_j w_ext[i-j+1] x_j + b_ext, one scalar per lag."
)


# ------------------------------------------------------------------- kinds ---
class ExtractorSHE(Extractor):
    """Super high-performance Extractor: one d x d matrix per lag (eq. 23), eqs. 24-25."""

    lag_shape = "matrix"


class ExtractorHE(Extractor):
    """Higher-performance Extractor: W_in (eq. 27), one vector per lag (eq. 28), eqs. 24-25."""

    lag_shape = "vector"
    has_input_map = True


class ExtractorWE(Extractor):
    """Worthwhile Extractor: one vector per lag (eq. 26), eqs. 24-25."""

    lag_shape = "vector"


class ExtractorME(Extractor):
    """Minimalist Extractor: one scalar per lag (eq. 29), nothing else."""

    lag_shape = "scalar"
    has_adjustment = False


# ------------------------------------------------------------------ costs ---
# Counted as defined (eqs. 23-29, every lag term evaluated), not as the FFT
# convolution the implementation may choose for long windows.
EXTRACTOR_KINDS = ("extractor_she", "extractor_he", "extractor_we", "extractor_me")


def extractor(kind: str, d: int, queries: int, terms: int, output_projection: bool = True) -> Counts:
    """Per-operation counts of an Extractor for ``queries`` new tokens whose extraction
    sums have ``terms`` lag terms in all."""
    if kind not in EXTRACTOR_KINDS:
        raise ValueError(f"unknown Extractor {kind!r}; valid: {', '.join(EXTRACTOR_KINDS)}")
    counts = Counts()
    if kind == "extractor_he":
        counts += linear(queries, d, d)  # eq. 27: X_in = X W_in + b_in (cached when decoding)
    if kind == "extractor_she":
        # eq. 23: a position with m terms: m vector-matrix products (m d^2 mult.,
        # m d (d - 1) add.), their sum ((m - 1) d add.) and b_ext (d add.) = m d^2 add.
        counts += Counts(multiplications=terms * d * d, additions=terms * d * d)
    else:
        # eqs. 26, 28 (vector per lag) and 29 (scalar per lag times a d-vector):
        # m element-wise products (m d mult.), their sum ((m - 1) d add.) and b_ext (d add.)
        counts += Counts(multiplications=terms * d, additions=terms * d)
    if kind != "extractor_me":
        # eq. 24: X W_adj + b_adj, then the element-wise product with X_ext (d mult. per token)
        counts += linear(queries, d, d) + Counts(multiplications=queries * d)
        if output_projection:
            counts += linear(queries, d, d)  # eq. 25: X_adj W_out + b_out
    return counts


def extractor_parameters(kind: str, d: int, lags: int, output_projection: bool = True) -> int:
    if kind not in EXTRACTOR_KINDS:
        raise ValueError(f"unknown Extractor {kind!r}; valid: {', '.join(EXTRACTOR_KINDS)}")
    per_lag = {"extractor_she": d * d, "extractor_he": d, "extractor_we": d, "extractor_me": 1}[kind]
    params = lags * per_lag + d  # W_ext[1..l] (matrices, vectors or scalars) and b_ext
    if kind == "extractor_he":
        params += linear_parameters(d, d)  # W_in, b_in
    if kind != "extractor_me":
        params += linear_parameters(d, d)  # W_adj, b_adj
        if output_projection:
            params += linear_parameters(d, d)  # W_out, b_out
    return params


def extractor_training(kind: str, d: int, lags: int, n: int, output_projection: bool = True) -> Counts:
    """A pass over n tokens: token i sums min(i, l) lag terms."""
    return extractor(kind, d, queries=n, terms=lag_terms(range(1, n + 1), lags), output_projection=output_projection)


def extractor_step(kind: str, d: int, lags: int, t: int, output_projection: bool = True) -> Counts:
    """The t-th token sums min(t, l) lag terms."""
    return extractor(kind, d, queries=1, terms=lag_terms([t], lags), output_projection=output_projection)


def fft_flops(n, complex_input=False):
    """One FFT of length n: 2.5 n log2 n for a real transform (rfft / irfft), 5 n log2 n for a complex one
    (the usual count of a radix-2 FFT; mixed radix for 5-smooth n, counted alike)."""
    return (5.0 if complex_input else 2.5) * n * math.log2(max(n, 2))


def implementation_layer_flops(cls, length, embed_dim, heads, options, conv_impl=None, **settings):
    """An Extractor class's convolution (``conv_impl``: "direct" or "fft", default the cost rule's choice
    for one sequence, ``choose_conv_impl``) and linear maps. Complex multiply-adds count 8, complex
    products 6, FFTs as ``fft_flops``; the adjustment's element-wise product is not counted."""
    T, d = length, embed_dim
    proj = 2 * T * d * d  # one d x d linear map
    lag_shape = cls.lag_shape
    taps = min(options.lags, T)
    impl = conv_impl or choose_conv_impl(lag_shape, 1, T, taps, d)
    maps = int(cls.has_input_map) + (1 + int(options.extractor_output_projection)) * int(cls.has_adjustment)  # W_in, W_adj, W_out
    if impl == "direct":
        # conv1d: every output position multiplies taps lags of d x d (SHE) or d (depthwise) each;
        # backward: the input's and the weights' gradients, the same size each
        conv = 2 * T * taps * (d * d if lag_shape == "matrix" else d)
        return maps * proj + conv, 2 * maps * proj + 2 * conv
    n = fft_length(T + taps - 1)  # zero-padded, no circular wrap into the kept outputs
    freqs = n // 2 + 1
    kernel_cols = {"matrix": d * d, "vector": d, "scalar": 1}[lag_shape]
    # forward: rfft of the input (d columns) and of the kernel, irfft of the output (d columns); per
    # frequency a (1 x d) (d x d) complex product (SHE) or d complex products
    product = 8 * freqs * d * d if lag_shape == "matrix" else 6 * freqs * d
    fwd = (2 * d + kernel_cols) * fft_flops(n) + product
    # backward: an rfft of the output's gradient, complex FFTs of length n for the input's and the
    # kernel's gradients, and the products for the input's spectrum (as the forward's) and the kernel's
    # (SHE: a d x 1 by 1 x d outer product per frequency, one complex product per element)
    kernel_grad = 6 * freqs * d * d if lag_shape == "matrix" else product
    bwd = d * fft_flops(n) + (d + kernel_cols) * fft_flops(n, complex_input=True) + product + kernel_grad
    return maps * proj + fwd, 2 * maps * proj + bwd


IMPLEMENTATION_FLOPS_TEXT = {
    "extractor_she": "W_adj, W_out 4 T d^2; direct path: conv1d with l d x d lags 2 T l d^2. FFT path (when the cost rule "
    "takes it): (2 d + d^2) real FFTs of n = 5-smooth >= T + l - 1 points (2.5 n log2 n each) and 8 (n/2+1) d^2. "
    "Backward twice the forward (FFT path: as counted in `layer_flops`)",
    "extractor_he": "W_in, W_adj, W_out 6 T d^2; FFT path: 3 d real FFTs of n points (2.5 n log2 n each) and "
    "6 (n/2+1) d for the complex products; backward: the projections twice, d real and 2 d complex FFTs "
    "(5 n log2 n each), two complex products. Direct path: depthwise conv1d 2 T l d, backward twice",
    "extractor_we": "W_adj, W_out 4 T d^2; the extraction as extractor_he (d-vector lags)",
    "extractor_me": "no projections; FFT path: (2 d + 1) real FFTs of n points and 6 (n/2+1) d; backward: d real and "
    "d + 1 complex FFTs, two complex products. Direct path: 2 T l d, backward twice",
}


def extractor_costs(kind: str, cls) -> AttentionCosts:
    def parameters(placement, d, heads, kdim, options):
        return extractor_parameters(kind, d, options.lags, options.extractor_output_projection)

    def macs(placement, d, heads, queries, keys, kdim, options):
        counts = extractor(kind, d, queries, lag_terms(range(1, queries + 1), options.lags), options.extractor_output_projection)
        # eq. 24's X_adj * X_ext is element-wise: d multiplications per token, no product
        return counts.multiplications - (0 if kind == "extractor_me" else queries * d)

    def decoding_state_elements(placement, d, heads, length, kdim, options):
        return min(length, options.lags) * d  # the window of the last min(t, l) inputs (HE: after W_in)

    return AttentionCosts(
        parameters=parameters,
        macs=macs,
        decoding_state_elements=decoding_state_elements,
        decoding_state_growth="window",
        asymptotic_class="O(T*l)",
        options_from=lambda cfg: {
            "lags": resolve_lags(cfg),
            "extractor_output_projection": not bool(getattr(cfg, "extractor_no_output_projection", False)),
        },
        option_defaults={"lags": 128, "extractor_output_projection": True},  # the paper's context window l = 128
        implementation_flops=lambda *args, **settings: implementation_layer_flops(cls, *args, **settings),
        implementation_flops_text=IMPLEMENTATION_FLOPS_TEXT[kind],
        operation_counts=OperationCounts(
            label=kind.replace("extractor_", "").upper(),
            training=lambda d, heads, n, options: extractor_training(kind, d, options.lags, n, options.extractor_output_projection),
            step=lambda d, heads, t, options: extractor_step(kind, d, options.lags, t, options.extractor_output_projection),
        ),
    )


for _name, _cls, _naive, _description in (
    ("extractor_she", ExtractorSHE, naive_extractor_she,
     "super high-performance Extractor (Chen 2023): one d x d matrix per lag, adjustment, output projection"),
    ("extractor_he", ExtractorHE, naive_extractor_he,
     "higher-performance Extractor (Chen 2023): shared linear map, then one weight vector per lag"),
    ("extractor_we", ExtractorWE, naive_extractor_we,
     "worthwhile Extractor (Chen 2023): one weight vector per lag, adjustment, output projection"),
    ("extractor_me", ExtractorME, naive_extractor_me, "minimalist Extractor (Chen 2023): one scalar per lag, extraction only"),
):
    # extractor_me has no output projection to leave out
    _options = ["extractor_lags", "extractor_conv_impl"] + (["extractor_no_output_projection"] if _cls.has_adjustment else [])
    register_attention(_name, placements=[DECODER_SELF], naive_reference=_naive, description=_description,
                       costs=extractor_costs(_name, _cls), options=dict.fromkeys(_options))(_cls)
