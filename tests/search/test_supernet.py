"""The weight-sharing supernet (issue 14): a sampled sub-network inside the supernet computes exactly what
its standalone model computes (float64, left padding, every kind and placement, connect > 1), decodes step
by step as it computes in full, trains only the slices it uses, and is sampled by seed and update alone;
then the real CLIs: fairseq-train on the supernet, ``evaluate`` and ``export``, fairseq-generate on the
exported checkpoint."""
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.sequence_generator import SequenceGenerator

import fairseq_plugins  # noqa: F401
from fairseq_plugins.cli.pipeline import PLUGIN_DIR, fairseq_command, generate, run
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task
from fairseq_plugins.models.architecture import Architecture, DecoderLayer, EncoderLayer
from fairseq_plugins.modules import AttentionConfigError

ROOT = Path(__file__).resolve().parents[2]
SPACE = """
shared_embed_dim: true
encoder:
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 12]
  attention_heads: [2, 4]
  attention_kinds: [softmax, cosformer]
decoder:
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 12]
  attention_heads: [2, 4]
  attention_kinds: [softmax, cosformer, bet, extractor_we]
  cross_attention_heads: [2, 4]
  cross_attention_kinds: [softmax, cosformer]
  encoder_decoder_connect: [1, 2]
"""


# head_dim: fixed: every head has 16 / 4 = 4 dimensions, so a layer with 4 heads of width 8 attends in 16
# (kinds with a head dimension of their own only: no Extractor)
FIXED_SPACE = SPACE.replace("shared_embed_dim: true", "head_dim: fixed\nshared_embed_dim: true").replace(
    "attention_kinds: [softmax, cosformer, bet, extractor_we]", "attention_kinds: [softmax, cosformer, bet]")


@pytest.fixture(scope="module")
def space_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(SPACE)
    return str(path)


@pytest.fixture(scope="module")
def fixed_space_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("space") / "fixed.yaml"
    path.write_text(FIXED_SPACE)
    return str(path)


@pytest.fixture(params=["sliced", "fixed"])
def any_space_file(request):
    """Both ways heads divide a width (search space's head_dim)."""
    return request.getfixturevalue("space_file" if request.param == "sliced" else "fixed_space_file")


def build_supernet(data_dir, space_file, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[
        data_dir, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_supertransformer",
        "--search-space", space_file, "--share-all-embeddings", "--dropout", "0", "--max-source-positions", "32",
        "--max-target-positions", "32", *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task, task.build_model(args)


def batch(generator_seed=0):
    gen = torch.Generator().manual_seed(generator_seed)
    src = torch.randint(4, 12, (3, 6), generator=gen)
    src[1, :2] = 1  # left padding
    prev = torch.randint(4, 12, (3, 5), generator=gen)
    prev[:, 0] = 2
    return src, (src != 1).sum(1), prev


def architectures(model, n=8):
    return [model.space.extreme(True), model.space.extreme(False)] + [model.sample(update) for update in range(n)]


def test_a_sub_network_inside_the_supernet_computes_its_standalone_model(data_dir, any_space_file):
    _, model = build_supernet(data_dir, any_space_file)
    model = model.double().eval()
    src, lengths, prev = batch()
    seen_kinds, seen_connect = set(), set()
    for architecture in architectures(model):
        model.set_active(architecture)
        inside, _ = model(src, lengths, prev)
        standalone = model.subnetwork(architecture).double().eval()
        outside, _ = standalone(src, lengths, prev)
        assert torch.equal(inside, outside), architecture
        seen_kinds |= {layer.attention_kind for layer in architecture.decoder_layers}
        seen_connect |= {layer.encoder_decoder_connect for layer in architecture.decoder_layers}
        if model.space.head_dim == "fixed":  # every head keeps 4 dimensions, whatever the width and heads
            for layer in architecture.encoder_layers + architecture.decoder_layers:
                assert layer.attention_head_dim == 4
            attention = standalone.decoder.layers[0].encoder_attn
            assert attention.q_proj.weight.shape == (4 * architecture.decoder_layers[0].cross_attention_heads,
                                                     architecture.decoder_embed_dim)
    assert {"bet", "cosformer"} <= seen_kinds and seen_connect == {1, 2}
    assert "extractor_we" in seen_kinds or model.space.head_dim == "fixed"


def test_the_standalone_sub_network_decodes_step_by_step_as_in_full(data_dir, any_space_file):
    _, model = build_supernet(data_dir, any_space_file)
    model = model.double().eval()
    src, lengths, prev = batch(1)
    for architecture in architectures(model, 6):
        sub = model.subnetwork(architecture).double().eval()
        encoder_out = sub.encoder(src, src_lengths=lengths)
        full, _ = sub.decoder(prev, encoder_out=encoder_out)
        state, steps = {}, []
        for t in range(prev.size(1)):
            out, _ = sub.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            steps.append(out)
        # (float64, but fairseq's MultiheadAttention takes its softmax in float32 when decoding: utils.softmax)
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-6, atol=1e-6)


def test_a_training_step_reaches_exactly_the_slices_the_sub_network_uses(data_dir, any_space_file):
    _, model = build_supernet(data_dir, any_space_file)
    model.train()
    architecture = model.sample(3)
    assert architecture != model.space.extreme(True)
    model.set_active(architecture)
    before = {key: value.detach().clone() for key, value in model.weights.items()}
    src, lengths, prev = batch()
    out, _ = model(src, lengths, prev)
    out.float().pow(2).mean().backward()
    template, keys = model._template(architecture)
    used = {}
    for name, parameter in template.named_parameters(remove_duplicate=False):
        key = keys[name].replace(".", "/")
        used[key] = model.container_index(key, parameter.shape)
    assert len(used) < len(model.weights)  # the sub-network leaves containers unused
    for key, container in model.weights.items():
        if key not in used:
            assert container.grad is None, key
            continue
        inside = torch.zeros_like(container, dtype=torch.bool)
        inside[used[key]] = True
        assert container.grad[inside].abs().sum() > 0, f"{key}: no gradient in the used slice"
        assert container.grad[~inside].abs().sum() == 0, f"{key}: gradient outside the used slice"
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for key, container in model.weights.items():
        changed = container.detach() != before[key]
        if key not in used:
            assert not changed.any(), key
        else:
            outside = torch.ones_like(changed)
            outside[used[key]] = False
            assert not changed[outside].any(), key


@pytest.mark.parametrize("score_weights", ["per-head", "shared"])
def test_bets_score_weight_parts_share_with_the_same_part(data_dir, space_file, score_weights):
    """BET's w = [w_H ; w_K] (per head H x 2 d_h, shared 2 C): a narrower sub-network takes the leading slice of
    the hidden part and of the key part, not the first 2 d_h (2 C) values, which would make part of the wider
    network's w_H its w_K."""
    _, model = build_supernet(data_dir, space_file, "--bet-score-weights", score_weights)
    largest = model.space.extreme(True)
    wide = dataclasses.replace(largest, decoder_layers=tuple(  # width 16, 2 heads of 8 dimensions
        dataclasses.replace(layer, attention_kind="bet", attention_heads=2) for layer in largest.decoder_layers))
    narrow = dataclasses.replace(wide, encoder_embed_dim=8, decoder_embed_dim=8)  # width 8, 2 heads of 4
    w_wide = model.subnetwork(wide).decoder.layers[0].self_attn.score_weight.detach()
    w_narrow = model.subnetwork(narrow).decoder.layers[0].self_attn.score_weight.detach()
    if score_weights == "per-head":
        assert w_wide.shape == (2, 16) and w_narrow.shape == (2, 8)
        torch.testing.assert_close(w_narrow.view(2, 2, 4), w_wide.view(2, 2, 8)[:, :, :4], rtol=0, atol=0)
    else:
        assert w_wide.shape == (32,) and w_narrow.shape == (16,)
        torch.testing.assert_close(w_narrow.view(2, 8), w_wide.view(2, 16)[:, :8], rtol=0, atol=0)


def test_cached_templates_follow_the_supernet_to_a_dtype_and_a_device(data_dir, space_file):
    """The cached sub-network templates are no modules of the supernet, yet their buffers (fairseq's sinusoidal
    positions, version counters) move with ``.to()``, and a template built later starts where the weights are:
    a supernet moved to a GPU would otherwise run CUDA weights against CPU positions."""
    _, model = build_supernet(data_dir, space_file)
    model.eval()

    def template_buffers():
        return [(buffer, architecture) for architecture, (template, _) in model._templates.items() for buffer in template.buffers()]

    def uncached():
        return next(a for a in (model.sample(update) for update in range(100)) if a not in model._templates)

    assert template_buffers() and {b.dtype for b, _ in template_buffers() if b.is_floating_point()} == {torch.float32}
    model.to(torch.float64)
    assert {b.dtype for b, _ in template_buffers() if b.is_floating_point()} == {torch.float64}
    model.set_active(uncached())
    src, lengths, prev = batch()
    assert model(src, lengths, prev)[0].dtype == torch.float64
    new = [b for b, a in template_buffers() if a == model.active]
    assert new and all(b.dtype == torch.float64 for b in new if b.is_floating_point())

    model.to("meta")
    assert {w.device.type for w in model.weights.values()} == {"meta"}
    assert {b.device.type for b, _ in template_buffers()} == {"meta"}
    later = uncached()
    template, _ = model._template(later)
    assert {b.device.type for b in template.buffers()} == {"meta"}


def test_the_sample_depends_only_on_the_seed_and_the_update(data_dir, space_file):
    _, first = build_supernet(data_dir, space_file, "--seed", "3")
    _, again = build_supernet(data_dir, space_file, "--seed", "3")
    _, other = build_supernet(data_dir, space_file, "--seed", "4")
    samples = [first.sample(u) for u in range(20)]
    assert samples == [again.sample(u) for u in range(20)]
    assert samples != [other.sample(u) for u in range(20)]
    first.set_num_updates(7)
    assert first.active == samples[7]
    first.eval()  # validation: the largest
    assert first.active == first.space.extreme(True)


def test_projections_are_shared_between_kinds_unless_separated(data_dir, space_file):
    _, shared = build_supernet(data_dir, space_file)
    _, separate = build_supernet(data_dir, space_file, "--supernet-separate-kind-weights")
    assert "encoder/layers/0/self_attn/q_proj/weight" in shared.weights
    assert not any(key.startswith("encoder/layers/0/self_attn@") for key in shared.weights)
    # BET and the Extractors keep their own parameters either way
    assert "decoder/layers/0/self_attn@bet/score_weight" in shared.weights
    assert {"encoder/layers/0/self_attn@softmax/q_proj/weight", "encoder/layers/0/self_attn@cosformer/q_proj/weight"} <= set(separate.weights)
    assert sum(p.numel() for p in separate.parameters()) > sum(p.numel() for p in shared.parameters())


def test_positions_default_to_fairseqs_as_for_the_transformer(data_dir, space_file):
    # (a supernet built without --max-*-positions had none, and fairseq-train failed reading them)
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
        data_dir, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_supertransformer",
        "--search-space", space_file, "--share-all-embeddings"])
    model = tasks.setup_task(args).build_model(args)
    assert model.max_positions() == (1024, 1024) and model.max_decoder_positions() == 1024
    assert model.subnetwork().max_positions() == (1024, 1024)


def test_bad_input_is_refused_naming_the_option(data_dir, space_file, tmp_path):
    with pytest.raises(AttentionConfigError, match="--search-space: mixed_supertransformer needs a search space file"):
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, input_args=[data_dir, "--task", "translation", "-s", "src", "-t", "tgt",
                                                               "--arch", "mixed_supertransformer"])
        tasks.setup_task(args).build_model(args)
    unshared = tmp_path / "unshared.yaml"
    unshared.write_text(SPACE.replace("shared_embed_dim: true", "shared_embed_dim: false"))
    with pytest.raises(AttentionConfigError, match="--share-all-embeddings needs one width"):
        build_supernet(data_dir, str(unshared))
    _, model = build_supernet(data_dir, space_file)
    outside = Architecture(16, (DecoderLayer("softmax", 2, 10, "softmax", 2, 1),), 16, (EncoderLayer("softmax", 2, 8),))
    with pytest.raises(AttentionConfigError, match=r"decoder.ffn_embed_dim \(layer 0\): 10 is outside the space \(allowed: 8, 12\)"):
        model.set_active(outside)


# ------------------------------------------------------------------ the CLIs ---
@pytest.fixture(scope="module")
def trained(tmp_path_factory, space_file):
    root = tmp_path_factory.mktemp("supernet")
    write_translation_task(str(root / "raw"), splits={"train": 300, "valid": 30, "test": 20})
    data = binarize_translation(str(root / "raw"), str(root / "bin"))
    # (the sandwich rule of --task supernet_translation: the largest, the smallest and one sampled per update)
    log = run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--task", "supernet_translation", "--supernet-sampling", "sandwich",
        "--supernet-sandwich-random", "1", "--arch", "mixed_supertransformer", "--search-space", space_file,
        "--share-all-embeddings", "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "20", "--max-tokens", "1000", "--max-update", "20", "--cpu", "--save-dir", str(root / "ck"),
        "--no-epoch-checkpoints", "--num-workers", "0", "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", "0.1", "--max-source-positions", "32", "--max-target-positions", "32", "--seed", "2"])
    return root, data, str(root / "ck" / "checkpoint_last.pt"), log


def search(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_plugins.search", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def test_evaluate_and_export_a_trained_supernet(trained, tmp_path):
    root, data, checkpoint, log = trained
    # fairseq's validation logs the largest and the smallest architecture
    valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert valid and all(re.search(r"\| loss [0-9.]+ .*\| smallest_loss [0-9.]+", line) for line in valid), log[-3000:]
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    architecture = next(a for a in (model.sample(u) for u in range(100))
                        if any(l.attention_kind == "bet" for l in a.decoder_layers) and len(a.encoder_layers) == 2)
    (tmp_path / "a.json").write_text(architecture.to_json())

    evaluated = search("evaluate", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert Architecture.from_dict(result["architecture"]) == architecture and result["tokens"] > 0 and result["loss"] > 0

    exported = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--output", str(tmp_path / "sub.pt"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    (sub,), _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "sub.pt")])
    count = int(re.search(r"([\d,]+) parameters", exported.stdout).group(1).replace(",", ""))
    assert count == sum(p.numel() for p in sub.parameters()) and sub.architecture == architecture
    # the counted cost: the registry's counts give the exported model's real parameter count
    counted = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--source-length", "7")
    assert counted.returncode == 0, counted.stderr[-3000:]
    counted = json.loads(counted.stdout.strip().splitlines()[-1])
    assert counted["parameters"] == count and counted["forward_flops"] > 0 and counted["source_length"] == 7
    assert type(sub).__name__ == "MixedTransformerModel"

    # the exported model computes what the sub-network computes inside the supernet, and beam-searches alike
    model.eval().set_active(architecture)
    src, lengths, prev = batch()
    inside, _ = model.double()(src, lengths, prev)
    outside, _ = sub.double().eval()(src, lengths, prev)
    assert torch.equal(inside, outside)
    task = tasks.setup_task(checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"]["task"])
    hypotheses = []
    for candidate in (model.subnetwork(architecture).double().eval(), sub):
        generator = SequenceGenerator([candidate], task.target_dictionary, beam_size=3, max_len_b=10)
        hypotheses.append([[h["tokens"].tolist() for h in sentence] for sentence in
                           generator.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})])
    assert hypotheses[0] == hypotheses[1]

    # fairseq-generate reads it like any checkpoint
    decoded = generate(data, str(tmp_path / "sub.pt"), beam=3)
    assert len(decoded.hypotheses) == 20
    # the hub loads it and translates as fairseq-generate does (the same beam, the same words)
    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    hub = MixedTransformerModel.from_pretrained(str(tmp_path), checkpoint_file="sub.pt", data_name_or_path=data,
                                                user_dir=PLUGIN_DIR, beam=3)
    source_line = dict(re.findall(r"^S-(\d+)\t(.*)$", decoded.log, flags=re.M))["0"]
    hypothesis = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", decoded.log, flags=re.M))["0"]
    assert hub.translate(source_line) == hypothesis
    # fairseq-train --finetune-from-model starts from its weights (the architecture file builds the same model)
    finetune = run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_transformer", "--architecture-file", str(tmp_path / "a.json"),
        "--share-all-embeddings", "--finetune-from-model", str(tmp_path / "sub.pt"), "--optimizer", "adam", "--lr", "1e-3",
        "--max-tokens", "1000", "--max-update", "1", "--cpu", "--save-dir", str(tmp_path / "ft"), "--no-epoch-checkpoints",
        "--num-workers", "0", "--max-source-positions", "32", "--max-target-positions", "32", "--disable-validation"])
    assert "loading pretrained model from" in finetune and "num_updates 1" in finetune.replace("=", " "), finetune[-2000:]


def test_evaluate_several_architectures_in_one_process_as_each_alone(trained, tmp_path):
    """Repeated --architecture: one load of the supernet and the subset, one JSON line per architecture in the
    order given, each what evaluating it alone prints (loss and --bleu), also when one comes back after another
    (nothing of one architecture stays active for the next)."""
    root, data, checkpoint, _ = trained
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    first = model.sample(1)
    second = next(a for a in (model.sample(u) for u in range(2, 100)) if a != first)
    paths = []
    for name, architecture in (("first", first), ("second", second)):
        (tmp_path / f"{name}.json").write_text(architecture.to_json())
        paths.append(str(tmp_path / f"{name}.json"))
    options = ["--subset", "test", "--bleu", "--beam", "2", "--max-len-b", "8"]

    def results(*architectures):
        evaluated = search("evaluate", "--checkpoint", checkpoint, *[x for p in architectures for x in ("--architecture", p)],
                           *options)
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        return [json.loads(line) for line in evaluated.stdout.splitlines() if line.startswith("{")]

    alone = [results(path)[0] for path in paths]
    together = results(paths[0], paths[1], paths[0])
    assert [Architecture.from_dict(r["architecture"]) for r in together] == [first, second, first]
    assert together == alone + alone[:1]
    assert alone[0]["loss"] != alone[1]["loss"] and all(r["sentences"] == 20 for r in together)


def test_evaluate_bleu_scores_the_inherited_sub_network_as_fairseq_generate_scores_its_export(trained, tmp_path):
    root, data, checkpoint, _ = trained
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    architecture = next(a for a in (model.sample(u) for u in range(100))
                        if any(l.attention_kind == "cosformer" for l in a.decoder_layers) and len(a.decoder_layers) == 2)
    (tmp_path / "a.json").write_text(architecture.to_json())
    evaluated = search("evaluate", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--subset", "test",
                       "--bleu", "--beam", "3", "--max-len-b", "12", "--hypotheses", str(tmp_path / "hyp.txt"))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["sentences"] == 20 and result["beam"] == 3 and result["loss"] > 0
    assert Architecture.from_dict(result["architecture"]) == architecture
    exported = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--output", str(tmp_path / "sub.pt"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    generated = generate(data, str(tmp_path / "sub.pt"), beam=3, extra=["--scoring", "sacrebleu", "--max-len-b", "12"])
    # the same hypotheses, sentence by sentence (a 20-update supernet translates poorly: BLEU alone could agree at 0)
    by_id = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", generated.log, flags=re.M))
    hypotheses = (tmp_path / "hyp.txt").read_text().split("\n")[:-1]
    assert hypotheses == [by_id[str(i)] for i in range(20)] and len(set(hypotheses)) > 1
    # and the same score (fairseq prints sacreBLEU with 2 decimals)
    assert abs(result["bleu"] - generated.bleu) < 0.006, (result, generated.log[-2000:])

    bad = search("evaluate", "--checkpoint", checkpoint, "--bleu", "--beam", "0")
    assert bad.returncode == 2 and "--beam: expected at least 1" in bad.stderr


def test_a_fixed_head_dim_supernet_trains_and_exports_what_it_computes(trained, fixed_space_file, tmp_path):
    """head_dim: fixed through the CLIs: fairseq-train on the supernet, export of a sub-network whose heads
    keep 4 dimensions in a layer of another width, loaded as any checkpoint."""
    root, data, _, _ = trained
    run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--task", "supernet_translation", "--arch", "mixed_supertransformer",
        "--search-space", fixed_space_file, "--share-all-embeddings", "--optimizer", "adam", "--lr", "3e-3",
        "--max-tokens", "1000", "--max-update", "3", "--cpu", "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints",
        "--num-workers", "0", "--max-source-positions", "32", "--max-target-positions", "32", "--disable-validation"])
    checkpoint = str(tmp_path / "ck" / "checkpoint_last.pt")
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    architecture = next(a for a in (model.sample(u) for u in range(100))
                        if a.decoder_embed_dim == 8 and a.decoder_layers[0].attention_heads == 4)  # attends in 16
    (tmp_path / "a.json").write_text(architecture.to_json())
    exported = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--output", str(tmp_path / "sub.pt"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    (sub,), _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "sub.pt")])
    assert sub.architecture == architecture and sub.decoder.layers[0].self_attn.q_proj.weight.shape == (16, 8)
    counted = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"))
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert json.loads(counted.stdout.strip().splitlines()[-1])["parameters"] == sum(p.numel() for p in sub.parameters())
    model.eval().set_active(architecture)
    src, lengths, prev = batch()
    inside, _ = model.double()(src, lengths, prev)
    outside, _ = sub.double().eval()(src, lengths, prev)
    assert torch.equal(inside, outside)


def test_cost_measures_the_latency_of_a_fixed_number_of_decoder_steps(trained, tmp_path):
    root, data, checkpoint, _ = trained
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    (tmp_path / "a.json").write_text(model.sample(3).to_json())
    counted = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--latency",
                     "--source-length", "7", "--target-length", "9", "--beam", "2", "--warmup", "1", "--repeats", "5")
    assert counted.returncode == 0, counted.stderr[-3000:]
    latency = json.loads(counted.stdout.strip().splitlines()[-1])["latency"]
    # the encoder once, then exactly 9 steps and the forced end of sentence, whatever the model would translate
    assert latency["decoder_calls"] == 10 and latency["beam"] == 2 and latency["threads"] == 1
    assert 0 < latency["min_ms"] <= latency["latency_ms"] <= latency["max_ms"] and latency["stdev_ms"] >= 0
    # the default: 3 measuring processes, one after another, of 2 of the 6 rounds each
    assert latency["processes"] == 3 and len(set(latency["pids"])) == 3 and len(latency["ratios"]) == 6
    assert [p["rounds"] for p in latency["per_process"]] == [2, 2, 2]

    for option, value, message in (("--target-length", "40", "--target-length: 40 is more than the model's 31 target positions"),
                                   ("--trim", "0.5", "--trim: expected a fraction in [0, 0.5), got 0.5"),
                                   ("--repeats", "0", "--repeats: expected at least 1, got 0"),
                                   ("--processes", "0", "--processes: expected at least 1, got 0")):
        bad = search("cost", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--latency", option, value)
        assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == f"error: {message}", bad.stderr[-2000:]


def test_the_trimmed_mean_leaves_out_the_extremes():
    from fairseq_plugins.search.latency import trimmed

    assert trimmed([5.0, 1.0, 3.0, 100.0, 2.0, 4.0, 0.5, 3.5, 2.5, 1.5], 0.1) == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0]
    assert trimmed([2.0, 1.0], 0.1) == [1.0, 2.0]


def test_export_errors_name_the_input(trained, tmp_path):
    root, data, checkpoint, _ = trained
    (tmp_path / "outside.json").write_text(Architecture(
        16, (DecoderLayer("softmax", 2, 10, "softmax", 2, 1),), 16, (EncoderLayer("softmax", 2, 8),)).to_json())
    out = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "outside.json"), "--output", str(tmp_path / "x.pt"))
    assert out.returncode == 2 and not (tmp_path / "x.pt").exists()
    assert out.stderr.strip().splitlines()[-1] == (f"error: --architecture {tmp_path / 'outside.json'}: decoder.ffn_embed_dim "
                                                   "(layer 0): 10 is outside the space (allowed: 8, 12)")
    (tmp_path / "deep.json").write_text(json.dumps({
        "encoder_embed_dim": 16, "encoder_layers": [{"attention_kind": "softmax", "attention_heads": 2, "ffn_embed_dim": 8}],
        "decoder_embed_dim": 16, "decoder_layers": [{"attention_kind": "softmax", "attention_heads": 2, "ffn_embed_dim": 8,
                                                     "cross_attention_kind": "softmax", "cross_attention_heads": 2,
                                                     "encoder_decoder_connect": 2}]}))
    out = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "deep.json"), "--output", str(tmp_path / "x.pt"))
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        f"error: --architecture {tmp_path / 'deep.json'}: --encoder-decoder-connect (decoder layer 0): 2 encoder layers, "
        "but the encoder has 1; give 1 to 1 (the last k encoder layers)"), out.stderr[-2000:]
    # a subset the data does not hold (issue 35: a traceback before)
    out = search("evaluate", "--checkpoint", checkpoint, "--subset", "valid7")
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        f"error: --subset valid7: no such subset in the data folder {data} (it holds: test, train, valid)"), out.stderr[-2000:]
    exported = tmp_path / "sub.pt"
    (tmp_path / "a.json").write_text(Architecture(
        16, (DecoderLayer("softmax", 2, 8, "softmax", 2, 1),), 16, (EncoderLayer("softmax", 2, 8),)).to_json())
    assert search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"), "--output", str(exported)).returncode == 0
    out = search("export", "--checkpoint", str(exported), "--architecture", str(tmp_path / "a.json"), "--output", str(tmp_path / "y.pt"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (f"error: --checkpoint {exported}: not a supernet (its model is "
                                                   "'mixed_transformer', expected mixed_supertransformer or mixed_supertransformer_lm)")


def test_two_data_parallel_ranks_train_the_same_sub_networks(trained, space_file, tmp_path):
    """2 ranks started as fairseq-plugins-cpu-train starts them (torchrun; gloo, fairseq's legacy DDP, which
    all-reduces every parameter's gradient, zeros where a sub-network leaves one unused): both ranks end with
    the same parameters (tests/torchrun_rank_probe.py saves every rank's)."""
    from fairseq_plugins.cli import cpu_distributed_train as launcher

    _, data, _, _ = trained
    dumps = tmp_path / "dumps"
    args = [data, "--user-dir", PLUGIN_DIR, "--arch", "mixed_supertransformer", "--search-space", space_file,
            "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", "4",
            "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints", "--criterion", "label_smoothed_cross_entropy",
            "--max-source-positions", "32", "--max-target-positions", "32", "--seed", "5", "--cpu"]
    command = launcher.torchrun_command(2, ["--dump-final-params", str(dumps), "--", *args],
                                        rank_script=str(ROOT / "tests" / "torchrun_rank_probe.py"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=launcher.rank_env(1, env),
                            timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    first, second = (torch.load(dumps / f"rank{rank}.pt") for rank in range(2))
    assert (first["world_size"], first["num_updates"], second["num_updates"]) == (2, 4, 4)
    assert first["model"].keys() == second["model"].keys()
    for name in first["model"]:
        assert torch.equal(first["model"][name], second["model"][name]), name


def test_the_search_pipeline_end_to_end_on_the_trained_supernet(trained, space_file, tmp_path, monkeypatch, caplog):
    """Issue 15's subcommands on a tiny trained supernet, as the recipes chain them: collect (resumable) the
    inherited losses and the measured latencies, rank both, prune, evolve under a latency budget (predicted,
    then confirmed by measurement), pareto; each run as the command line runs it."""
    import contextlib
    import io

    from fairseq_plugins.search.__main__ import main
    from fairseq_plugins.search.collect import read_collection
    from fairseq_plugins.search.space import SearchSpace

    root, data, checkpoint, _ = trained

    warnings = []

    def run(*argv, status=0):
        out, err = io.StringIO(), io.StringIO()
        caplog.clear()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), caplog.at_level("WARNING", "fairseq_plugins"):
            assert main(list(argv)) == status, err.getvalue()[-2000:]
        # (logged: in a command line, on stderr in fairseq's format)
        warnings[:] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("fairseq_plugins")]
        return json.loads(out.getvalue().strip().splitlines()[-1]) if status == 0 else err.getvalue()

    losses, latencies = str(tmp_path / "loss.jsonl"), str(tmp_path / "latency.jsonl")
    common = ["--checkpoint", checkpoint, "--space", space_file]
    assert run("collect", "--what", "loss", *common, "-n", "6", "--output", losses)["added"] == 6
    first = read_collection(losses)[1]
    again = run("collect", "--what", "loss", *common, "-n", "14", "--output", losses)
    assert again["added"] == 8 and again["records"] == 14
    header, records = read_collection(losses)
    assert records[:6] == first and header["what"] == "loss" and header["machine"]["cores"] >= 1
    assert all(r["loss"] > 0 and r["revision"] and r["threads"] >= 1 for r in records)
    assert len({json.dumps(r["architecture"], sort_keys=True) for r in records}) == 14
    # the loss is the one `evaluate` reports for the same architecture
    (tmp_path / "a.json").write_text(json.dumps(records[3]["architecture"]))
    evaluated = run("evaluate", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "a.json"))
    assert evaluated["loss"] == pytest.approx(records[3]["loss"], rel=1e-9)
    from fairseq_plugins.search.collect import collect, write_collection
    with pytest.raises(Exception, match="collected with seed = 1, not 2"):
        collect("loss", checkpoint, space_file, 14, losses, seed=2)
    # another supernet (its content, wherever it lies) does not continue the file
    write_collection(str(tmp_path / "other.jsonl"), {**header, "checkpoint_sha256": "0" * 64}, records)
    with pytest.raises(Exception, match="collected with checkpoint_sha256 = \"0+\", not"):
        collect("loss", checkpoint, space_file, 14, str(tmp_path / "other.jsonl"))

    latency = ["--source-length", "5", "--target-length", "4", "--beam", "2", "--rounds", "4", "--processes", "2", "--warmup", "1",
               "--repeats", "3"]
    summary = run("collect", "--what", "latency", *common, "-n", "12", "--output", latencies, "--max-spread", "10", *latency)
    assert summary["records"] == 12 and summary["dropped"] == 0
    header, records = read_collection(latencies)
    # every record measured beside the space's largest architecture, in milliseconds and relative to it
    assert header["reference"] == SearchSpace.from_file(space_file).extreme(largest=True).to_dict()
    assert header["latency"]["in_turn"] == 10  # (two groups: 10 architectures measured in turn, then 2)
    assert all(r["latency_ms"] > 0 and r["relative_latency"] > 0 and r["decoder_calls"] == 5 and len(r["ratios"]) == 4
               and len(r["per_process"]) == 2 and r["process_range"] <= r["ratio_range"] and "rounds" not in r
               for r in records)
    # a spread bound nothing meets: measured again, then dropped and counted
    dropped = run("collect", "--what", "latency", *common, "-n", "2", "--output", str(tmp_path / "tight.jsonl"),
                  "--max-spread", "1e-12", "--remeasure", "1", *latency)
    assert dropped["dropped"] == 2 and dropped["remeasured"] == 2

    loss_ranker = run("rank", "--data", losses, "--target", "loss")
    latency_ranker = run("rank", "--data", latencies, "--target", "latency")
    relative_ranker = run("rank", "--data", latencies, "--target", "relative_latency")
    for result in (loss_ranker, latency_ranker, relative_ranker):
        assert set(result["pairwise"]) == {"kendall_tau", "pair_accuracy", "objective"}
        # the regressor predicts the target: how close it comes, held out
        assert set(result["pointwise"]) == {"kendall_tau", "pair_accuracy", "objective", "mean_relative_error", "within_10_percent"}
    ranker, predictor = loss_ranker["files"]["ranker"], latency_ranker["files"]["regressor"]

    pruned = run("prune", "--space", space_file, "--importance", loss_ranker["files"]["importance"], "--keep", "3",
                 "--output", str(tmp_path / "pruned.yaml"))
    # three choices stay free (shared widths are one choice of two fields)
    assert len(pruned["kept"]) in (3, 4) and pruned["size_after"] < pruned["size_before"]
    SearchSpace.from_file(str(tmp_path / "pruned.yaml"))

    evolved = run("evolve", "--space", space_file, "--fitness", "ranker", "--ranker", ranker, "--checkpoint", checkpoint,
                  "--latency-ms", "1e6", "--latency-predictor", predictor, "--flops", "1", "--params", "1",
                  "--population", "9", "--parents", "3",
                  "--mutations", "3", "--crossovers", "3", "--iterations", "3", "--confirm", "2", "--train-max-update", "77",
                  "--output", str(tmp_path / "evolved"), *[a for a in latency if a not in ("--warmup", "1", "--repeats", "3")])
    result = json.loads((tmp_path / "evolved" / "result.json").read_text())
    assert [c["within_budget"] for c in result["confirmed_latency"]] == [True, True]
    assert result["best"]["latency_ms"] > 0 and 0 < result["best"]["mparams"] <= 1 and 0 < result["best"]["gflops"] <= 1
    assert result["constraints"] == {"--latency-ms": 1e6, "--flops": 1.0, "--params": 1.0}
    best = Architecture.from_json((tmp_path / "evolved" / "best.json").read_text())
    assert best.to_dict() == result["best"]["architecture"] == evolved["best"]["architecture"]
    command = (tmp_path / "evolved" / "train_command.sh").read_text()
    assert f"--architecture-file {tmp_path / 'evolved' / 'best.json'}" in command and "--task translation" in command
    assert "--arch mixed_transformer " in command and "--share-all-embeddings" in command
    assert " --max-update 77 " in command  # the training budget given, not the supernet's

    # a finished search is not run again; another budget in its folder is refused
    again = run("evolve", "--space", space_file, "--fitness", "ranker", "--ranker", ranker, "--checkpoint", checkpoint,
                "--latency-ms", "1e6", "--latency-predictor", predictor, "--flops", "1", "--params", "1",
                "--population", "9", "--parents", "3", "--mutations", "3", "--crossovers", "3", "--iterations", "3",
                "--confirm", "2", "--output", str(tmp_path / "evolved"), *[a for a in latency if a not in ("--warmup", "1", "--repeats", "3")])
    assert again["done_before"] and again["best"] == evolved["best"]
    assert warnings == []

    # no candidate measures within the budget (a latency predictor that is off on this machine): an error with
    # the measurements, result.json kept without a best; the same command searches again and says why
    import fairseq_plugins.search.commands as commands

    unmet_args = ["evolve", "--space", space_file, "--fitness", "ranker", "--ranker", ranker, "--checkpoint", checkpoint,
                  "--latency-ms", "1e6", "--latency-predictor", predictor, "--population", "9", "--parents", "3",
                  "--mutations", "3", "--crossovers", "3", "--iterations", "2", "--confirm", "2", "--output",
                  str(tmp_path / "unmet"), *[a for a in latency if a not in ("--warmup", "1", "--repeats", "3")]]
    with monkeypatch.context() as patched:
        patched.setattr(commands, "confirm_latency", lambda candidates, supernet, budget, settings, count, device, reference: ([
            {"architecture": c.architecture.to_dict(), "latency_ms": 2e6, "within_budget": False} for c in candidates[:count]], []))
        unmet = run(*unmet_args, status=2)
    assert "--latency-ms 1000000.0: none of the 2 fittest candidates measured within the budget (measured: " \
           "2e+06, 2e+06;" in unmet
    assert json.loads((tmp_path / "unmet" / "result.json").read_text())["best"] is None
    assert not (tmp_path / "unmet" / "best.json").exists()
    retried = run(*unmet_args)
    assert warnings == [f"{tmp_path / 'unmet' / 'result.json'}: an earlier search here found no architecture "
                        "within the budget; searching again (its result is replaced)"]
    assert not retried.get("done_before") and (tmp_path / "unmet" / "best.json").exists()
    assert json.loads((tmp_path / "unmet" / "result.json").read_text())["best"]["architecture"] == retried["best"]["architecture"]

    # --latency-of: the budget is an architecture's latency. The predicted constraint's bound is the predictor's
    # value for it; the final candidates are measured in one measurement with it first, and are within the budget
    # when measured no slower than it (its measurement is the bound, not the prediction)
    import fairseq_plugins.search.latency as latency_module
    from fairseq_plugins.search.ranking import Predictor

    # (the predictor of a relative latency of the architecture's size, not of this machine's timings: which
    # architectures the budget admits, and so whether the baseline is among the fittest candidates, must not
    # depend on the machine or its load)
    def size(a: dict) -> float:
        return (sum(a["encoder_embed_dim"] + layer["ffn_embed_dim"] for layer in a["encoder_layers"])
                + 2 * sum(a["decoder_embed_dim"] + layer["ffn_embed_dim"] for layer in a["decoder_layers"])) / 100.0

    sized = str(tmp_path / "sized_latency.jsonl")
    write_collection(sized, header, [{**r, "relative_latency": size(r["architecture"])} for r in records])
    relative_predictor = run("rank", "--data", sized, "--target", "relative_latency")["files"]["regressor"]
    baseline = records[0]["architecture"]
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    predicted = float(Predictor(relative_predictor).predict([Architecture.from_dict(baseline)])[0])
    assert Predictor(relative_predictor).predict([]) == []  # (LightGBM takes no empty matrix: none for none)
    measurements = []

    def fake_measurement(baseline_relative):
        def measure(model, dictionary, architectures, reference, settings, device="cpu"):
            measurements.append([a.to_dict() for a in architectures])
            return [{"latency_ms": 1.0, "reference_ms": 1.0, "ratio_range": 0.0, "process_range": 0.0, "stdev_ms": 0.0,
                     "relative_latency": baseline_relative if a.to_dict() == baseline else 50.0} for a in architectures]
        return measure

    latency_of_args = ["evolve", "--space", space_file, "--ranker", ranker, "--checkpoint", checkpoint,
                       "--latency-of", str(tmp_path / "baseline.json"), "--latency-predictor", relative_predictor,
                       "--population", "9", "--parents", "3", "--mutations", "3", "--crossovers", "3", "--iterations", "2",
                       "--confirm", "3", "--output", str(tmp_path / "latency_of")]
    from fairseq_plugins.search.evolution import evolve

    seeded = []

    def evolve_seeded(*args, seeds=(), **kwargs):  # (the baseline meets its own budget: the first population holds it)
        seeded.extend(a.to_dict() for a in seeds)
        return evolve(*args, seeds=seeds, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(latency_module, "measure_subnetworks", fake_measurement(100.0))
        patched.setattr(commands, "evolve", evolve_seeded)
        as_fast = run(*latency_of_args)
    assert seeded == [baseline]
    result = json.loads((tmp_path / "latency_of" / "result.json").read_text())
    assert result["constraints"] == {"--latency-of": pytest.approx(predicted, rel=1e-12)}
    assert result["latency_of"]["architecture"] == baseline and result["latency_of"]["relative_latency"] == 100.0
    assert result["latency_of"]["predicted_relative_latency"] == pytest.approx(predicted, rel=1e-12)
    assert result["latency_of"]["path"] == str(tmp_path / "baseline.json") and len(result["latency_of"]["measurements"]) == 1
    assert [c["baseline_relative_latency"] for c in result["confirmed_latency"]] == [100.0] * 3
    # one measurement: the baseline first, then the 3 fittest (a bound of the prediction would have kept none)
    assert len(measurements) == 1 and measurements[0][0] == baseline and len(measurements[0]) == 4
    assert [c["within_budget"] for c in result["confirmed_latency"]] == [True] * 3
    assert as_fast["best"]["relative_latency"] <= predicted
    assert all(c["relative_latency"] <= predicted for c in result["population"])
    with monkeypatch.context() as patched:  # measured slower than the baseline: none within, the message says so
        patched.setattr(latency_module, "measure_subnetworks", fake_measurement(10.0))
        slower = run(*latency_of_args[:-1], str(tmp_path / "latency_of_slower"), status=2)
    assert (f"--latency-of {tmp_path / 'baseline.json'} (predicted relative_latency {predicted:.4g}): none of the 3 "
            f"fittest candidates measured within the budget (measured: 50, 50, 50; {tmp_path / 'baseline.json'} measured "
            "10 beside them;") in slower
    # a finished search: keyed on the architecture (not its file's bytes): found done when the file is written
    # otherwise; another baseline in the file is another search, refused
    (tmp_path / "baseline.json").write_text(json.dumps(baseline, indent=2, sort_keys=True))
    assert run(*latency_of_args)["done_before"]
    other_baseline = next(r["architecture"] for r in records if r["architecture"] != baseline)
    (tmp_path / "baseline.json").write_text(json.dumps(other_baseline))
    assert "holds a search with other inputs (latency_of)" in run(*latency_of_args, status=2)
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    two = run(*latency_of_args[:-1], str(tmp_path / "two"), "--relative-latency", "0.5", status=2)
    assert "--relative-latency and --latency-of: give one latency budget" in two
    outside = dict(baseline, encoder_embed_dim=1024, decoder_embed_dim=1024)
    (tmp_path / "outside.json").write_text(json.dumps(outside))
    refused = run(*[str(tmp_path / "outside.json") if a == str(tmp_path / "baseline.json") else a for a in latency_of_args[:-1]],
                  str(tmp_path / "outside"), status=2)
    assert f"--latency-of {tmp_path / 'outside.json'}: encoder.embed_dim: 1024 is outside the space" in refused
    assert not (tmp_path / "outside").exists()

    # a budget none of the architectures drawn meets: an error naming it, and result.json says why (no best, a
    # search the same command runs again)
    unsatisfiable_args = ["evolve", "--space", space_file, "--ranker", ranker, "--checkpoint", checkpoint, "--flops", "1e-9",
                          "--population", "4", "--parents", "2", "--mutations", "1", "--crossovers", "1",
                          "--output", str(tmp_path / "unsatisfiable")]
    message = run(*unsatisfiable_args, status=2)
    result = json.loads((tmp_path / "unsatisfiable" / "result.json").read_text())
    assert result["best"] is None and result["history"] == [] and result["constraints"] == {"--flops": 1e-9}
    assert result["unsatisfiable"] == "--flops 1e-09: only 0 of 4000 random architectures satisfy the constraints; loosen them"
    assert result["unsatisfiable"] in message and not (tmp_path / "unsatisfiable" / "best.json").exists()
    run(*unsatisfiable_args, status=2)
    assert warnings == [f"{tmp_path / 'unsatisfiable' / 'result.json'}: an earlier search here found no architecture "
                        "within the budget; searching again (its result is replaced)"]

    other = run("evolve", "--space", space_file, "--ranker", ranker, "--flops", "2", "--population", "9", "--parents", "3",
                "--mutations", "3", "--crossovers", "3", "--output", str(tmp_path / "evolved"), status=2)
    assert "holds a search with other inputs (" in other and "flops" in other
    bad = run("evolve", "--space", space_file, "--ranker", ranker, "--latency-ms", "5", "--latency-predictor", predictor,
              "--output", str(tmp_path / "y"), status=2)
    assert "--latency-ms: the final candidates are confirmed by measurement: give --checkpoint" in bad and not (tmp_path / "y").exists()

    # a budget that needs no measurement: a fraction of the space's largest architecture's FLOPs
    largest_json = tmp_path / "largest.json"
    largest_json.write_text(json.dumps(SearchSpace.from_file(space_file).extreme(largest=True).to_dict()))
    largest = run("cost", "--checkpoint", checkpoint, "--architecture", str(largest_json))
    shared = run("evolve", "--space", space_file, "--ranker", ranker, "--checkpoint", checkpoint, "--flops-fraction", "0.8",
                 "--population", "9", "--parents", "3", "--mutations", "3", "--crossovers", "3", "--iterations", "2",
                 "--output", str(tmp_path / "fraction"))
    limit = json.loads((tmp_path / "fraction" / "result.json").read_text())["constraints"]["--flops-fraction"]
    assert limit == pytest.approx(0.8 * largest["forward_flops"] / 1e9, rel=1e-9)
    assert shared["best"]["gflops"] <= limit
    bad = run("evolve", "--space", space_file, "--ranker", ranker, "--flops-fraction", "1.5", "--output", str(tmp_path / "z"),
              status=2)
    assert "--flops-fraction: expected a fraction in (0, 1] of the largest architecture's FLOPs, got 1.5" in bad

    # the inherited loss as the fitness: the best's fitness is its loss inside the supernet
    by_loss = run("evolve", "--space", space_file, "--fitness", "supernet", "--checkpoint", checkpoint, "--population", "6",
                  "--parents", "2", "--mutations", "2", "--crossovers", "2", "--iterations", "2", "--output", str(tmp_path / "by_loss"))
    (tmp_path / "b.json").write_text(json.dumps(by_loss["best"]["architecture"]))
    evaluated = run("evaluate", "--checkpoint", checkpoint, "--architecture", str(tmp_path / "b.json"))
    assert by_loss["best"]["fitness"] == pytest.approx(evaluated["loss"], rel=1e-9)

    front = run("pareto", "--space", space_file, "--fitness", "ranker", "--ranker", ranker, "--objective", "latency",
                "--latency-predictor", predictor, "--trials", "24", "--population", "6", "--output", str(tmp_path / "front.jsonl"))
    points = [json.loads(line) for line in (tmp_path / "front.jsonl").read_text().splitlines()]
    assert len(points) == front["pareto_set"] >= 1 and all("latency_ms" in p for p in points)
    # pareto --latency-of: the baseline is the first trial (its own budget admits it)
    from fairseq_plugins.search.evolution import pareto

    tried_first = []

    def pareto_seeded(*args, seeds=(), **kwargs):
        tried_first.extend(a.to_dict() for a in seeds)
        return pareto(*args, seeds=seeds, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(commands, "pareto", pareto_seeded)
        as_fast = run("pareto", "--space", space_file, "--fitness", "ranker", "--ranker", ranker, "--objective", "flops",
                      "--latency-of", str(tmp_path / "baseline.json"), "--latency-predictor", relative_predictor,
                      "--checkpoint", checkpoint, "--trials", "6", "--population", "3",
                      "--output", str(tmp_path / "front_as_fast.jsonl"))
    assert tried_first == [baseline] and as_fast["pareto_set"] >= 1

    # budgets without what they need are one-line errors
    bad = run("evolve", "--space", space_file, "--ranker", ranker, "--latency-ms", "5", "--checkpoint", checkpoint,
              "--output", str(tmp_path / "x"), status=2)
    assert "--latency-ms needs --latency-predictor" in bad
    bad = run("evolve", "--space", space_file, "--ranker", predictor, "--output", str(tmp_path / "x"), status=2)
    assert "expected the ranker.txt of `rank --target loss`" in bad


def test_the_export_parity_check_of_gpu_checks_passes_exports_and_fails_a_mismatch(trained, tmp_path):
    """benchmarks/supernet_export_parity.py (the supernet step of benchmarks/gpu_checks.sh) on the CPU: exports of
    two sub-networks agree exactly with the supernet; an export paired with another architecture is caught."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import supernet_export_parity
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    _, _, checkpoint, _ = trained
    model = checkpoint_utils.load_model_ensemble([checkpoint])[0][0]
    pairs = []
    for name, architecture in (("second_kind", model.space.extreme(True, 1)), ("smallest", model.space.extreme(False))):
        (tmp_path / f"{name}.json").write_text(architecture.to_json())
        result = search("export", "--checkpoint", checkpoint, "--architecture", str(tmp_path / f"{name}.json"),
                        "--output", str(tmp_path / f"{name}.pt"))
        assert result.returncode == 0, result.stderr[-2000:]
        pairs.append([str(tmp_path / f"{name}.json"), str(tmp_path / f"{name}.pt")])
    common = ["--checkpoint", checkpoint, "--device", "cpu", "--atol", "0"]
    assert supernet_export_parity.main(common + [a for pair in pairs for a in ["--pair", *pair]]) == 0
    assert supernet_export_parity.main(common + ["--pair", pairs[0][0], pairs[1][1]]) == 1
