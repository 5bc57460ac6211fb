"""Tensor-level naive reference of the Extractors (Zhe Chen 2023, "Attention Is
Not All You Need Anymore", sections 5 and 7): eqs. 23-29 term by term, in
explicit loops over batch, positions and lags."""
from typing import Optional, Tuple

from torch import Tensor

# The lag term of one input x_j (a d-vector) and the weight w_k of lag k = i - j + 1.
LAG_TERMS = {
    "matrix": lambda x_j, w_k: x_j @ w_k,  # eq. 23 (SHE): x_j W_ext[k], a row vector times a d x d matrix
    "vector": lambda x_j, w_k: x_j * w_k,  # eqs. 26, 28 (WE, HE): x_j o w_ext[k], element-wise
    "scalar": lambda x_j, w_k: w_k * x_j,  # eq. 29 (ME): w_ext[k] x_j, one scalar per lag
}


def naive_extractor(
    x: Tensor,
    ext_weight: Tensor,
    ext_bias: Tensor,
    lags: int,
    lag_shape: str,
    key_padding_mask: Optional[Tensor] = None,
    in_proj: Optional[Tuple[Tensor, Tensor]] = None,
    adj_proj: Optional[Tuple[Tensor, Tensor]] = None,
    out_proj: Optional[Tuple[Tensor, Tensor]] = None,
) -> Tensor:
    """An Extractor of the sub-layer input x (T x B x d).

    ext_weight: lag-major, ext_weight[k - 1] the weight of lag k: l x d x d
    (``lag_shape`` "matrix", SHE), l x d ("vector", WE and HE) or l ("scalar",
    ME); ext_bias: d; lags: l, the window; key_padding_mask: B x T, True at
    pads (they contribute nothing); in_proj, adj_proj, out_proj: (weight d x d,
    bias d) of W_in (HE, eq. 27), W_adj (eq. 24) and W_out (eq. 25), None where
    the kind has none.

        X_in    = X W_in + b_in                                 (eq. 27, HE; else X_in = X)
        x_ext_i = sum_{j = i-l+1..i, j >= 0, real} term(x_in_j, w_ext[i-j+1]) + b_ext
                                                               (eqs. 23, 26, 28, 29)
        X_adj   = (X W_adj + b_adj) o X_ext                      (eq. 24)
        Y       = X_adj W_out + b_out                            (eq. 25)

    Returns Y (T x B x d).
    """
    lag_term = LAG_TERMS[lag_shape]
    source = x @ in_proj[0].T + in_proj[1] if in_proj is not None else x  # eq. 27: X W_in + b_in
    tgt_len, bsz, dim = x.shape
    extracted = x.new_zeros(tgt_len, bsz, dim)
    for b in range(bsz):
        for i in range(tgt_len):
            total = ext_bias.clone()
            for j in range(max(0, i - lags + 1), i + 1):
                if key_padding_mask is not None and bool(key_padding_mask[b, j]):
                    continue
                total = total + lag_term(source[j, b], ext_weight[i - j])  # W_ext[i - j + 1], 1-based
            extracted[i, b] = total
    out = extracted
    if adj_proj is not None:
        out = (x @ adj_proj[0].T + adj_proj[1]) * out  # eq. 24
    if out_proj is not None:
        out = out @ out_proj[0].T + out_proj[1]  # eq. 25
    return out
