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
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from ..options import AttentionContext
from ..registry import DECODER_SELF, AttentionConfigError, BaseAttention, register_attention
from ..shared import check_self_attention_key
from .conv import choose_conv_impl, extract
from .costs import extractor_costs
from .naive import naive_extractor
from .options import CONV_IMPLS, ExtractorMEOptions, ExtractorOptions, check_she_size, resolve_lags


# ------------------------------------------------------------------ modules ---
class Extractor(BaseAttention):
    """Shared parts of the four kinds. The extraction weights ``ext_weight`` are
    stored lag-major: ``ext_weight[k - 1]`` is W_ext[k] (SHE: d x d, applied as
    x W), w_ext[k] (WE/HE: d) or the scalar of lag k (ME)."""

    uses_future_mask = False
    returns_attention_weights = False
    # W_in, W_adj, W_out take fairseq's quantisation noise (ME has none of them)
    supports_quant_noise = True
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
        context: Optional[AttentionContext] = None,
    ):
        """``context``: the model's quantisation noise for the linear maps W_in, W_adj, W_out (none without)."""
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
        self.in_proj = self._linear(embed_dim, embed_dim, context) if self.has_input_map else None
        self.adj_proj = self._linear(embed_dim, embed_dim, context) if self.has_adjustment else None
        self.output_projection = bool(output_projection) and self.has_adjustment
        self.out_proj = self._linear(embed_dim, embed_dim, context) if self.output_projection else None
        self.reset_parameters()

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options: ExtractorMEOptions,
                    context: AttentionContext):
        return cls(placement, embed_dim, num_heads, lags=resolve_lags(options, context),
                   output_projection=not getattr(options, "extractor_no_output_projection", False),
                   conv_impl=options.extractor_conv_impl, kdim=kdim, vdim=vdim, context=context)

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
        kernel = self.ext_weight[: min(self.lags, length)].to(source.dtype)  # kernel[k]: lag k + 1
        impl = self.conv_impl_for(bsz, length) if num_outputs > 1 else "direct"
        return extract(source, kernel, self.lag_shape, num_outputs, impl)

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
        check_self_attention_key(self.kind_name, query, key)
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
def _naive_reference(name: str, doc: str):
    """The registered naive reference of one kind (module signature): ``naive.naive_extractor``
    with the module's parameters, in float64."""

    def naive(module, query, key, value, key_padding_mask=None):
        params = {name: p.double() for name, p in module.named_parameters()}
        out = naive_extractor(
            query.double(),
            params["ext_weight"],
            params["ext_bias"],
            module.lags,
            module.lag_shape,
            key_padding_mask,
            in_proj=(params["in_proj.weight"], params["in_proj.bias"]) if module.in_proj is not None else None,
            adj_proj=(params["adj_proj.weight"], params["adj_proj.bias"]) if module.adj_proj is not None else None,
            out_proj=(params["out_proj.weight"], params["out_proj.bias"]) if module.out_proj is not None else None,
        )
        return out.to(query.dtype)

    naive.__name__ = naive.__qualname__ = name
    naive.__doc__ = doc
    return naive


naive_extractor_she = _naive_reference(
    "naive_extractor_she", "Eq. 23: x_ext_i = sum_j x_j W_ext[i-j+1] + b_ext (a row vector times a d x d matrix)."
)
naive_extractor_we = _naive_reference(
    "naive_extractor_we", "Eq. 26: x_ext_i = sum_j x_j o w_ext[i-j+1] + b_ext (element-wise)."
)
naive_extractor_he = _naive_reference(
    "naive_extractor_he", "Eqs. 27-28: X_in = X W_in + b_in, then x_ext_i = sum_j x_in_j o w_ext[i-j+1] + b_ext."
)
naive_extractor_me = _naive_reference(
    "naive_extractor_me", "Eq. 29: x_ext_i = sum_j w_ext[i-j+1] x_j + b_ext, one scalar per lag."
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
    supports_quant_noise = False  # no linear map for --quant-noise-pq to act on


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
    register_attention(_name, placements=[DECODER_SELF], naive_reference=_naive, description=_description,
                       costs=extractor_costs(_name, _cls),
                       options=ExtractorOptions if _cls.has_adjustment else ExtractorMEOptions)(_cls)
