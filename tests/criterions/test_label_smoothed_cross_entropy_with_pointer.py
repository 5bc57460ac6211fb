"""label_smoothed_cross_entropy_with_pointer: the pointer loss of BET(SG) (eq. 5)
equals explicit loops over layers and rows on attention weights obtained
independently of the criterion (each layer's self-attention called again on its
input, or fairseq's softmax written out); the rules for skipped rows, the eps
clamp and the per-head option on hand-made distributions; gradients; errors."""
import math
import os

import pytest
import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.logging import metrics
from fairseq.modules import MultiheadAttention

import fairseq_plugins
from fairseq_plugins.criterions.label_smoothed_cross_entropy_with_pointer import (
    POINTER_EPS,
    LabelSmoothedCrossEntropyWithPointerCriterion,
    PointerLossError,
    pointer_loss,
)

PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
WORDS = [f"w{i}" for i in range(20)]
PAD, EOS = 1, 2
TINY = [
    "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "4", "--dropout", "0.0",
]
ENCODER = ["--encoder-layers", "1", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "4"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        with open(path / name, "w") as f:
            f.writelines(f"{w} 10\n" for w in WORDS)
    return str(path)


def build(data_dir, arch, *extra, task="translation_with_syntax", criterion=()):
    parser = options.get_training_parser()
    argv = [data_dir, "--task", task, "--arch", arch, "--user-dir", PLUGIN_DIR, "--label-smoothing", "0.1", *TINY]
    if task.startswith("translation"):
        argv += ["-s", "src", "-t", "tgt", *ENCODER]
    argv += ["--criterion", "label_smoothed_cross_entropy_with_pointer", *criterion]
    args = options.parse_args_and_arch(parser, input_args=argv + list(extra))
    task_obj = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task_obj.build_model(args)
    model.eval()  # dropout is 0 anyway; eval keeps every call deterministic
    return task_obj, model, task_obj.build_criterion(args)


# Batch of 3: rows 0 and 1 have 6 target tokens, row 2 has 4 and 2 pads.
TARGET = torch.tensor([
    [5, 6, 7, 8, 9, EOS],
    [10, 11, 12, 13, 14, EOS],
    [15, 16, 17, EOS, PAD, PAD],
])
HINTS = torch.tensor([
    [0, 0, 1, 3, 2, 4],     # self hints at t = 0 and t = 3
    [-1, 0, -1, 1, 0, 5],   # no hint at t = 0 and 2; self hint at t = 5
    [0, 1, 0, 2, 3, -1],    # self hint at t = 1; t = 4 is padding (its hint 3 is ignored)
])


def translation_sample():
    prev = torch.cat([torch.full((3, 1), EOS), TARGET[:, :-1]], dim=1)
    prev[2, 4:] = PAD
    src = torch.tensor([[PAD, PAD, 5, 6, EOS], [7, 8, 9, 10, EOS], [PAD, 11, 12, 13, EOS]])
    return {
        "id": torch.arange(3), "nsentences": 3, "ntokens": int(TARGET.ne(PAD).sum()),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1), "prev_output_tokens": prev},
        "target": TARGET.clone(), "pointer_hints": HINTS.clone(),
    }


def lm_sample():
    src = torch.cat([torch.full((3, 1), EOS), TARGET[:, :-1]], dim=1)
    src[2, 4:] = PAD
    return {
        "id": torch.arange(3), "nsentences": 3, "ntokens": int(TARGET.ne(PAD).sum()),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1)},
        "target": TARGET.clone(), "pointer_hints": HINTS.clone(),
    }


def fairseq_softmax_weights(attn, x, key_padding):
    """fairseq's MultiheadAttention distribution written out: softmax(q k^T / sqrt(d_h)), causal, padded keys hidden."""
    tgt_len, bsz, _ = x.shape
    heads, dim = attn.num_heads, attn.head_dim
    q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(tgt_len, bsz, heads, dim).permute(2, 1, 0, 3)
    k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(tgt_len, bsz, heads, dim).permute(2, 1, 0, 3)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dim)  # H x B x T x T
    future = torch.ones(tgt_len, tgt_len, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf")).masked_fill(key_padding.view(1, bsz, 1, tgt_len), float("-inf"))
    return torch.softmax(scores, dim=-1)


def independent_pointer_loss(model, sample, per_head=False):
    """Eq. 5 in loops: each used layer's self-attention called again on its input (from inner_states)."""
    net_input = sample["net_input"]
    _, extra = model(**net_input)
    inner = extra["inner_states"]
    decoder = model.decoder
    decoder_input = net_input.get("prev_output_tokens", net_input["src_tokens"])
    key_padding = decoder_input.eq(PAD)
    hints, target = sample["pointer_hints"], sample["target"]
    total, rows, used_layers = 0.0, set(), []
    for index, layer in enumerate(decoder.layers):
        attn = layer.self_attn
        stock = isinstance(attn, MultiheadAttention) and not hasattr(attn, "kind_name")
        kind = "softmax" if stock else attn.kind_name
        if kind not in ("bet", "softmax"):
            continue
        used_layers.append(index)
        x = inner[index]
        if layer.normalize_before:
            x = layer.self_attn_layer_norm(x)
        if stock:
            weights = fairseq_softmax_weights(attn, x, key_padding)
        else:
            mask = decoder.buffered_future_mask(x) if attn.uses_future_mask else None
            _, weights = attn(query=x, key=x, value=x, key_padding_mask=key_padding if key_padding.any() else None,
                              need_weights=True, need_head_weights=True, attn_mask=mask)
        hides = getattr(attn, "hides_diagonal", False)
        for b in range(target.size(0)):
            for t in range(target.size(1)):
                key = int(hints[b, t])
                if key < 0 or target[b, t] == PAD or key_padding[b, key] or (hides and key == t):
                    continue
                p = weights[:, b, t, key]
                total = total - (p.log().mean() if per_head else p.mean().log())
                rows.add((b, t))
    return total, len(rows), used_layers


def parent_loss(task, model, sample):
    criterion = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    return criterion(model, sample)[0]


@pytest.mark.parametrize(
    "extra,rows,used",
    [
        # bet hides the diagonal, softmax does not: every valid row has a term somewhere
        (["--decoder-layers", "3", "--decoder-attention-kinds", "softmax,cosformer,bet"], 14, [0, 2]),
        # every used layer hides the diagonal: the 5 self-hinted rows have no term
        (["--decoder-layers", "3", "--decoder-attention-kinds", "softmax,cosformer,bet", "--softmax-diag-free"], 9, [0, 2]),
    ],
)
@pytest.mark.parametrize("per_head", [False, True])
def test_pointer_loss_equals_loops_over_layers_and_rows(data_dir, extra, rows, used, per_head):
    weight = 0.5
    task, model, criterion = build(
        data_dir, "mixed_transformer", *extra,
        criterion=["--pointer-loss-weight", str(weight)] + (["--pointer-loss-per-head"] if per_head else []),
    )
    # The gradient comparison subtracts two label-smoothed losses: double precision
    # (fairseq's softmax still returns float32 weights, hence rel=1e-6 for values).
    model.double()
    sample = translation_sample()
    loss, sample_size, log = criterion(model, sample)
    expected, expected_rows, used_layers = independent_pointer_loss(model, sample, per_head=per_head)
    assert used_layers == used and expected_rows == rows
    assert log["pointer_rows"] == rows
    assert log["pointer_loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    base = parent_loss(task, model, sample)
    assert loss.item() == pytest.approx(base.item() + weight * expected.item(), rel=1e-6)
    assert sample_size == sample["ntokens"] and log["loss"] == loss.data

    # gradients: criterion minus parent == weight * gradient of the loops (up to
    # the float32 rounding of the recorded weights)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    got = torch.autograd.grad(loss - base, params, allow_unused=True)
    want = torch.autograd.grad(weight * expected, params, allow_unused=True)
    zero = torch.zeros((), dtype=torch.float64)
    got = [zero if g is None else g for g in got]
    want = [zero if w is None else w for w in want]
    scale = max(float(w.abs().max()) for w in want)
    assert scale > 0
    assert max(float((g - w).abs().max()) for g, w in zip(got, want)) <= 1e-5 * scale
    want = dict(zip(names, want))
    for index in used:  # the pointer loss reaches the attention parameters of the used layers
        attn = model.decoder.layers[index].self_attn
        for name in ["k_proj.weight", "q_proj.weight"] + (["score_weight"] if attn.kind_name == "bet" else []):
            assert want[f"decoder.layers.{index}.self_attn.{name}"].abs().sum() > 0, (index, name)


def test_stock_fairseq_transformer_and_its_multihead_attention(data_dir):
    task, model, criterion = build(data_dir, "transformer", "--decoder-layers", "2")
    assert all(type(layer.self_attn) is MultiheadAttention for layer in model.decoder.layers)
    sample = translation_sample()
    _, _, log = criterion(model, sample)
    expected, rows, used = independent_pointer_loss(model, sample)  # fairseq's softmax written out
    assert used == [0, 1] and log["pointer_rows"] == rows == 14
    assert log["pointer_loss"].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("arch,extra", [("mixed_transformer_lm", ["--decoder-attention-kinds", "bet,softmax"]), ("transformer_lm", [])])
def test_language_models(data_dir, arch, extra):
    task, model, criterion = build(data_dir, arch, "--decoder-layers", "2", *extra, task="language_modeling_with_syntax")
    sample = lm_sample()
    loss, _, log = criterion(model, sample)
    expected, rows, used = independent_pointer_loss(model, sample)
    assert used == [0, 1] and log["pointer_rows"] == rows == 14
    assert log["pointer_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert loss.item() == pytest.approx(parent_loss(task, model, sample).item() + expected.item(), rel=1e-5)


# ------------------------------------------------ rules on hand-made distributions ---
def hand_probs():
    # one batch row, T = 3, two heads
    head0 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    head1 = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.6, 0.1, 0.3]])
    return torch.stack([head0, head1]).unsqueeze(0)  # 1 x 2 x 3 x 3


def run_rules(probs, hides, hints, key_padding=(False, False, False), per_head=False, prefix=0, real=(True, True, True)):
    total, rows = pointer_loss(
        probs, hides, torch.tensor([hints]), torch.tensor([real]), torch.tensor([key_padding]),
        per_head=per_head, ignore_prefix_size=prefix,
    )
    return total.item(), int(rows)


def test_rules_by_hand():
    p = hand_probs()
    # rows: 0 -> key 0 (p = 1), 1 -> key 0 (means 0.375), 2 -> key 1 (mean 0.2)
    assert run_rules([p], [False], [0, 0, 1]) == (pytest.approx(-math.log(0.375) - math.log(0.2)), 3)
    per_head = -(math.log(0.5) + math.log(0.25)) / 2 - (math.log(0.3) + math.log(0.1)) / 2
    assert run_rules([p], [False], [0, 0, 1], per_head=True) == (pytest.approx(per_head), 3)
    # two layers are summed
    assert run_rules([p, p], [False, False], [0, 0, 1])[0] == pytest.approx(2 * (-math.log(0.375) - math.log(0.2)))
    # -1, padding targets and the prefix rows are skipped
    assert run_rules([p], [False], [-1, 0, 1], real=(True, True, False)) == (pytest.approx(-math.log(0.375)), 1)
    assert run_rules([p], [False], [0, 0, 1], prefix=2) == (pytest.approx(-math.log(0.2)), 1)
    # a padded key is skipped
    assert run_rules([p], [False], [0, 0, 1], key_padding=(False, True, False)) == (pytest.approx(-math.log(0.375)), 2)
    # self hints: counted where the diagonal is visible, skipped where it is hidden
    assert run_rules([p], [False], [0, 1, 2]) == (pytest.approx(-math.log(0.625) - math.log(0.4)), 3)
    assert run_rules([p], [True], [0, 1, 2]) == (0.0, 0)
    # a row with a term in one of two layers counts once
    # (hidden layer: row 2 only; visible layer: rows 0, 1, 2)
    assert run_rules([p, p], [True, False], [0, 1, 0]) == (pytest.approx(-math.log(0.625) - 2 * math.log(0.4)), 3)


def test_zero_probabilities_are_clamped_only_where_used():
    p = hand_probs()
    zero = p.clone()
    zero[0, :, 2, 1] = 0.0  # row 2 gives key 1 no weight in either head
    # a used row whose hinted key has probability 0 costs -log(eps), finite
    assert run_rules([zero], [False], [0, 0, 1]) == (pytest.approx(-math.log(0.375) - math.log(POINTER_EPS)), 3)
    # the same zero under a padded key never reaches the log
    assert run_rules([zero], [False], [0, 0, 1], key_padding=(False, True, False)) == (pytest.approx(-math.log(0.375)), 2)
    # a hidden diagonal (zero weight, as a diagonal-free mask gives it) neither
    diag_free = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]).expand(1, 2, 3, 3).clone()
    assert run_rules([diag_free], [True], [0, 1, 2]) == (0.0, 0)
    # and its gradient is zero, not nan
    probs = diag_free.requires_grad_(True)
    total, _ = pointer_loss([probs], [True], torch.tensor([[0, 1, 2]]), torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool))
    total.backward()
    assert torch.equal(probs.grad, torch.zeros_like(probs))


def test_future_hints_are_refused():
    with pytest.raises(PointerLossError, match="decoder row 1 points to a later row 2"):
        run_rules([hand_probs()], [False], [0, 2, 1])


# ------------------------------------------------------------------ errors ---
@pytest.mark.parametrize("kinds", ["cosformer", "extractor_she,cosformer"])
def test_no_bet_or_softmax_decoder_layer(data_dir, kinds):
    _, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "2", "--decoder-attention-kinds", kinds)
    listed = ", ".join(kinds.split(",") * 2 if "," not in kinds else kinds.split(","))
    with pytest.raises(PointerLossError, match=f"decoder layers use {listed}; set --decoder-attention-kinds"):
        criterion(model, translation_sample())


def test_sample_without_hints(data_dir):
    _, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "1")
    sample = translation_sample()
    del sample["pointer_hints"]
    with pytest.raises(PointerLossError, match="the sample has no pointer_hints.*data_prep/syntax_hints.py"):
        criterion(model, sample)


def test_task_without_hints_and_weight_zero(data_dir):
    with pytest.raises(PointerLossError, match="use --task translation_with_syntax or language_modeling_with_syntax"):
        build(data_dir, "mixed_transformer", "--decoder-layers", "1", task="translation")
    # lambda_p = 0: the parent criterion exactly, no hints needed, nothing extra logged
    task, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "1", task="translation",
                                   criterion=["--pointer-loss-weight", "0"])
    sample = translation_sample()
    del sample["pointer_hints"]
    loss, _, log = criterion(model, sample)
    assert "pointer_loss" not in log and loss.item() == parent_loss(task, model, sample).item()


def test_negative_weight_and_unreduced_loss(data_dir):
    with pytest.raises(ValueError, match="--pointer-loss-weight must be a finite number >= 0"):
        build(data_dir, "mixed_transformer", "--decoder-layers", "1", criterion=["--pointer-loss-weight", "-1"])
    _, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "1")
    with pytest.raises(PointerLossError, match="reduce=False"):
        criterion(model, translation_sample(), reduce=False)


def test_reduce_metrics_logs_pointer_loss_per_hinted_row_in_bits():
    logs = [
        {"loss": 10.0, "nll_loss": 8.0, "ntokens": 10, "sample_size": 10, "pointer_loss": 3.0, "pointer_rows": 4},
        {"loss": 5.0, "nll_loss": 4.0, "ntokens": 5, "sample_size": 5, "pointer_loss": torch.tensor(1.5), "pointer_rows": torch.tensor(2)},
    ]
    assert LabelSmoothedCrossEntropyWithPointerCriterion.logging_outputs_can_be_summed()
    with metrics.aggregate() as agg:
        LabelSmoothedCrossEntropyWithPointerCriterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    assert values["pointer_loss"] == pytest.approx(round(4.5 / 6 / math.log(2), 3))
    assert values["pointer_rows"] == 6
    assert values["loss"] == pytest.approx(round(15 / 15 / math.log(2), 3))
    # summed logs (what distributed training reduces) give the same value
    summed = [{k: sum(float(log[k]) for log in logs) for k in logs[0]}]
    with metrics.aggregate() as agg:
        LabelSmoothedCrossEntropyWithPointerCriterion.reduce_metrics(summed)
        assert agg.get_smoothed_values()["pointer_loss"] == values["pointer_loss"]


def test_layers_dropped_by_layerdrop_have_no_term(data_dir):
    task, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "2", "--decoder-layerdrop", "0.999999")
    sample = translation_sample()
    model.train()  # (almost) surely both layers dropped
    loss, _, log = criterion(model, sample)
    assert log["pointer_loss"].item() == 0 and log["pointer_rows"] == 0
    model.eval()  # no LayerDrop at evaluation: both layers count
    _, _, log = criterion(model, sample)
    expected, rows, used = independent_pointer_loss(model, sample)
    assert used == [0, 1] and log["pointer_rows"] == rows == 14
    assert log["pointer_loss"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_activation_checkpointing_is_refused_in_training(data_dir):
    # fairseq's checkpointed layers run their first forward without autograd:
    # the recorded weights could not pass the pointer loss's gradient on
    _, model, criterion = build(data_dir, "mixed_transformer", "--decoder-layers", "1", "--checkpoint-activations")
    model.train()
    with pytest.raises(PointerLossError, match="carry no gradient.*--checkpoint-activations"):
        criterion(model, translation_sample())
    with torch.no_grad():  # validation has no gradient to lose
        criterion(model, translation_sample())
