"""The counted complexity: parameter counts equal the modules', the formulas
equal hand counts and the operations of an instrumented scalar evaluation."""
import argparse
import math
from collections import Counter

import pytest
import torch

from fairseq_plugins import complexity
from fairseq_plugins.complexity import Counts
from fairseq_plugins.modules.extractors.costs import EXTRACTOR_KINDS, extractor_parameters, extractor_step, extractor_training
from fairseq_plugins.modules.softmax.costs import softmax_parameters, softmax_step, softmax_training
from fairseq_plugins.modules import DECODER_SELF, build_attention


def n_params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", EXTRACTOR_KINDS)
@pytest.mark.parametrize("d,lags", [(16, 1), (16, 12), (32, 5)])
@pytest.mark.parametrize("output_projection", [True, False])
def test_extractor_parameter_counts_equal_the_modules(kind, d, lags, output_projection):
    cfg = argparse.Namespace(max_target_positions=12, extractor_lags=lags, extractor_no_output_projection=not output_projection)
    module = build_attention(kind, DECODER_SELF, d, 4, cfg)
    assert extractor_parameters(kind, d, lags, output_projection) == n_params(module)


@pytest.mark.parametrize("d,heads", [(16, 1), (16, 4), (128, 32)])
def test_softmax_parameter_counts_equal_the_module(d, heads):
    module = build_attention("softmax", DECODER_SELF, d, heads, argparse.Namespace(max_target_positions=12))
    assert softmax_parameters(d) == n_params(module)


def test_hand_counts_d4_l2():
    # SHE, d = 4, l = 2, training over 2 tokens: 1 + 2 = 3 lag terms of 4 x 4
    # matrices (48 mult., 48 add. with b_ext), X W_adj + b_adj on 2 tokens (32, 32),
    # the element-wise product (8 mult.), X_adj W_out + b_out (32, 32)
    assert extractor_training("extractor_she", 4, 2, 2) == Counts(120, 112, 0, 0)
    assert extractor_parameters("extractor_she", 4, 2) == 2 * 16 + 4 + 20 + 20
    # ME at t = 5 with l = 2: 2 scalar-times-vector terms (8 mult.), 4 + 4 add.
    assert extractor_step("extractor_me", 4, 2, 5) == Counts(8, 8, 0, 0)
    # softmax, d = 4, 2 heads, training over 2 tokens (3 causal pairs):
    # q,k,v 2*4*12 = 96, scaling 8, scores 3*4 = 12, values 12, output 32 multiplications;
    # additions 96 + 3*(4-2) + 2*(3-2) + 4*(3-2) + 32; 3*2 exps and divisions
    assert softmax_training(4, 2, 2) == Counts(160, 140, 6, 6)
    # the paper's Table 7 setting, d = l = 128, one new token at t = 128
    assert softmax_step(128, 1, 128).multiplications == 4 * 128**2 + 128 + 2 * 128 * 128
    # SHE: 128 lag matrices, W_adj and W_out, the element-wise product
    assert extractor_step("extractor_she", 128, 128, 128).multiplications == 128 * 128**2 + 2 * 128**2 + 128
    assert extractor_parameters("extractor_me", 128, 128) == 256


class Num:
    """A float that counts the operations it takes part in."""

    ops = Counter()

    def __init__(self, value):
        self.value = float(value)

    @staticmethod
    def _v(x):
        return x.value if isinstance(x, Num) else float(x)

    def __mul__(self, other):
        Num.ops["multiplications"] += 1
        return Num(self.value * Num._v(other))

    __rmul__ = __mul__

    def __add__(self, other):
        Num.ops["additions"] += 1
        return Num(self.value + Num._v(other))

    __radd__ = __add__

    def __truediv__(self, other):
        Num.ops["divisions"] += 1
        return Num(self.value / Num._v(other))

    def exp(self):
        Num.ops["exponentiations"] += 1
        return Num(math.exp(self.value))


def dot(u, v):
    total = u[0] * v[0]
    for a, b in zip(u[1:], v[1:]):
        total = total + a * b
    return total


def affine(x, weight, bias):
    """x W^T + b with torch's (out, in) weight layout."""
    return [dot(x, row) + b for row, b in zip(weight.tolist(), bias.tolist())]


def cached_affine(x, weight, bias):
    """x W^T + b computed outside the count (a cached value when decoding)."""
    exact = weight @ torch.tensor([Num._v(a) for a in x], dtype=torch.float64) + bias
    return [Num(v) for v in exact.tolist()]


def vsum(vectors):
    total = vectors[0]
    for v in vectors[1:]:
        total = [a + b for a, b in zip(total, v)]
    return total


def scalar_extractor(module, xs, positions, cached_inputs):
    """Eqs. 23-29 on Num scalars for the given 0-based positions; inputs of
    earlier positions are cached (HE: after W_in), so their cost is not counted."""
    p = {name: t.detach().double() for name, t in module.named_parameters()}
    weight = p["ext_weight"].tolist()
    if module.in_proj is not None:
        sources = [
            (cached_affine if i in cached_inputs else affine)(x, p["in_proj.weight"], p["in_proj.bias"]) for i, x in enumerate(xs)
        ]
    else:
        sources = xs
    outputs = []
    for i in positions:
        terms = []
        for j in range(max(0, i - module.lags + 1), i + 1):
            w = weight[i - j]
            if module.lag_shape == "matrix":
                terms.append([dot(sources[j], [row[o] for row in w]) for o in range(len(w))])
            elif module.lag_shape == "vector":
                terms.append([a * b for a, b in zip(sources[j], w)])
            else:
                terms.append([w * a for a in sources[j]])
        out = [a + b for a, b in zip(vsum(terms), p["ext_bias"].tolist())]
        if module.adj_proj is not None:
            out = [a * b for a, b in zip(affine(xs[i], p["adj_proj.weight"], p["adj_proj.bias"]), out)]
        if module.out_proj is not None:
            out = affine(out, p["out_proj.weight"], p["out_proj.bias"])
        outputs.append([Num._v(v) for v in out])
    return outputs


def scalar_softmax(module, xs, positions, heads):
    """Causal multi-head softmax attention on Num scalars; keys and values of
    earlier positions come from the cache (not counted) when decoding."""
    p = {name: t.detach().double() for name, t in module.named_parameters()}
    d = len(xs[0])
    dh = d // heads
    first = positions[0]

    def project(x, name, cached):
        return (cached_affine if cached else affine)(x, p[f"{name}.weight"], p[f"{name}.bias"])

    keys = [project(x, "k_proj", j < first) for j, x in enumerate(xs)]
    values = [project(x, "v_proj", j < first) for j, x in enumerate(xs)]
    outputs = []
    for i in positions:
        q = [a * (dh ** -0.5) for a in project(xs[i], "q_proj", False)]
        out = []
        for h in range(heads):
            sl = slice(h * dh, (h + 1) * dh)
            exps = [dot(q[sl], keys[j][sl]).exp() for j in range(i + 1)]
            norm = exps[0]
            for e in exps[1:]:
                norm = norm + e
            weights = [e / norm for e in exps]
            out += vsum([[w * v for v in values[j][sl]] for j, w in enumerate(weights)])
        outputs.append([Num._v(v) for v in affine(out, p["out_proj.weight"], p["out_proj.bias"])])
    return outputs


def counted(fn, *args):
    Num.ops.clear()
    result = fn(*args)
    return Counts(**Num.ops), result


D, LAGS, LENGTH, HEADS = 4, 3, 5, 2


@pytest.fixture
def xs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(LENGTH, D, dtype=torch.float64, generator=gen)


@pytest.mark.parametrize("kind", EXTRACTOR_KINDS)
@pytest.mark.parametrize("output_projection", [True, False])
def test_extractor_formulas_count_the_operations_of_the_scalar_evaluation(kind, output_projection, xs):
    cfg = argparse.Namespace(max_target_positions=LENGTH, extractor_lags=LAGS, extractor_no_output_projection=not output_projection)
    torch.manual_seed(0)
    module = build_attention(kind, DECODER_SELF, D, 1, cfg).double().eval()
    expected, _ = module(xs.unsqueeze(1), None, None, need_weights=False)
    rows = [[Num(v) for v in x] for x in xs.tolist()]
    # training: every position of a length-n sequence (n > l: the window slides)
    ops, outputs = counted(scalar_extractor, module, rows, range(LENGTH), set())
    assert torch.allclose(torch.tensor(outputs, dtype=torch.float64), expected[:, 0], atol=1e-12)
    n = LENGTH
    assert ops == extractor_training(kind, D, LAGS, n, output_projection)
    # decoding the t-th token (t = 2 < l and t = 5 > l), earlier inputs cached
    for t in (2, 5):
        ops, outputs = counted(scalar_extractor, module, rows[:t], [t - 1], set(range(t - 1)))
        assert torch.allclose(torch.tensor(outputs[0], dtype=torch.float64), expected[t - 1, 0], atol=1e-12)
        assert ops == extractor_step(kind, D, LAGS, t, output_projection)


def test_softmax_formulas_count_the_operations_of_the_scalar_evaluation(xs):
    module = build_attention("softmax", DECODER_SELF, D, HEADS, argparse.Namespace(max_target_positions=LENGTH)).double().eval()
    expected, _ = module(xs.unsqueeze(1), xs.unsqueeze(1), xs.unsqueeze(1), need_weights=False)
    rows = [[Num(v) for v in x] for x in xs.tolist()]
    ops, outputs = counted(scalar_softmax, module, rows, list(range(LENGTH)), HEADS)
    assert torch.allclose(torch.tensor(outputs, dtype=torch.float64), expected[:, 0], atol=1e-12)
    assert ops == softmax_training(D, HEADS, LENGTH)
    ops, outputs = counted(scalar_softmax, module, rows, [LENGTH - 1], HEADS)
    assert torch.allclose(torch.tensor(outputs[0], dtype=torch.float64), expected[-1, 0], atol=1e-12)
    assert ops == softmax_step(D, HEADS, LENGTH)


def test_cli_prints_the_table_7_setting(capsys):
    complexity.main([])
    out = capsys.readouterr().out
    assert "d = 128, l = 128" in out and out.count("\n| ") == 8  # header, separator, 6 sub-layers
    she = next(line for line in out.splitlines() if line.startswith("| SHE"))
    assert f"{extractor_parameters('extractor_she', 128, 128):,}" in she
    complexity.main(["--d", "64", "--l", "16", "--t", "100", "--heads", "4", "--no-output-projection"])
    out = capsys.readouterr().out
    assert "t = 100" in out and "32 heads" not in out
    with pytest.raises(SystemExit):
        complexity.main(["--d", "64", "--heads", "5"])
