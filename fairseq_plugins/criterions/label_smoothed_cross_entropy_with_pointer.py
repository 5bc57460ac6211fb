"""``label_smoothed_cross_entropy_with_pointer``: fairseq's label-smoothed cross
entropy plus BET(SG)'s pointer loss (Sha et al. 2022, eq. 5):

    loss = label-smoothed loss + lambda_p * sum_layers sum_rows -log A_l[t, hint_t]

A_l is the decoder self-attention distribution of layer l (recorded with
``AttentionRecorder`` during the ordinary forward pass) and hint_t the key row
of ``sample["pointer_hints"]`` (from the ``*_with_syntax`` tasks).

Decisions:

* Layers: every decoder layer whose self-attention kind registers
  ``attention_distribution=True`` (its weights are softmax distributions: today
  ``bet`` and ``softmax``; ``module.kind_name``, and fairseq's own
  MultiheadAttention, as in the stock ``transformer``/``transformer_lm``, counts
  as the kind that extends it). Other kinds (cosFormer, whose ReLU weights can be
  zero, and the Extractors, which have none) are left out; a decoder with none of
  these kinds is an error.
* Heads: by default -log of the head-averaged distribution; with
  ``--pointer-loss-per-head`` the mean over heads of each head's -log A_h.
* Rows left out: hint -1, padding targets, the first ``--ignore-prefix-size``
  rows (like the token loss), a hinted key that is padding, and, in a layer
  whose mask hides the diagonal (``module.hides_diagonal``, e.g. bet's
  diagonal-free mask), a row whose hint is the row itself. Probabilities are
  clamped at 1e-9 after that selection, so a masked key can never give inf.
* LayerDrop (``--decoder-layerdrop``): a layer dropped in a training pass has
  no term in that pass.
* Normalisation: summed like the token loss (fairseq divides by sample_size).
* Logging: ``pointer_loss`` is the (unweighted) pointer loss per hinted row in
  base 2, ``pointer_rows`` the hinted rows per update (rows with a term in at
  least one layer).

lambda_p (``--pointer-loss-weight``) defaults to 1.0: our choice, the paper's
value is not known to us. With 0 the criterion is exactly its parent and needs
no hints.
"""
import math
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics
from fairseq.modules import LayerDropModuleList
from torch import Tensor, nn

from ..data.hinted_datasets import POINTER_HINTS
from ..modules import ATTENTION_REGISTRY
from ..modules.registry import spec_of_module
from ..modules.recording import AttentionRecorder, decoder_self_attentions

POINTER_EPS = 1e-9
CRITERION_NAME = "label_smoothed_cross_entropy_with_pointer"


class PointerLossError(ValueError):
    """The pointer loss cannot be computed for this model or sample."""


@dataclass
class LabelSmoothedCrossEntropyWithPointerConfig(LabelSmoothedCrossEntropyCriterionConfig):
    pointer_loss_weight: float = field(
        default=1.0,
        metadata={
            "help": "lambda_p of BET(SG)'s pointer loss (eq. 5): weight of sum over layers and hinted rows of "
            "-log A[t, hint_t] over decoder self-attention layers of kind bet or softmax; 0 turns it off "
            "(default 1.0, our choice). Needs --task translation_with_syntax or language_modeling_with_syntax with hints"
        },
    )
    pointer_loss_per_head: bool = field(
        default=False,
        metadata={
            "help": "pointer loss as the mean over heads of -log A_h[t, hint_t] "
            "(default: -log of the head-averaged distribution)"
        },
    )


def attention_kind(module: nn.Module) -> str:
    """A decoder self-attention module's registered kind (fairseq's own MultiheadAttention:
    the kind that extends it), else its class name."""
    spec = spec_of_module(module)
    return spec.name if spec is not None else type(module).__name__


def pointer_kinds() -> List[str]:
    """The kinds the pointer loss can read: those whose weights are attention distributions
    (strictly positive on every visible key, so -log A[t, hint_t] is finite)."""
    return sorted(name for name, spec in ATTENTION_REGISTRY.items() if spec.attention_distribution)


def exposes_attention_distribution(module: nn.Module) -> bool:
    spec = spec_of_module(module)
    return spec is not None and spec.attention_distribution


def pointer_layers(model) -> Tuple[List[int], List[nn.Module]]:
    """Indices and self-attention modules of the decoder layers the pointer loss uses."""
    decoder = getattr(model, "decoder", None)
    if decoder is None:
        raise PointerLossError(f"{CRITERION_NAME}: model {type(model).__name__} has no decoder")
    modules = decoder_self_attentions(decoder)
    kinds = [attention_kind(m) for m in modules]
    chosen = [i for i, module in enumerate(modules) if exposes_attention_distribution(module)]
    if not chosen:
        raise PointerLossError(
            f"{CRITERION_NAME}: the pointer loss needs decoder self-attention of kind {' or '.join(pointer_kinds())}, "
            f"but the decoder layers use {', '.join(kinds) or 'no layers'}; set --decoder-attention-kinds "
            "(or --pointer-loss-weight 0)"
        )
    return chosen, [modules[i] for i in chosen]


def pointer_loss(
    probs: Sequence[Tensor],
    hides_diagonal: Sequence[bool],
    hints: Tensor,
    target_real: Tensor,
    key_padding: Tensor,
    per_head: bool = False,
    ignore_prefix_size: int = 0,
) -> Tuple[Tensor, Tensor]:
    """Summed pointer loss and the number of hinted rows.

    probs: per layer B x H x T x T attention distributions; hides_diagonal: per
    layer, whether its mask hides the diagonal; hints: B x T key rows (-1: none);
    target_real: B x T, True at real (non-padding) targets; key_padding: B x T,
    True at padded decoder inputs (keys).
    """
    bsz, tgt_len = hints.shape
    rows = torch.arange(tgt_len, device=hints.device).view(1, -1)
    hinted = hints.ge(0)
    if bool((hinted & hints.gt(rows)).any()):
        b, t = [int(i) for i in torch.nonzero(hinted & hints.gt(rows))[0]]
        raise PointerLossError(
            f"{CRITERION_NAME}: pointer hint of batch row {b}, decoder row {t} points to a later row {int(hints[b, t])}; "
            "hints must point backwards (t - d_t with d_t >= 0)"
        )
    safe = hints.clamp_min(0)
    valid = hinted & target_real & ~key_padding.gather(1, safe)
    if ignore_prefix_size > 0:
        valid[:, :ignore_prefix_size] = False
    self_hint = hints.eq(rows)
    index = safe.view(bsz, 1, tgt_len, 1)
    if len(probs) == 0:  # every used layer dropped (LayerDrop)
        return hints.new_zeros((), dtype=torch.float), hints.new_zeros(())
    total = None
    for layer_probs, hides in zip(probs, hides_diagonal):
        heads = layer_probs.size(1)
        picked = layer_probs.gather(3, index.expand(bsz, heads, tgt_len, 1)).squeeze(3)  # B x H x T
        if picked.dtype in (torch.float16, torch.bfloat16):
            picked = picked.float()  # the log and the sums in float32 under --fp16 / --bf16
        use = valid & ~self_hint if hides else valid
        if per_head:
            selected = torch.where(use.unsqueeze(1), picked, torch.ones_like(picked))
            nll = -selected.clamp_min(POINTER_EPS).log().mean(1)
        else:
            selected = torch.where(use, picked.mean(1), torch.ones_like(picked[:, 0]))
            nll = -selected.clamp_min(POINTER_EPS).log()
        layer_sum = nll.sum()
        total = layer_sum if total is None else total + layer_sum
    rows_used = valid & ~self_hint if all(hides_diagonal) else valid
    return total, rows_used.sum()


@register_criterion(CRITERION_NAME, dataclass=LabelSmoothedCrossEntropyWithPointerConfig)
class LabelSmoothedCrossEntropyWithPointerCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        pointer_loss_weight=1.0,
        pointer_loss_per_head=False,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not pointer_loss_weight >= 0 or math.isinf(pointer_loss_weight):
            raise ValueError(f"--pointer-loss-weight must be a finite number >= 0, got {pointer_loss_weight}")
        self.pointer_loss_weight = float(pointer_loss_weight)
        self.pointer_loss_per_head = bool(pointer_loss_per_head)
        if self.pointer_loss_weight > 0 and not getattr(task, "provides_pointer_hints", False):
            raise PointerLossError(
                f"{self.pointer_hints_needed_by} needs syntax hints in its samples, which task {type(task).__name__} "
                "does not provide; use --task translation_with_syntax or language_modeling_with_syntax "
                "(or --pointer-loss-weight 0)"
            )

    @property
    def pointer_hints_needed_by(self):
        """Read by the syntax tasks: hints become required once this criterion is built."""
        if self.pointer_loss_weight == 0:
            return None
        return f"--criterion {CRITERION_NAME} with --pointer-loss-weight {self.pointer_loss_weight:g}"

    def forward(self, model, sample, reduce=True):
        if self.pointer_loss_weight == 0:
            return super().forward(model, sample, reduce=reduce)
        if not reduce:
            raise PointerLossError(f"{CRITERION_NAME}: reduce=False is not supported with the pointer loss")
        hints = sample.get(POINTER_HINTS)
        if hints is None:
            raise PointerLossError(
                f"{self.pointer_hints_needed_by}: the sample has no {POINTER_HINTS}; its split was loaded without "
                "syntax hints (write them with data_prep/syntax_hints.py; --syntax-hints required makes a missing "
                "hint file an error at load time)"
            )
        layer_indices, modules = pointer_layers(model)
        with AttentionRecorder(modules) as recorder:
            loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)

        target = sample["target"]
        if hints.shape != target.shape:
            raise PointerLossError(f"{POINTER_HINTS} has shape {tuple(hints.shape)} but the target {tuple(target.shape)}")
        net_input = sample["net_input"]
        decoder_input = net_input["prev_output_tokens"] if "prev_output_tokens" in net_input else net_input["src_tokens"]
        layerdrop = isinstance(getattr(model.decoder, "layers", None), LayerDropModuleList)
        ran_probs, ran_hides = [], []
        for layer, module, probs in zip(layer_indices, modules, recorder.probs):
            if probs is None and layerdrop and model.training:
                continue  # dropped by --decoder-layerdrop in this pass: no term
            if probs is None or probs.dim() != 4 or probs.shape[0] != target.size(0) or probs.shape[2:] != (target.size(1),) * 2:
                shape = None if probs is None else tuple(probs.shape)
                raise PointerLossError(
                    f"{CRITERION_NAME}: decoder layer {layer} ({attention_kind(module)}) gave attention weights of shape "
                    f"{shape}, expected B x H x T x T = {target.size(0)} x H x {target.size(1)} x {target.size(1)}"
                )
            if torch.is_grad_enabled() and not probs.requires_grad and any(p.requires_grad for p in module.parameters()):
                raise PointerLossError(
                    f"{CRITERION_NAME}: the attention weights of decoder layer {layer} carry no gradient "
                    "(activation checkpointing, --checkpoint-activations, is not supported with the pointer loss)"
                )
            ran_probs.append(probs)
            ran_hides.append(bool(getattr(module, "hides_diagonal", False)))
        pointer_sum, rows = pointer_loss(
            ran_probs,
            ran_hides,
            hints,
            target.ne(self.padding_idx),
            decoder_input.eq(self.padding_idx),
            per_head=self.pointer_loss_per_head,
            ignore_prefix_size=self.ignore_prefix_size,
        )
        loss = loss + self.pointer_loss_weight * pointer_sum
        logging_output["loss"] = loss.data
        logging_output["pointer_loss"] = pointer_sum.data
        logging_output["pointer_rows"] = rows.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        if not any("pointer_rows" in log for log in logging_outputs):
            return
        pointer_sum = utils.item(sum(log.get("pointer_loss", 0) for log in logging_outputs))
        rows = utils.item(sum(log.get("pointer_rows", 0) for log in logging_outputs))
        metrics.log_scalar("pointer_rows", rows, round=1)
        if rows > 0:
            metrics.log_scalar("pointer_loss", pointer_sum / rows / math.log(2), rows, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        # every logged value is a sum over rows or tokens
        return True
