"""A new attention kind is one package (issue 13): the toy kind of docs/adding-a-kind.md's
"Adding an attention kind" section, written as it stands there into a temporary
package ``toy_mean_attention``, registers through the public API only and then is
a choice of the per-layer options (loaded with fairseq's ``--user-dir``), passes
the conformance suite, is costed by ``python -m fairseq_plugins.complexity`` and
measured by ``benchmarks/attention_speed.py`` (loaded with
``FAIRSEQ_PLUGINS_KIND_MODULES``), with no file of the package touched.

Everything that registers the toy kind runs in a subprocess (the registry of this
process is left as it was), except ``test_import_kind_modules``, which removes it
again with ``unregister_attention``.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_plugins.modules import ATTENTION_REGISTRY
from fairseq_plugins.modules.registry import KIND_MODULES_ENV, import_kind_modules, unregister_attention

ROOT = Path(__file__).resolve().parents[2]
KIND, PACKAGE = "toy_mean", "toy_mean_attention"


def readme_toy_package_source():
    """The first python block of the guide docs/adding-a-kind.md."""
    guide = (ROOT / "docs" / "adding-a-kind.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", guide, re.S)[0]


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory):
    package = tmp_path_factory.mktemp("user") / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text(readme_toy_package_source(), encoding="utf-8")
    return package


def run(args, toy_package, kind_modules=True, timeout=600):
    """Run ``python args`` from the repository root: ``toy_package``'s folder importable, and with
    ``kind_modules`` the package named in FAIRSEQ_PLUGINS_KIND_MODULES. Returns stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(toy_package.parent), str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop(KIND_MODULES_ENV, None)
    if kind_modules:
        env[KIND_MODULES_ENV] = PACKAGE
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


# Builds, trains a step and beam-searches mixed_transformer models with the toy kind, loading it
# only through fairseq's --user-dir (argv: the toy package's folder, a data folder).
USER_DIR_SCRIPT = r"""
import sys
import torch
from fairseq import options, tasks
from fairseq.sequence_generator import SequenceGenerator

user_dir, data = sys.argv[1:3]
for name in ("dict.src.txt", "dict.tgt.txt"):
    with open(f"{data}/{name}", "w") as f:
        f.writelines(f"w{i} 10\n" for i in range(20))
TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "4",
        "--decoder-attention-heads", "4", "--dropout", "0.0"]

def build(*kinds):
    parser = options.get_training_parser()
    argv = [data, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_transformer_iwslt_de_en",
            "--user-dir", user_dir, *TINY, *kinds]
    args = options.parse_args_and_arch(parser, input_args=argv)
    task = tasks.setup_task(args)
    return task, task.build_model(args)

task, model = build("--encoder-attention-kinds", "toy_mean,softmax", "--decoder-attention-kinds", "softmax,toy_mean",
                    "--cross-attention-kinds", "toy_mean")
from fairseq_plugins.modules import ATTENTION_REGISTRY, AttentionConfigError, PLACEMENTS, build_attention, valid_kinds
from fairseq_plugins.complexity import kind_cost
from fairseq_plugins.modules.costs import AttentionOptions

assert [l.self_attn.kind_name for l in model.encoder.layers] == ["toy_mean", "softmax"]
assert [l.self_attn.kind_name for l in model.decoder.layers] == ["softmax", "toy_mean"]
assert [l.encoder_attn.kind_name for l in model.decoder.layers] == ["toy_mean", "toy_mean"]
for placement in PLACEMENTS:
    assert "toy_mean" in valid_kinds(placement), placement
    module = build_attention("toy_mean", placement, 16, 4)
    counted = kind_cost("toy_mean").parameters(placement, 16, 4, 16, AttentionOptions())
    assert counted == sum(p.numel() for p in module.parameters()), (placement, counted)

# a training step
gen = torch.Generator().manual_seed(0)
src = torch.randint(4, 24, (3, 7), generator=gen)
src[1, :2] = 1  # left padding
prev = torch.randint(4, 24, (3, 6), generator=gen)
prev[:, 0] = 2
model.train()
out, _ = model(src, (src != 1).sum(1), prev)
out.sum().backward()
toy_grads = [p.grad for n, p in model.named_parameters() if "encoder_attn" in n]
assert toy_grads and all(g is not None and torch.isfinite(g).all() for g in toy_grads)

# beam search (incremental decoding, beam reorders, the alignment layer's cross-attention)
model.eval()
generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=8)
hypos = generator.forward({"net_input": {"src_tokens": src, "src_lengths": (src != 1).sum(1)}})
assert len(hypos) == 3 and all(len(h) == 3 for h in hypos)

# the kind's option: an option of the models' command line (fairseq's --help lists it), read into the
# kind's typed options and handed to from_config; bad values are refused naming it
task, model = build("--decoder-attention-kinds", "toy_mean", "--toy-mean-gate-scale", "2.5")
assert [l.self_attn.gate_scale for l in model.decoder.layers] == [2.5, 2.5]
assert [l.encoder_attn.gate_scale for l in model.decoder.layers if l.encoder_attn.kind_name == "toy_mean"] == []
try:
    build("--decoder-attention-kinds", "toy_mean", "--toy-mean-gate-scale", "-1")
except AttentionConfigError as error:
    assert "--toy-mean-gate-scale must be > 0" in str(error), error
else:
    raise AssertionError("a bad option value was accepted")
# the language model (a model with a dataclass, which lists the kinds registered before it) takes it too
with open(f"{data}/dict.txt", "w") as f:
    f.writelines(f"w{i} 10\n" for i in range(20))
parser = options.get_training_parser()
lm_args = options.parse_args_and_arch(parser, input_args=[
    data, "--task", "language_modeling", "--arch", "mixed_transformer_lm_tiny", "--user-dir", user_dir,
    "--tokens-per-sample", "16", "--decoder-attention-kinds", "toy_mean,softmax", "--toy-mean-gate-scale", "0.5"])
lm_task = tasks.setup_task(lm_args)
lm = lm_task.build_model(lm_args)
assert lm.decoder.layers[0].self_attn.gate_scale == 0.5
# fairseq's quantisation noise reaches the toy's linear maps (built with BaseAttention._linear)
task, model = build("--encoder-attention-kinds", "toy_mean", "--quant-noise-pq", "0.1")
assert all(len(getattr(model.encoder.layers[0].self_attn, name)._forward_pre_hooks) == 1 for name in ("q_proj", "v_proj", "out_proj"))

# an unknown kind's error lists the registered kinds, the toy among them
try:
    build("--decoder-attention-kinds", "no_such_kind")
except AttentionConfigError as error:
    assert "toy_mean" in str(error), error
else:
    raise AssertionError("an unknown kind was accepted")
print("user-dir ok")
"""


def test_choice_of_the_per_layer_options_through_user_dir(toy_package, tmp_path):
    out = run(["-c", USER_DIR_SCRIPT, str(toy_package), str(tmp_path)], toy_package, kind_modules=False)
    assert "user-dir ok" in out


def test_passes_the_conformance_suite(toy_package):
    out = run(["-m", "pytest", "-q", "-rA", "tests/modules/test_conformance.py", "-k", KIND], toy_package)
    passed = re.findall(r"^PASSED \S+::(\S+)", out, re.M)
    assert passed and all(KIND in case for case in passed), out[-3000:]
    for placement in ("encoder_self", "decoder_self", "encoder_decoder"):
        assert any(f"[{KIND}-{placement}" in case for case in passed), f"no conformance check ran in {placement}"
    assert any("gate_scale_3" in case for case in passed), "the kind's conformance variant did not run"
    for check in ("test_equals_naive_reference", "test_causality", "test_incremental_parity_after_beam_reorder_cross",
                  "test_padding_invariance", "test_attention_weights_are_distributions", "test_decoding_under_autocast"):
        assert any(case.startswith(check + "[") for case in passed), check
    assert not re.search(r"\b(failed|error|errors|skipped)\b", out.strip().splitlines()[-1]), out[-3000:]


def test_costed_by_the_complexity_tool(toy_package):
    out = run(["-m", "fairseq_plugins.complexity", "--d", "32", "--l", "8", "--heads", "1"], toy_package)
    row = next((line for line in out.splitlines() if line.startswith("| toy mean |")), None)
    assert row is not None, out
    # training multiplications over l = 8 tokens, d = 32: three 32 x 32 maps per token (q, v, out),
    # then the weights times the values (36 visible pairs) and the gate
    assert row.split("|")[2].strip() == f"{3 * 8 * 32 * 32 + 36 * 32 + 8 * 32:,}"


def test_measured_by_the_speed_benchmark(toy_package):
    out = run(["benchmarks/attention_speed.py", "--quick", "--kinds", KIND, "--lengths", "64", "--decode-prefixes", "16",
               "--decode-steps", "2", "--repeats", "2", "--threads", "1"], toy_package)
    assert re.search(rf"^{KIND}\s+T=\s*64\s+median", out, re.M), out[-3000:]
    assert re.search(rf"^decode {KIND}\s+prefix=\s*16\s", out, re.M), out[-3000:]


def test_import_kind_modules(toy_package, monkeypatch):
    """The hook registers the modules it names; unregister_attention undoes it."""
    monkeypatch.syspath_prepend(str(toy_package.parent))
    assert KIND not in ATTENTION_REGISTRY
    try:
        (module,) = import_kind_modules(f" {PACKAGE} ,")
        assert ATTENTION_REGISTRY[KIND].cls is module.ToyMeanAttention
    finally:
        if KIND in ATTENTION_REGISTRY:
            unregister_attention(KIND)
        sys.modules.pop(PACKAGE, None)
    assert KIND not in ATTENTION_REGISTRY
    with pytest.raises(KeyError, match="not registered"):
        unregister_attention(KIND)
