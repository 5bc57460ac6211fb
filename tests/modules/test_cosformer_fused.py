"""cosFormer's fused Triton kernels on the CPU, under Triton's interpreter: every algorithm of the one
signature (algorithms.py) against the naive reference (outputs, final states, gradients of q, k, v and
of the carried state), bf16/fp16 inputs with float32 accumulation, and the conformance suite's checks of
the module with ``--cosformer-algorithm fused`` (full pass, step-by-step decoding in the fused step
kernel, beam reorder, padding, autocast). Triton is installed by the test set-up (``make test``:
requirements-test-triton.txt); it is an optional dependency of the plugin itself."""
import importlib
import importlib.util
import logging
import math
import os
import sys

import pytest
import torch

import fairseq_plugins  # noqa: F401  (registers the kinds)
from fairseq_plugins.modules import DECODER_SELF, build_attention
from fairseq_plugins.modules.cosformer import algorithms
from fairseq_plugins.modules.cosformer.algorithms import ALGORITHMS


def _interpreted_kernels():
    """The kernel modules with their kernels under Triton's interpreter. Triton reads TRITON_INTERPRET when
    a kernel is decorated (at the kernel module's import) and again when it runs (``interpreter_env``):
    set it for that import and import, or re-import a module imported before without it."""
    if importlib.util.find_spec("triton") is None:
        raise RuntimeError("triton is not installed: `make test` installs it (requirements-test-triton.txt), "
                           "or pip install --no-deps -r requirements-test-triton.txt")
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        modules = []
        for name, kernel in (("fused_chunk", "_fused_forward_kernel"), ("fused_recurrent", "_fused_recurrent_kernel")):
            module = importlib.import_module(f"fairseq_plugins.modules.cosformer.{name}")
            if not _interpreted(getattr(module, kernel)):
                module = importlib.reload(module)
            modules.append(module)
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    assert all(_interpreted(kernel) for kernel in (modules[0]._fused_forward_kernel, modules[0]._fused_backward_q_kernel,
                                                    modules[0]._fused_backward_kv_kernel, modules[1]._fused_recurrent_kernel))
    return modules


def _interpreted(kernel):
    return type(kernel).__name__ == "InterpretedFunction"


FUSED_CHUNK, FUSED_RECURRENT = _interpreted_kernels()


@pytest.fixture(autouse=True)
def interpreter_env(monkeypatch):
    """TRITON_INTERPRET=1 while a test of this module runs (the interpreter checks it on launch), and only
    then: the other test files of this worker, and the processes they start, do not see it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _load_conformance():
    """tests/modules/test_conformance.py as a module of its own (pytest's importlib mode puts no test
    folder on sys.path): its checks run here on the fused algorithm, under the interpreter."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_conformance.py")
    spec = importlib.util.spec_from_file_location("cosformer_fused_conformance", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conformance = _load_conformance()

B, H, T, D, E, M, EPS = 2, 2, 37, 6, 5, 64, 1e-6  # D, E not powers of two: the kernels' masked columns
CHUNK = 8  # several chunks, the last one partial
STEPS = 8  # decoding steps, one call each (past the left padding of row 0)


def _case(dtype=torch.float64, seed=0, padded=True):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, D, generator=gen, dtype=dtype), torch.randn(B, H, T, D, generator=gen, dtype=dtype)
    v = torch.randn(B, H, T, E, generator=gen, dtype=dtype)
    pad = torch.zeros(B, T, dtype=torch.bool)
    if padded:
        pad[0, :4] = True  # left padding: positions count from the first real token
        pad[1, -5:] = True  # right padding
    real = (~pad).long()
    pos = (real.cumsum(1) - real).clamp_min(0)
    angle = (pos.to(torch.float64) * (math.pi / 2) / M).to(dtype).view(B, 1, T, 1)
    state = torch.rand(B, H, 2, D, E + 1, generator=gen, dtype=torch.float64)
    return q, k, v, pad, angle, state


def _run(name, q, k, v, state, angle, pad, upstream, **tuning):
    """Output, final state and the gradients of q, k, v (and of the state, if one is given)."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    state = state.detach().requires_grad_(True) if state is not None else None
    o, final = ALGORITHMS[name](*leaves, state, angle=angle, horizon=M, eps=EPS, key_padding_mask=pad, **tuning)
    g_o, g_final = upstream
    loss = (o.double() * g_o).sum() + (final.double() * g_final).sum()
    grads = torch.autograd.grad(loss, leaves + ([state] if state is not None else []))
    return [o.detach().double(), final.detach().double()] + [g.double() for g in grads]


def _upstream(seed=5):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, T, E, generator=gen, dtype=torch.float64), torch.randn(B, H, 2, D, E + 1, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "carried-state"])
@pytest.mark.parametrize("name,tuning", [("chunked", {"chunk_size": CHUNK}), ("fused", {"chunk_size": CHUNK}),
                                         ("fused", {"chunk_size": 64}), ("recurrent", {})],
                         ids=["chunked", "fused", "fused-one-chunk", "recurrent"])
def test_every_algorithm_equals_the_naive_reference(name, tuning, with_state):
    q, k, v, pad, angle, state = _case()
    state = state if with_state else None
    upstream = _upstream()
    got = _run(name, q, k, v, state, angle, pad, upstream, **tuning)
    want = _run("naive", q, k, v, state, angle, pad, upstream)
    labels = ["o", "final_state", "dq", "dk", "dv", "d_initial_state"]
    real = (~pad)[:, None, :, None]
    for label, a, b in zip(labels, got, want):
        if label == "o":  # padded queries' outputs are never read
            a, b = a * real, b * real
        assert torch.allclose(a, b, atol=1e-10, rtol=0), f"{name} {label}: {(a - b).abs().max():.2e}"


@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "carried-state"])
def test_fused_decoding_kernel_equals_the_naive_reference(with_state):
    """The fused step kernel, over the whole sequence in one call and token by token with the state
    carried between calls (decoding; the first STEPS tokens: the interpreter is slow), against the naive
    full pass; the incoming state is left as it is."""
    q, k, v, pad, angle, state = _case()
    state = state if with_state else None
    kept = state.clone() if state is not None else None
    want_o, want_final = ALGORITHMS["naive"](q, k, v, state, angle=angle, horizon=M, eps=EPS, key_padding_mask=pad)
    real = (~pad)[:, None, :, None]
    with torch.no_grad():
        o, final = ALGORITHMS["fused_recurrent"](q, k, v, state, angle=angle, horizon=M, eps=EPS, key_padding_mask=pad)
        carried, steps = state, []
        for t in range(STEPS):
            sl = slice(t, t + 1)
            out, carried = ALGORITHMS["fused_recurrent"](q[:, :, sl], k[:, :, sl], v[:, :, sl], carried, angle=angle[:, :, sl],
                                                         horizon=M, eps=EPS, key_padding_mask=pad[:, sl])
            steps.append(out)
    assert torch.allclose(o * real, want_o * real, atol=1e-10, rtol=0)
    assert torch.allclose(final, want_final, atol=1e-10, rtol=0)
    want_o, want_final = ALGORITHMS["naive"](q[:, :, :STEPS], k[:, :, :STEPS], v[:, :, :STEPS], state, angle=angle[:, :, :STEPS],
                                             horizon=M, eps=EPS, key_padding_mask=pad[:, :STEPS])
    real = real[:, :, :STEPS]
    assert torch.allclose(torch.cat(steps, dim=2) * real, want_o * real, atol=1e-10, rtol=0)
    assert torch.allclose(carried, want_final, atol=1e-10, rtol=0)
    if state is not None:
        assert torch.equal(state, kept)


def _assert_fused_equals_naive(q, k, v, state, angle, pad, upstream):
    """The fused kernels' output, final state and gradients are the naive reference's (padded queries'
    outputs are never read)."""
    got = _run("fused", q, k, v, state, angle, pad, upstream, chunk_size=CHUNK)
    want = _run("naive", q, k, v, state, angle, pad, upstream)
    real = (~pad)[:, None, :, None]
    for label, a, b in zip(["o", "final_state", "dq", "dk", "dv", "d_initial_state"], got, want):
        if label == "o":
            a, b = a * real, b * real
        assert torch.allclose(a, b, atol=1e-10, rtol=0), f"{label}: {(a - b).abs().max():.2e}"


@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "carried-state"])
@pytest.mark.parametrize("max_block_e", [1, 2, 4], ids=["blocks-of-1", "blocks-of-2", "blocks-of-4"])
def test_fused_kernels_split_the_value_columns_exactly(max_block_e, with_state, monkeypatch):
    """Every program of a head takes MAX_BLOCK_E value columns (E = 5: 5, 3 or 2 blocks, the last partial):
    d v and the state's gradient per block, d q and d k as partial sums over the blocks, the normaliser's
    terms counted once; the result is the naive reference's."""
    monkeypatch.setattr(FUSED_CHUNK, "MAX_BLOCK_E", max_block_e)
    monkeypatch.setattr(FUSED_CHUNK, "_FITTING_BLOCK_E", {})
    q, k, v, pad, angle, state = _case(seed=3)
    state = state if with_state else None
    upstream = _upstream(seed=7)
    _assert_fused_equals_naive(q, k, v, state, angle, pad, upstream)


class _NeedsLessSharedMemory:
    """A kernel as a GPU with little shared memory sees it: compiling with more than ``fits`` value columns
    per program is refused as Triton refuses it (OutOfResources, before anything runs)."""

    def __init__(self, kernel, fits):
        self.kernel, self.fits, self.tried = kernel, fits, []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.tried.append(meta["BLOCK_E"])
            if meta["BLOCK_E"] > self.fits:
                raise FUSED_CHUNK.OutOfResources(316416, 232448, "shared memory")
            return self.kernel[grid](*args, **meta)
        return launch


def test_kernels_too_large_for_the_device_run_with_fewer_columns(monkeypatch):
    """A head too wide for the device's shared memory (found on an H200: head dimension 128, the backward
    asked for 316 KB of 227 KB) trains: each kernel is launched again with half the value columns per
    program until it fits, with the reference's result, and the fitting size is remembered."""
    monkeypatch.setattr(FUSED_CHUNK, "_FITTING_BLOCK_E", {})
    kernels = {name: _NeedsLessSharedMemory(getattr(FUSED_CHUNK, name), fits)
               for name, fits in (("_fused_forward_kernel", 4), ("_fused_backward_q_kernel", 2), ("_fused_backward_kv_kernel", 1))}
    for name, kernel in kernels.items():
        monkeypatch.setattr(FUSED_CHUNK, name, kernel)
    q, k, v, pad, angle, state = _case(seed=4)
    upstream = _upstream(seed=8)
    for attempt in range(2):
        _assert_fused_equals_naive(q, k, v, state, angle, pad, upstream)
    # E = 5: first 8 columns (the next power of two), halved until it fits; the second pass starts there
    assert kernels["_fused_forward_kernel"].tried == [8, 4, 4]
    assert kernels["_fused_backward_q_kernel"].tried == [8, 4, 2, 2]
    assert kernels["_fused_backward_kv_kernel"].tried == [8, 4, 2, 1, 1]


def test_a_kernel_that_fits_no_block_size_says_so(monkeypatch):
    monkeypatch.setattr(FUSED_CHUNK, "_FITTING_BLOCK_E", {})
    monkeypatch.setattr(FUSED_CHUNK, "_fused_forward_kernel", _NeedsLessSharedMemory(FUSED_CHUNK._fused_forward_kernel, 0))
    q, k, v, pad, angle, _ = _case()
    with pytest.raises(RuntimeError, match="do not fit .* shared memory at head dimension 8 even with 1 value columns .*--cosformer-algorithm chunked"):
        ALGORITHMS["fused"](q, k, v, None, angle=angle, horizon=M, eps=EPS, key_padding_mask=pad, chunk_size=CHUNK)


def test_fused_decoding_kernel_refuses_gradients():
    q, k, v, pad, angle, _ = _case()
    with pytest.raises(RuntimeError, match="no backward"):
        ALGORITHMS["fused_recurrent"](q.requires_grad_(True), k, v, None, angle=angle, horizon=M, eps=EPS)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_low_precision_inputs_accumulate_in_float32(dtype):
    """bf16/fp16 q, k, v: the kernels load them and accumulate states and normaliser in float32 (the outputs
    and the state float32), so the result is the float64 reference on the same rounded inputs to float32
    precision (1e-5: a sum kept in ``dtype`` misses by its unit roundoff, 2^-9 or 2^-12, and more)."""
    q, k, v, pad, angle, _ = _case(dtype)
    upstream = _upstream()
    got = _run("fused", q, k, v, None, angle.float(), pad, upstream, chunk_size=CHUNK)
    assert got[0].dtype == torch.float64  # (converted by _run) -- the kernel's own dtypes:
    o, final = ALGORITHMS["fused"](q, k, v, None, angle=angle.float(), horizon=M, eps=EPS, key_padding_mask=pad, chunk_size=CHUNK)
    assert o.dtype == torch.float32 and final.dtype == torch.float32
    want = _run("naive", q.double(), k.double(), v.double(), None, angle.double(), pad, upstream)
    real = (~pad)[:, None, :, None]
    scale = want[0].abs().max()
    fused_error = ((got[0] - want[0]) * real).abs().max() / scale
    assert fused_error < 1e-5, fused_error
    assert torch.allclose(got[1], want[1], atol=1e-5 * want[1].abs().max().item(), rtol=0)
    # the gradients of bf16/fp16 inputs are bf16/fp16 (autograd's rule): float32-accurate, then rounded once
    unit_roundoff = torch.finfo(dtype).eps / 2
    for label, a, b in zip(["dq", "dk", "dv"], got[2:], want[2:]):
        assert torch.allclose(a, b, atol=1e-5 * b.abs().max().item(), rtol=2 * unit_roundoff), f"{label}: {(a - b).abs().max():.2e}"
    with torch.no_grad():
        o, final = ALGORITHMS["fused_recurrent"](q, k, v, None, angle=angle.float(), horizon=M, eps=EPS, key_padding_mask=pad)
    assert final.dtype == torch.float32
    assert ((o.double() - want[0]) * real).abs().max() / scale < 1e-5


# -- the module, through the conformance suite's checks ----------------------------------------------
FUSED_VARIANT = "fused"


@pytest.fixture
def fused_module(monkeypatch, request):
    """Conformance checks build cosFormer with ``--cosformer-algorithm fused`` and chunks of 4 tokens (the
    interpreter takes any power of two), so that the conformance lengths span several chunks (the autocast
    checks, at T = 200, keep the default 64: the interpreter's time grows with the chunks). Yields the
    names of the algorithms the module ran."""
    chunk_size = getattr(request, "param", 4)
    ran = []
    for name in ("fused", "fused_recurrent", "chunked", "recurrent"):
        original = ALGORITHMS[name]

        def spy(*args, _name=name, _original=original, **kwargs):
            ran.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setitem(ALGORITHMS, name, spy)
    original_overrides, original_build = conformance.variant_overrides, conformance.build_case
    monkeypatch.setattr(conformance, "variant_overrides", lambda kind, variant: (
        {"cosformer_algorithm": "fused"} if variant == FUSED_VARIANT else original_overrides(kind, variant)))

    def build_case(kind, variant, placement, cfg):
        module = original_build(kind, variant, placement, cfg)
        module.chunk_size = chunk_size
        assert module.algorithm == "fused"
        return module

    monkeypatch.setattr(conformance, "build_case", build_case)
    yield ran


# (test_causality: implied by the equality with the causal naive reference, and the slowest under the interpreter)
CHECKS = ["test_equals_naive_reference", "test_incremental_parity", "test_incremental_parity_after_beam_reorder_self",
          "test_every_parameter_receives_gradient"]


@pytest.mark.parametrize("check", CHECKS)
def test_conformance_with_the_fused_kernels(check, fused_module):
    run = getattr(conformance, check)
    if "incremental" in check:  # decoding as fairseq's generator runs it (no gradients): the fused step kernel
        with torch.no_grad():
            run("cosformer", FUSED_VARIANT, DECODER_SELF)
        assert "fused_recurrent" in fused_module and "recurrent" not in fused_module
    else:
        run("cosformer", FUSED_VARIANT, DECODER_SELF)
    assert "fused" in fused_module and "chunked" not in fused_module


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_invariance_with_the_fused_kernels(side, fused_module):
    conformance.test_padding_invariance("cosformer", FUSED_VARIANT, DECODER_SELF, side)
    assert "fused" in fused_module and "chunked" not in fused_module


@pytest.mark.parametrize("fused_module", [64], indirect=True, ids=["chunk64"])
def test_autocast_with_the_fused_kernels(fused_module):
    """--amp: forward and backward under bf16 autocast against float32, at T = 200 (past a chunk). (One
    dtype, and no decoding: the interpreter is slow; test_low_precision_inputs_accumulate_in_float32 covers
    both dtypes and the step kernel at the kernel level.)"""
    conformance.test_forward_and_backward_under_autocast("cosformer", FUSED_VARIANT, DECODER_SELF, torch.bfloat16)
    assert "fused" in fused_module and "chunked" not in fused_module


def test_module_gradients_equal_autograd_through_the_naive_reference():
    """As test_cosformer's check of the chunked path: inputs' and parameters' gradients of the module on the
    fused kernels against autograd through eq. 9 term by term, with padding and several chunks."""
    from fairseq_plugins.modules.cosformer import naive_cosformer

    cfg = conformance.model_cfg(max_target_positions=32, cosformer_algorithm="fused")
    torch.manual_seed(0)
    module = build_attention("cosformer", DECODER_SELF, 8, 2, cfg).double()
    module.chunk_size = 4
    x = torch.randn(11, 2, 8, dtype=torch.float64, requires_grad=True)
    pad = torch.zeros(2, 11, dtype=torch.bool)
    pad[1, -3:] = True
    upstream = torch.randn(11, 2, 8, dtype=torch.float64) * (~pad).T.unsqueeze(-1)

    def grads(forward):
        module.zero_grad()
        x.grad = None
        (forward() * upstream).sum().backward()
        return [x.grad.clone()] + [p.grad.clone() for p in module.parameters()]

    fast = grads(lambda: module(x, x, x, key_padding_mask=pad, need_weights=False)[0])
    naive = grads(lambda: naive_cosformer(module, x, x, x, pad))
    for a, b in zip(fast, naive):
        assert torch.allclose(a, b, atol=1e-8, rtol=0), (a - b).abs().max()


def test_the_choice_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(algorithms, "_logged", set())
    with caplog.at_level(logging.INFO, logger=algorithms.__name__):
        for _ in range(3):
            assert algorithms.select("auto", torch.device("cpu"), decoding=False, needs_grad=True) == "chunked"
            assert algorithms.select("fused", torch.device("cpu"), decoding=True, needs_grad=False) == "fused_recurrent"
            assert algorithms.select("fused", torch.device("cpu"), decoding=True, needs_grad=True) == "recurrent"
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3, messages
    assert "chunked (full pass)" in messages[0] and "fused_recurrent (decoding step)" in messages[1]


def test_fused_without_triton_is_a_clear_error(monkeypatch):
    from fairseq_plugins.modules.registry import AttentionConfigError

    monkeypatch.setattr(algorithms, "triton_available", lambda: False)
    monkeypatch.setattr(sys.modules["fairseq_plugins.modules.cosformer.options"], "triton_available", lambda: False)
    with pytest.raises(AttentionConfigError, match="--cosformer-algorithm fused needs the optional dependency triton"):
        build_attention("cosformer", DECODER_SELF, 8, 2, conformance.model_cfg(cosformer_algorithm="fused"))
    with pytest.raises(AttentionConfigError, match="--cosformer-algorithm fused needs Triton and a CUDA device"):
        algorithms.select("fused", torch.device("cpu"), decoding=False, needs_grad=False)
    # auto never needs it
    assert algorithms.select("auto", torch.device("cuda"), decoding=False, needs_grad=True) == "chunked"


def test_auto_trains_in_the_torch_form_and_decodes_in_the_step_kernel_on_cuda(monkeypatch):
    """``auto`` on CUDA with Triton: the chunked torch form for a full pass (the fused kernels were slower
    there on an H200: docs/records/gpu.md), the fused step kernel for decoding; ``fused`` forces both."""
    monkeypatch.setattr(algorithms, "triton_available", lambda: True)
    monkeypatch.setattr(algorithms, "_logged", set())
    cuda = torch.device("cuda")
    assert algorithms.select("auto", cuda, decoding=False, needs_grad=True) == "chunked"
    assert algorithms.select("auto", cuda, decoding=False, needs_grad=False) == "chunked"
    assert algorithms.select("auto", cuda, decoding=True, needs_grad=False) == "fused_recurrent"
    assert algorithms.select("auto", cuda, decoding=True, needs_grad=True) == "recurrent"
    assert algorithms.select("fused", cuda, decoding=False, needs_grad=True) == "fused"
    assert algorithms.select("chunked", cuda, decoding=True, needs_grad=False) == "recurrent"
