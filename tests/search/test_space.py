"""Search spaces (issue 14): the shipped files, reproducible sampling that covers the space and
stays inside it, the size, the extremes, bad files and architectures outside a space refused
naming the field, and the command line."""
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401  (registers kinds and models)
from fairseq_plugins.models.architecture import Architecture, DecoderLayer, EncoderLayer
from fairseq_plugins.search import SearchSpace, SearchSpaceError

ROOT = Path(__file__).resolve().parents[2]
SPACES = ROOT / "search_spaces"

# The mixed-attention paper's Table 1 (Liu et al.), as the issue states it.
TABLE_1 = {
    "head_dim": "sliced", "shared_embed_dim": True,
    "encoder": {"embed_dim": [768, 1024], "layers": [6], "ffn_embed_dim": [2048, 3072, 4096, 5120],
                "attention_heads": [4, 8, 16], "attention_kinds": ["softmax", "cosformer"]},
    "decoder": {"embed_dim": [768, 1024], "layers": [1, 2, 3, 4, 5, 6], "ffn_embed_dim": [2048, 3072, 4096, 5120],
                "attention_heads": [4, 8, 16], "attention_kinds": ["softmax", "cosformer"],
                "cross_attention_heads": [4, 8, 16], "cross_attention_kinds": ["softmax", "cosformer"],
                "encoder_decoder_connect": [1, 2, 3]},
}

TINY = {
    "encoder": {"embed_dim": [8, 16], "layers": [1, 2], "ffn_embed_dim": [4], "attention_heads": [2, 4],
                "attention_kinds": ["softmax"]},
    "decoder": {"embed_dim": [16], "layers": [1, 2], "ffn_embed_dim": [4, 8], "attention_heads": [2],
                "attention_kinds": ["softmax", "cosformer"], "cross_attention_heads": [4],
                "cross_attention_kinds": ["softmax"], "encoder_decoder_connect": [1, 2]},
}
TINY_LM = {"decoder": {"embed_dim": [8], "layers": [1, 3], "ffn_embed_dim": [4, 8], "attention_heads": [1, 2],
                       "attention_kinds": ["softmax", "extractor_me"]}}


def test_the_shipped_wmt_space_is_the_papers_table_1():
    space = SearchSpace.from_file(str(SPACES / "wmt14_en_de.yaml"))
    assert space.to_dict() == TABLE_1


@pytest.mark.parametrize("name", sorted(p.name for p in SPACES.glob("*.yaml")))
def test_every_shipped_space_loads_and_samples(name):
    space = SearchSpace.from_file(str(SPACES / name))
    for architecture in space.samples(20, seed=0) + [space.extreme(True), space.extreme(False)]:
        space.check_contains(architecture)
        assert Architecture.from_json(architecture.to_json()) == architecture


def test_sampling_is_reproducible_and_depends_on_the_seed():
    space = SearchSpace.from_file(str(SPACES / "multi30k_cpu.yaml"))
    first = [a.to_json() for a in space.samples(30, seed=7)]
    assert first == [a.to_json() for a in space.samples(30, seed=7)]
    assert first != [a.to_json() for a in space.samples(30, seed=8)]


def _enumerate(data) -> set:
    """Every architecture of a small space, written out independently of ``SearchSpace``."""
    enc, dec = data.get("encoder"), data["decoder"]
    found = set()
    encoders = [(None, ())]
    if enc:
        layer_choices = [EncoderLayer(k, h, f) for k, h, f in itertools.product(enc["attention_kinds"], enc["attention_heads"], enc["ffn_embed_dim"])]
        encoders = [(w, layers) for w in enc["embed_dim"] for n in enc["layers"] for layers in itertools.product(layer_choices, repeat=n)]
    for encoder_width, encoder_layers in encoders:
        if enc:
            connects = [k for k in dec["encoder_decoder_connect"] if k <= len(encoder_layers)]
            layer_choices = [DecoderLayer(k, h, f, ck, ch, c) for k, h, f, ck, ch, c in itertools.product(
                dec["attention_kinds"], dec["attention_heads"], dec["ffn_embed_dim"], dec["cross_attention_kinds"],
                dec["cross_attention_heads"], connects)]
        else:
            layer_choices = [DecoderLayer(k, h, f) for k, h, f in itertools.product(dec["attention_kinds"], dec["attention_heads"], dec["ffn_embed_dim"])]
        for width in dec["embed_dim"]:
            for n in dec["layers"]:
                for layers in itertools.product(layer_choices, repeat=n):
                    found.add(Architecture(width, tuple(layers), encoder_width, tuple(encoder_layers)))
    return found


@pytest.mark.parametrize("data", [TINY, TINY_LM], ids=["translation", "language model"])
def test_size_and_samples_match_the_enumerated_space(data):
    space = SearchSpace.from_dict(data)
    every = _enumerate(data)
    assert space.size() == len(every)
    sampled = set(space.samples(3000, seed=1))
    assert sampled <= every
    # uniform per-choice sampling reaches every choice of every field (and here most architectures)
    assert len(sampled) > 0.5 * min(len(every), 3000)
    for architecture in every:
        space.check_contains(architecture)
    assert space.extreme(True) in every and space.extreme(False) in every
    extremes = space.extremes_per_kind()
    assert set(extremes) <= every and len(set(extremes)) == len(extremes) == 2 * space.kind_choices
    # together they put every kind of every placement in every sub-layer, at the largest and the smallest size
    for largest in (True, False):
        depth = (max if largest else min)(data["decoder"]["layers"])
        group = [a for a in extremes if len(a.decoder_layers) == depth]
        kinds = [{layer.attention_kind for a in group for layer in a.decoder_layers}]
        choices = [set(data["decoder"]["attention_kinds"])]
        if not space.language_model:
            kinds += [{layer.attention_kind for a in group for layer in a.encoder_layers},
                      {layer.cross_attention_kind for a in group for layer in a.decoder_layers}]
            choices += [set(data["encoder"]["attention_kinds"]), set(data["decoder"]["cross_attention_kinds"])]
        assert kinds == choices


def test_connect_never_exceeds_the_sampled_encoder_depth():
    space = SearchSpace.from_dict(TINY)
    samples = space.samples(500, seed=3)
    assert any(len(a.encoder_layers) == 1 for a in samples) and any(l.encoder_decoder_connect == 2 for a in samples for l in a.decoder_layers)
    assert all(l.encoder_decoder_connect <= len(a.encoder_layers) for a in samples for l in a.decoder_layers)


def test_shared_embed_dim_samples_one_width():
    data = json.loads(json.dumps(TINY))
    data["encoder"]["embed_dim"] = data["decoder"]["embed_dim"] = [8, 16]
    data["encoder"]["attention_heads"] = data["decoder"]["cross_attention_heads"] = [2]
    space = SearchSpace.from_dict({**data, "shared_embed_dim": True})
    widths = {(a.encoder_embed_dim, a.decoder_embed_dim) for a in space.samples(200, seed=0)}
    assert widths == {(8, 8), (16, 16)}
    assert space.size() * 2 == SearchSpace.from_dict(data).size()


def _broken(path, value):
    data = json.loads(json.dumps(TINY))
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    ("decoder.ffn_embed_dims", [4], "decoder.ffn_embed_dims: unknown field (fields of decoder: embed_dim, layers, "
     "ffn_embed_dim, attention_heads, attention_kinds, cross_attention_heads, cross_attention_kinds, encoder_decoder_connect)"),
    ("heads", "sliced", "heads: unknown field (fields: head_dim, shared_embed_dim, encoder, decoder)"),
    ("decoder.ffn_embed_dim", KeyError, "decoder.ffn_embed_dim: missing"),
    ("encoder.attention_kinds", ["softmax", "linear"], "encoder.attention_kinds: 'linear' is an unknown attention kind "
     "(valid for encoder_self: "),
    ("encoder.attention_kinds", ["extractor_he"], "encoder.attention_kinds: 'extractor_he' is an attention kind that "
     "cannot be used for encoder_self"),
    ("decoder.cross_attention_kinds", ["bet"], "decoder.cross_attention_kinds: 'bet' is an attention kind that cannot "
     "be used for encoder_decoder"),
    ("encoder.attention_heads", [2, 3], "encoder.attention_heads: 3 heads do not divide encoder.embed_dim 8"),
    ("decoder.cross_attention_heads", [32], "decoder.cross_attention_heads: 32 heads do not divide decoder.embed_dim 16"),
    ("decoder.layers", [], "decoder.layers: empty: give at least one choice"),
    ("decoder.layers", [1, 1], "decoder.layers: [1, 1] holds a choice twice"),
    ("encoder.layers", [0], "encoder.layers: 0 is not a positive integer"),
    ("decoder.embed_dim", ["16"], "decoder.embed_dim: '16' is not a positive integer"),
    ("decoder.encoder_decoder_connect", [3], "decoder.encoder_decoder_connect: the smallest choice 3 exceeds the "
     "smallest encoder.layers 1"),
    ("head_dim", "per-head", "head_dim: 'per-head' is not one of sliced, fixed"),
])
def test_a_bad_space_is_refused_naming_the_field(path, value, message):
    with pytest.raises(SearchSpaceError) as error:
        SearchSpace.from_dict(_broken(path, value), "space.yaml")
    assert str(error.value).startswith(f"space.yaml: {message}"), str(error.value)


def test_a_language_model_space_has_no_cross_attention_fields():
    data = json.loads(json.dumps(TINY_LM))
    data["decoder"]["encoder_decoder_connect"] = [1]
    with pytest.raises(SearchSpaceError, match="decoder.encoder_decoder_connect: unknown field"):
        SearchSpace.from_dict(data)


def test_a_file_that_is_not_yaml_or_missing_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("decoder: [unclosed\n")
    with pytest.raises(SearchSpaceError, match=f"{bad}: not YAML"):
        SearchSpace.from_file(str(bad))
    with pytest.raises(SearchSpaceError, match=f"{tmp_path / 'none.yaml'}: the search space: cannot read it"):
        SearchSpace.from_file(str(tmp_path / "none.yaml"))


@pytest.mark.parametrize("change, message", [
    (lambda a: a.__class__(a.decoder_embed_dim, a.decoder_layers, 12, a.encoder_layers),
     "encoder.embed_dim: 12 is outside the space (allowed: 8, 16)"),
    (lambda a: a.__class__(a.decoder_embed_dim, a.decoder_layers[:1] + (DecoderLayer("softmax", 2, 6, "softmax", 4, 1),),
                           a.encoder_embed_dim, a.encoder_layers),
     "decoder.ffn_embed_dim (layer 1): 6 is outside the space (allowed: 4, 8)"),
    (lambda a: a.__class__(a.decoder_embed_dim, (DecoderLayer("softmax", 2, 4, "softmax", 4, 2),),
                           a.encoder_embed_dim, a.encoder_layers[:1]),
     "decoder.encoder_decoder_connect (layer 0), with 1 encoder layers: 2 is outside the space (allowed: 1)"),
])
def test_an_architecture_outside_the_space_is_refused_naming_the_field(change, message):
    space = SearchSpace.from_dict(TINY)
    base = Architecture(16, (DecoderLayer("softmax", 2, 4, "softmax", 4, 1),) * 2, 16, (EncoderLayer("softmax", 2, 4),) * 2)
    space.check_contains(base)
    with pytest.raises(SearchSpaceError) as error:
        space.check_contains(change(base), "a.json")
    assert str(error.value) == f"a.json: {message}"


def run_search(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_plugins.search", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def test_sample_prints_architectures_a_model_is_built_from(tmp_path):
    space_file = SPACES / "multi30k_cpu.yaml"
    out = run_search("sample", "--space", str(space_file), "-n", "3", "--seed", "5")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3
    assert [Architecture.from_json(line) for line in lines] == SearchSpace.from_file(str(space_file)).samples(3, seed=5)
    # --architecture-file builds exactly the sampled architecture
    (tmp_path / "arch.json").write_text(lines[0])
    for name in ("dict.src.txt", "dict.tgt.txt"):
        (tmp_path / name).write_text("".join(f"w{i} 10\n" for i in range(12)))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[
        str(tmp_path), "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_transformer_iwslt_de_en",
        "--architecture-file", str(tmp_path / "arch.json")])
    model = tasks.setup_task(args).build_model(args)
    assert model.architecture == Architecture.from_json(lines[0])


def test_the_space_command_and_errors_of_the_command_line(tmp_path):
    out = run_search("space", "--space", str(SPACES / "multi30k_cpu.yaml"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["architectures"] == SearchSpace.from_file(str(SPACES / "multi30k_cpu.yaml")).size()
    assert Architecture.from_dict(report["largest"]).encoder_embed_dim == 128
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_broken("decoder.ffn_embed_dims", [4])))
    out = run_search("sample", "--space", str(bad))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [f"error: {bad}: decoder.ffn_embed_dims: unknown field (fields of decoder: "
                                               "embed_dim, layers, ffn_embed_dim, attention_heads, attention_kinds, "
                                               "cross_attention_heads, cross_attention_kinds, encoder_decoder_connect)"]


def test_random_module_state_is_not_touched():
    state = random.getstate()
    SearchSpace.from_dict(TINY).samples(10, seed=2)
    assert random.getstate() == state


def test_head_dim_fixed_gives_every_head_the_sides_largest_width_over_its_most_heads():
    """TINY with head_dim: fixed: encoder heads of 16 / 4 = 4 dimensions, decoder heads of 16 / 4 = 4 (its
    cross-attention has 4 heads), whatever the sampled width and heads; heads need not divide a width."""
    data = json.loads(json.dumps(TINY))
    data["head_dim"] = "fixed"
    data["encoder"]["attention_heads"] = [2, 3, 4]  # 3 heads do not divide 8 or 16: fine with a fixed head dimension
    space = SearchSpace.from_dict(data, "fixed.yaml")
    for architecture in space.samples(30, seed=1) + [space.extreme(True), space.extreme(False)]:
        space.check_contains(architecture)
        assert {layer.attention_head_dim for layer in architecture.encoder_layers + architecture.decoder_layers} == {4}
        assert {layer.cross_attention_head_dim for layer in architecture.decoder_layers} == {4}
    assert space.samples(30, seed=1) != SearchSpace.from_dict(TINY).samples(30, seed=1)
    # written as the number, so that a space derived from it (a pruned one) keeps the dimension
    assert space.to_dict()["head_dim"] == 4 and SearchSpace.from_dict(space.to_dict()) == space
    assert SearchSpace.from_dict({**data, "head_dim": 6}).extreme(False).decoder_layers[0].attention_head_dim == 6
    sliced = SearchSpace.from_dict(TINY).samples(3, seed=1)[0]
    with pytest.raises(SearchSpaceError, match=r"head_dim \(encoder layer 0's attention_head_dim, head_dim: fixed\): None is "
                                               r"outside the space \(allowed: 4\)"):
        space.check_contains(sliced)
    # a sliced space holds no architecture with heads of their own dimension
    with pytest.raises(SearchSpaceError, match=r"head_dim \(encoder layer 0's attention_head_dim, head_dim: sliced\): 4 is "
                                               r"outside the space \(allowed: None\)"):
        SearchSpace.from_dict(TINY).check_contains(space.extreme(True))


def test_head_dim_fixed_refuses_a_kind_without_a_head_dimension_of_its_own():
    data = json.loads(json.dumps(TINY_LM))
    data["head_dim"] = "fixed"
    with pytest.raises(SearchSpaceError) as error:
        SearchSpace.from_dict(data, "fixed.yaml")
    assert str(error.value).startswith("fixed.yaml: decoder.attention_kinds: attention kind 'extractor_me' takes no head "
                                       "dimension of its own, which head_dim 4 gives every head (kinds that do: ")
    assert str(error.value).endswith("use head_dim: sliced or leave 'extractor_me' out")


def test_the_real_run_space_brackets_the_hand_written_layouts():
    """multi30k_bracket.yaml holds bench-quality's 3 + 3 layouts of width 128 (FFN 512, 4 heads) with
    choices below and above each of their sizes, so that a search can trade kinds for width or depth."""
    space = SearchSpace.from_file(str(SPACES / "multi30k_bracket.yaml"))
    data = yaml.safe_load((SPACES / "multi30k_bracket.yaml").read_text())
    hand_written = {"embed_dim": 128, "ffn_embed_dim": 512, "attention_heads": 4}
    for side, layers in (("encoder", 3), ("decoder", 3)):
        for key, value in {**hand_written, "layers": layers}.items():
            choices = data[side][key]
            assert min(choices) < value < max(choices), (side, key, choices)
    for encoder_kinds in (("softmax",) * 3, ("cosformer",) * 3, ("softmax", "cosformer", "softmax")):
        space.check_contains(Architecture(
            encoder_embed_dim=128, encoder_layers=tuple(EncoderLayer(kind, 4, 512) for kind in encoder_kinds),
            decoder_embed_dim=128, decoder_layers=tuple(DecoderLayer("softmax", 4, 512, "softmax", 4, 1) for _ in range(3))))
