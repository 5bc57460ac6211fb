"""``supernet_translation``: the sandwich rule's gradient is the mean of its sub-networks' gradients,
validation reports the largest and the smallest sub-network (fairseq-train runs it: tests/search/test_supernet.py)."""
import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.modules import AttentionConfigError

SPACE = """
shared_embed_dim: true
encoder: {embed_dim: [8, 16], layers: [1, 2], ffn_embed_dim: [8, 12], attention_heads: [2, 4], attention_kinds: [softmax, cosformer]}
decoder: {embed_dim: [8, 16], layers: [1, 2], ffn_embed_dim: [8, 12], attention_heads: [2, 4],
          attention_kinds: [softmax, cosformer, bet], cross_attention_heads: [2, 4],
          cross_attention_kinds: [softmax, cosformer], encoder_decoder_connect: [1, 2]}
"""


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(12)))
    (path / "space.yaml").write_text(SPACE)
    return path


def setup(dicts, *extra, arch="mixed_supertransformer"):
    parser = options.get_training_parser()
    space = ["--search-space", str(dicts / "space.yaml")] if arch == "mixed_supertransformer" else []
    args = options.parse_args_and_arch(parser, input_args=[
        str(dicts), "--task", "supernet_translation", "-s", "src", "-t", "tgt", "--arch", arch, *space, "--share-all-embeddings", "--dropout", "0", "--max-source-positions", "32",
        "--max-target-positions", "32", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task, task.build_model(args), task.build_criterion(args)


def sample():
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, 12, (3, 6), generator=gen)
    src[1, :2] = 1
    target = torch.randint(4, 12, (3, 5), generator=gen)
    target[:, -1] = 2
    prev = torch.cat([torch.full((3, 1), 2), target[:, :-1]], 1)
    return {"net_input": {"src_tokens": src, "src_lengths": (src != 1).sum(1), "prev_output_tokens": prev},
            "target": target, "ntokens": int(target.numel()), "nsentences": 3, "id": torch.arange(3)}


class BackwardOnly:
    """The part of fairseq's optimizer that train_step uses."""

    def backward(self, loss):
        loss.backward()


def test_sandwich_trains_the_largest_the_smallest_of_every_kind_and_sampled_ones(dicts):
    task, model, criterion = setup(dicts, "--supernet-sampling", "sandwich", "--supernet-sandwich-random", "2")
    architectures = task.architectures_of_update(model, 5)
    # decoder self-attention offers 3 kinds, the other placements 2 (repeated cyclically)
    assert model.space.kind_choices == 3
    extremes = [model.space.extreme(largest, i) for i in range(3) for largest in (True, False)]
    assert architectures == extremes + [model.sample(5, 1), model.sample(5, 2)]
    assert [layer.attention_kind for a in extremes for layer in a.decoder_layers[:1]] == [
        "softmax", "softmax", "cosformer", "cosformer", "bet", "bet"]
    assert [layer.attention_kind for a in extremes for layer in a.encoder_layers[:1]] == [
        "softmax", "softmax", "cosformer", "cosformer", "softmax", "softmax"]
    assert architectures == task.architectures_of_update(model, 5) and architectures != task.architectures_of_update(model, 6)
    random_task, random_model, _ = setup(dicts)
    assert random_task.architectures_of_update(random_model, 5) == [random_model.sample(5)]


def test_the_sandwich_gradient_is_the_mean_of_the_sub_networks_gradients(dicts):
    task, model, criterion = setup(dicts, "--supernet-sampling", "sandwich", "--supernet-sandwich-random", "1")
    _, reference, _ = setup(dicts)  # the same initial weights (same seed)
    assert all(torch.equal(a, b) for a, b in zip(model.weights.values(), reference.weights.values()))
    batch = sample()
    loss, sample_size, logging = task.train_step(batch, model, criterion, BackwardOnly(), update_num=3)
    architectures = task.architectures_of_update(model, 3)
    assert len(architectures) == 2 * 3 + 1  # the extremes of 3 kinds, one sampled
    losses = []
    for architecture in architectures:
        reference.train()
        reference.active = architecture
        each, _, each_log = criterion(reference, batch)
        (each / len(architectures)).backward()
        losses.append(float(each_log["loss"]))
    assert float(logging["loss"]) == pytest.approx(sum(losses) / len(architectures), rel=1e-6)
    assert float(loss) == pytest.approx(sum(losses) / len(architectures), rel=1e-6)
    for (key, got), (_, expected) in zip(model.weights.items(), reference.weights.items()):
        if expected.grad is None:
            assert got.grad is None, key
        else:
            torch.testing.assert_close(got.grad, expected.grad, rtol=1e-5, atol=1e-7, msg=key)


def updates_per_kind_weights(task, model, criterion, steps):
    """{container of one kind's weights: the number of the ``steps`` updates whose gradient reached it}."""
    counts = {key: 0 for key in model.weights.keys() if "@" in key}
    for update in range(steps):
        model.zero_grad(set_to_none=True)
        task.train_step(sample(), model, criterion, BackwardOnly(), update_num=update)
        for key in counts:
            grad = model.weights[key].grad
            counts[key] += int(grad is not None and bool(grad.abs().sum() > 0))
    return counts


def test_the_sandwich_trains_every_kind_in_every_placement_at_every_update(dicts):
    """Counted on each kind's own weights (--supernet-separate-kind-weights): every kind of every placement, in
    every layer, gets a gradient at each of the N updates, as the first kind (softmax) does. With the extremes
    of the first kind only, the other kinds' weights would be reached only when a random sub-network draws them."""
    steps = 4
    task, model, criterion = setup(dicts, "--supernet-sampling", "sandwich", "--supernet-sandwich-random", "0",
                                   "--supernet-separate-kind-weights")
    counts = updates_per_kind_weights(task, model, criterion, steps)
    kinds = {(key.split("@")[0], key.split("@")[1].split("/")[0]) for key in counts}
    assert {kind for _, kind in kinds} == {"softmax", "cosformer", "bet"}
    assert {place.split("/")[-1] for place, _ in kinds} == {"self_attn", "encoder_attn"}
    assert {place for place, _ in kinds} >= {"encoder/layers/1/self_attn", "decoder/layers/1/self_attn",
                                             "decoder/layers/1/encoder_attn"}
    assert counts == {key: steps for key in counts}

    # the first kind's extremes alone (the rule before): softmax at every update, no other kind at all
    task.architectures_of_update = lambda model, update: [model.space.extreme(True), model.space.extreme(False)]
    first_only = updates_per_kind_weights(task, model, criterion, steps)
    assert {key: n for key, n in first_only.items() if n} == {key: steps for key in first_only if "@softmax" in key}


def test_validation_reports_the_largest_and_the_smallest(dicts):
    task, model, criterion = setup(dicts)
    batch = sample()
    _, _, logging = task.valid_step(batch, model, criterion)
    model.eval()
    largest = criterion(model, batch)[2]
    model.active = model.space.extreme(False)
    smallest = criterion(model, batch)[2]
    assert float(logging["loss"]) == pytest.approx(float(largest["loss"]))
    assert float(logging["smallest_loss"]) == pytest.approx(float(smallest["loss"]))
    assert float(logging["smallest_loss"]) != pytest.approx(float(logging["loss"]))


def test_the_task_needs_a_supernet(dicts):
    with pytest.raises(AttentionConfigError, match="--task supernet_translation trains a supernet: use --arch mixed_supertransformer"):
        setup(dicts, arch="mixed_transformer_iwslt_de_en")
    with pytest.raises(AttentionConfigError, match="--eval-bleu: not supported with a supernet"):
        setup(dicts, "--eval-bleu")


# fairseq-train with --task supernet_translation --supernet-sampling sandwich: tests/search/test_supernet.py
# (the trained supernet the sub-network tools are tested on)


def test_a_data_parallel_wrapper_trains_the_sandwich_of_the_wrapped_supernet(dicts):
    """fairseq wraps the model for data-parallel training: the rule must set the architectures on the supernet,
    not on the wrapper (whose own attribute the supernet would never read)."""
    from fairseq.distributed import ModuleProxyWrapper

    class Wrapper(torch.nn.Module):  # (DistributedDataParallel's shape: the model as .module)
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    task, model, criterion = setup(dicts, "--supernet-sampling", "sandwich", "--supernet-sandwich-random", "1")
    _, reference, _ = setup(dicts, "--supernet-sampling", "sandwich", "--supernet-sandwich-random", "1")
    batch = sample()
    wrapped_loss = task.train_step(batch, ModuleProxyWrapper(Wrapper(model)), criterion, BackwardOnly(), update_num=4)[0]
    plain_loss = task.train_step(batch, reference, criterion, BackwardOnly(), update_num=4)[0]
    assert float(wrapped_loss) == pytest.approx(float(plain_loss), rel=1e-6)
    for (key, got), (_, expected) in zip(model.weights.items(), reference.weights.items()):
        assert (got.grad is None) == (expected.grad is None), key
        if got.grad is not None:
            torch.testing.assert_close(got.grad, expected.grad, rtol=1e-5, atol=1e-7, msg=key)
