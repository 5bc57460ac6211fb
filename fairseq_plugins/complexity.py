"""Counted complexity of one self-attention sub-layer and of each Extractor
(Zhe Chen 2023, "Attention Is Not All You Need Anymore", Tables 3-7).

For a model dimension d, h heads (softmax) and l lags (Extractors), counts the
real multiplications, additions, divisions and exponentiations of

* training: one causal pass over a sequence of n tokens (the paper: n = l);
* decoding: one new token at sequence length t, with the usual caches (keys
  and values for softmax attention, the last min(t, l) extraction inputs for
  Extractors; see ``modules/extractors.py``);

and the trainable parameters, which equal those of the modules in
``fairseq_plugins.modules`` (the tests build them and compare).

``KIND_COSTS`` gives every registered kind, in every placement, its parameters
and the multiply-adds of its matrix products (below), from which
``python -m fairseq_plugins.cli.model_costs`` sums whole presets.

Counting conventions:

* a dot product of length k: k multiplications, k - 1 additions; a bias adds
  one addition per output, so x W + b with x of length d_in and d_out outputs
  costs d_in d_out multiplications and d_in d_out additions;
* a sum of m vectors of length d: (m - 1) d additions;
* softmax over m scores: m exponentiations, m - 1 additions (the normaliser),
  m divisions; the maximum subtracted for numerical stability is not counted
  (it is not part of the function);
* the scaling 1/sqrt(d_h) is one multiplication per query element (fairseq
  scales q, not the scores);
* Extractors are counted as defined (eqs. 23-29, every lag term evaluated),
  not as the FFT convolution the implementation may choose for long windows.

    python -m fairseq_plugins.complexity                      # the paper's Table 7 setting: d = l = 128
    python -m fairseq_plugins.complexity --d 512 --l 256 --t 1000 --heads 8
"""
import argparse
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Sequence

EXTRACTOR_KINDS = ("extractor_she", "extractor_he", "extractor_we", "extractor_me")


@dataclass(frozen=True)
class Counts:
    multiplications: int = 0
    additions: int = 0
    divisions: int = 0
    exponentiations: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def linear(rows: int, d_in: int, d_out: int) -> Counts:
    """``rows`` vectors times a d_in x d_out matrix plus a bias: per output
    element a dot product of length d_in (d_in mult., d_in - 1 add.) and the
    bias (1 add.)."""
    return Counts(multiplications=rows * d_in * d_out, additions=rows * d_in * d_out)


def linear_parameters(d_in: int, d_out: int) -> int:
    return d_in * d_out + d_out  # weight and bias


def lag_terms(positions: Sequence[int], lags: int) -> int:
    """Terms of the extraction sums: position i (1-based) sums min(i, l) inputs."""
    return sum(min(i, lags) for i in positions)


# ---------------------------------------------------------------- softmax ---
def softmax_attention(d: int, heads: int, queries: int, pairs: int) -> Counts:
    """Multi-head softmax self-attention with Q, K, V and output projections
    (fairseq's MultiheadAttention) for ``queries`` new tokens that together
    attend to ``pairs`` (query, key) pairs."""
    if d % heads:
        raise ValueError(f"d = {d} is not divisible by {heads} heads")
    return (
        # q, k, v of the new tokens (earlier keys and values are cached when decoding)
        linear(queries, d, 3 * d)
        # q * 1/sqrt(d_h)
        + Counts(multiplications=queries * d)
        # scores q_i . k_j: per pair and head a dot product of length d_h = d / h
        + Counts(multiplications=pairs * d, additions=pairs * (d - heads))
        # softmax per query and head over its keys: one exp and one division
        # per pair and head; the normaliser of a query with m keys: m - 1 additions
        + Counts(exponentiations=pairs * heads, divisions=pairs * heads, additions=(pairs - queries) * heads)
        # sum_j a_ij v_j: per pair one d_h-vector scaled in every head (d mult.),
        # per query (m - 1) d additions
        + Counts(multiplications=pairs * d, additions=(pairs - queries) * d)
        # output projection
        + linear(queries, d, d)
    )


def softmax_parameters(d: int) -> int:
    return 4 * linear_parameters(d, d)  # W_q, W_k, W_v, W_o with biases


def softmax_training(d: int, heads: int, n: int) -> Counts:
    """A causal pass over n tokens: token i attends to i keys, n(n+1)/2 pairs."""
    return softmax_attention(d, heads, queries=n, pairs=n * (n + 1) // 2)


def softmax_step(d: int, heads: int, t: int) -> Counts:
    """The t-th token attends to t keys (t - 1 cached and its own)."""
    return softmax_attention(d, heads, queries=1, pairs=t)


# ------------------------------------------------------------- extractors ---
def extractor(kind: str, d: int, queries: int, terms: int, output_projection: bool = True) -> Counts:
    """An Extractor for ``queries`` new tokens whose extraction sums have
    ``terms`` lag terms in all."""
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


# ------------------------------------------- every kind, for whole models ---
# Matrix-product work of one forward pass of a sub-layer, counted in
# multiply-accumulates (MACs; FLOPs = 2 MACs, the convention of
# torch.utils.flop_counter). Each kind is counted as defined, for one sequence
# without padding, ``queries`` query tokens and ``keys`` key tokens (self-
# attention: keys = queries):
#
# * linear maps: rows x d_in x d_out (biases are element-wise, not counted);
# * softmax: q . k and a . v over the visible (query, key) pairs only
#   (fairseq's implementation computes the whole T x S matrices and masks them);
# * cosFormer: the linear form of eq. 10, cos and sin parts, with the
#   normaliser as an extra all-ones value column (as cosformer.py computes it):
#   phi(K)^T [V 1] and phi(Q) (phi(K)^T [V 1]), 2 (S + T) d (d_h + 1);
#   the causal form counted the same (its prefix sums are additions);
# * BET: softmax's q . k and a . v, the token scores w^T [H_j; K_j] (2 d per
#   token), and A' V over the pairs of the second mask;
# * Extractors: every lag term of eqs. 23-29, as in ``extractor`` above.
#
# Element-wise work (softmax, scaling, re-weighting, activations, norms) is left
# out; the per-operation counts above keep it.


@dataclass(frozen=True)
class AttentionOptions:
    """The model options that change a kind's parameters or counted work."""

    lags: int = 128                         # Extractors' l
    extractor_output_projection: bool = True
    softmax_diag_free: bool = False         # decoder self-attention only
    bet_diag_free: bool = True


@dataclass(frozen=True)
class KindCost:
    # parameters(placement, d, heads, kdim, options) -> int
    parameters: Callable[[str, int, int, int, AttentionOptions], int]
    # macs(placement, d, heads, queries, keys, kdim, options) -> int
    macs: Callable[[str, int, int, int, int, int, AttentionOptions], int]


def visible_pairs(placement: str, queries: int, keys: int, diag_free: bool = False) -> int:
    """(query, key) pairs an attention distribution covers: all of them, or in
    causal self-attention (queries = keys = n) token i sees tokens j <= i, and
    with the diagonal-free mask j < i (the first token still sees itself)."""
    if placement != "decoder_self":
        return queries * keys
    if queries != keys:
        raise ValueError(f"decoder self-attention has as many keys as queries, got {queries} and {keys}")
    n = queries
    return n * (n - 1) // 2 + min(n, 1) if diag_free else n * (n + 1) // 2


def _projection_parameters(d: int, kdim: int) -> int:
    """W_q, W_o on d inputs and W_k, W_v on kdim inputs, each with its bias."""
    return 2 * linear_parameters(d, d) + 2 * linear_parameters(kdim, d)


def _projection_macs(d: int, queries: int, keys: int, kdim: int) -> int:
    return 2 * queries * d * d + 2 * keys * kdim * d


def _softmax_macs(placement, d, heads, queries, keys, kdim, options):
    diag_free = options.softmax_diag_free and placement == "decoder_self"
    return _projection_macs(d, queries, keys, kdim) + 2 * visible_pairs(placement, queries, keys, diag_free) * d


def _cosformer_macs(placement, d, heads, queries, keys, kdim, options):
    return _projection_macs(d, queries, keys, kdim) + 2 * (queries + keys) * d * (d // heads + 1)


def _bet_parameters(placement, d, heads, kdim, options):
    return _projection_parameters(d, kdim) + 2 * d  # w: heads x 2 d_h (per-head) or 2 d (shared)


def _bet_macs(placement, d, heads, queries, keys, kdim, options):
    first = visible_pairs(placement, queries, keys)
    second = visible_pairs(placement, queries, keys, options.bet_diag_free)
    return _projection_macs(d, queries, keys, kdim) + 2 * first * d + 2 * queries * d + second * d


def _extractor_cost(kind: str) -> KindCost:
    def parameters(placement, d, heads, kdim, options):
        return extractor_parameters(kind, d, options.lags, options.extractor_output_projection)

    def macs(placement, d, heads, queries, keys, kdim, options):
        counts = extractor(kind, d, queries, lag_terms(range(1, queries + 1), options.lags), options.extractor_output_projection)
        # eq. 24's X_adj * X_ext is element-wise: d multiplications per token, no product
        return counts.multiplications - (0 if kind == "extractor_me" else queries * d)

    return KindCost(parameters, macs)


KIND_COSTS: Dict[str, KindCost] = {
    "softmax": KindCost(lambda placement, d, heads, kdim, options: _projection_parameters(d, kdim), _softmax_macs),
    "cosformer": KindCost(lambda placement, d, heads, kdim, options: _projection_parameters(d, kdim), _cosformer_macs),
    "bet": KindCost(_bet_parameters, _bet_macs),
    **{kind: _extractor_cost(kind) for kind in EXTRACTOR_KINDS},
}


def kind_cost(kind: str) -> KindCost:
    if kind not in KIND_COSTS:
        raise ValueError(f"no parameter/FLOP count for attention kind {kind!r}; counted kinds: {', '.join(sorted(KIND_COSTS))} "
                         "(add one to KIND_COSTS in fairseq_plugins/complexity.py)")
    return KIND_COSTS[kind]


# ------------------------------------------------------------------ table ---
def table_rows(d: int, lags: int, t: int, heads: Sequence[int] = (1, 32), output_projection: bool = True) -> List[Dict]:
    """One row per sub-layer: training over a sequence of l tokens, one token at length t, parameters."""
    rows = []
    for h in heads:
        rows.append(dict(
            name=f"softmax self-attention, {h} head{'s' if h > 1 else ''}",
            training=softmax_training(d, h, lags), step=softmax_step(d, h, t), parameters=softmax_parameters(d),
        ))
    for kind in EXTRACTOR_KINDS:
        rows.append(dict(
            name=kind.replace("extractor_", "").upper(),
            training=extractor_training(kind, d, lags, lags, output_projection),
            step=extractor_step(kind, d, lags, t, output_projection),
            parameters=extractor_parameters(kind, d, lags, output_projection),
        ))
    return rows


def markdown_table(d: int, lags: int, t: int, heads: Sequence[int] = (1, 32), output_projection: bool = True) -> str:
    header = (
        f"Per sub-layer, d = {d}, l = {lags}: training = one causal pass over l = {lags} tokens; "
        f"decoding = one new token at length t = {t}.\n\n"
        "| sub-layer | training × | training + | training ÷ | training exp | decoding × | decoding + | decoding ÷ | decoding exp | parameters |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    lines = []
    for row in table_rows(d, lags, t, heads, output_projection):
        cells = [row["name"]]
        for part in ("training", "step"):
            counts = row[part]
            cells += [f"{getattr(counts, f.name):,}" for f in fields(counts)]
        cells.append(f"{row['parameters']:,}")
        lines.append("| " + " | ".join(cells) + " |")
    return header + "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=128, help="model dimension (default 128, the paper's)")
    parser.add_argument("--l", type=int, default=128, help="lags = context window = training sequence length (default 128)")
    parser.add_argument("--t", type=int, default=None, help="sequence length at which one token is decoded (default: l)")
    parser.add_argument("--heads", default="1,32", help="softmax head counts, comma-separated (default 1,32)")
    parser.add_argument("--no-output-projection", action="store_true", help="Extractors without W_out (eq. 25)")
    args = parser.parse_args(argv)
    heads = [int(h) for h in args.heads.split(",")]
    if args.d < 1 or args.l < 1 or (args.t is not None and args.t < 1) or any(h < 1 or args.d % h for h in heads):
        parser.error("--d, --l, --t and --heads must be positive, and every head count must divide --d")
    print(markdown_table(args.d, args.l, args.t or args.l, heads, not args.no_output_projection), end="")


if __name__ == "__main__":
    main()
