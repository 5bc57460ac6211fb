"""Checkpoints saved by older revisions load and give the same outputs.

The fixtures in tests/fixtures/legacy_checkpoints/ are tiny models of every
attention kind (every placement it supports, per-layer heads and FFN widths,
every kind option off its default, two presets), trained by fairseq-train at
the revision named in FIXTURES.md, with what they computed then: full-pass
log-probabilities, the same step by step with the incremental state, and
beam-search hypotheses. Today's code loads each checkpoint the way
fairseq-generate does (weights-only) and must compute the same.
"""
import importlib.util
import os

import pytest
import torch

FIXTURES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "legacy_checkpoints")
_spec = importlib.util.spec_from_file_location("make_legacy_checkpoints", os.path.join(FIXTURES_DIR, "make_legacy_checkpoints.py"))
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)


def test_every_fixture_is_committed():
    present = sorted(d for d in os.listdir(FIXTURES_DIR) if os.path.isfile(os.path.join(FIXTURES_DIR, d, "checkpoint.pt")))
    assert present == sorted(make.FIXTURES)


def test_the_fixtures_cover_every_registered_kind():
    from fairseq_plugins.modules.registry import valid_kinds

    named = " ".join(" ".join(options) + " " + arch for _, arch, options in make.FIXTURES.values())
    missing = [kind for kind in valid_kinds() if kind not in named]
    assert not missing, f"no legacy checkpoint has a layer of kind {missing}: add a fixture made before changing the kind"


@pytest.mark.parametrize("name", sorted(make.FIXTURES))
def test_legacy_checkpoint_loads_and_gives_the_same_outputs(name):
    folder = os.path.join(FIXTURES_DIR, name)
    expected = torch.load(os.path.join(folder, "expected.pt"))
    model, task = make._load(folder)
    got = make.compute_outputs(model, task, expected["net_input"])
    assert sorted(got) == sorted(k for k in expected if k != "net_input")
    # same code, same inputs: equal up to the rounding of another CPU's kernels
    torch.testing.assert_close(got["full_log_probs"], expected["full_log_probs"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["step_log_probs"], expected["step_log_probs"], rtol=1e-5, atol=1e-5)
    if "beam_tokens" in expected:
        assert torch.equal(got["beam_tokens"], expected["beam_tokens"])
        torch.testing.assert_close(got["beam_scores"], expected["beam_scores"], rtol=1e-5, atol=1e-4)
