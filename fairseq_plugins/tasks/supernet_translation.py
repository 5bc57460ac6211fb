"""``supernet_translation``: fairseq's translation task for training a ``mixed_supertransformer`` with a
sampling rule of several sub-networks per update, and validation of the largest and the smallest.

``--supernet-sampling random`` trains one sub-network per update (what the supernet does under plain
``--task translation`` too); ``sandwich`` trains the largest, the smallest and ``--supernet-sandwich-random``
random ones on the same batch (the sandwich rule of once-for-all / BigNAS), the gradient being the mean of
their losses' gradients. Every sub-network of an update is a function of ``--seed`` and the update number
only, so data-parallel ranks and resumed runs train the same ones. Validation reports the largest
sub-network's loss as ``loss`` (what ``checkpoint_best`` follows) and the smallest's as ``smallest_loss``.
"""
import math
from dataclasses import dataclass, field
from typing import List

import torch
from fairseq import metrics
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..models.architecture import Architecture
from ..modules import AttentionConfigError

SAMPLING_RULES = ChoiceEnum(["random", "sandwich"])
# Logged sums that are averaged over an update's sub-networks (the counts are the same for all).
AVERAGED = ("loss", "nll_loss")


@dataclass
class SupernetTranslationConfig(TranslationConfig):
    supernet_sampling: SAMPLING_RULES = field(
        default="random",
        metadata={"help": "sub-networks trained per update: random (one sampled) or sandwich (the largest, the smallest "
                  "and --supernet-sandwich-random sampled ones, the mean of their losses)"},
    )
    supernet_sandwich_random: int = field(
        default=2, metadata={"help": "sandwich: sampled sub-networks besides the largest and the smallest (default: 2)"}
    )


def unwrapped(model):
    """The supernet inside fairseq's data-parallel wrappers (they forward attribute reads to the module but
    keep assignments, such as the active architecture, for themselves)."""
    from ..models.supertransformer import MixedSuperTransformerModel

    while not isinstance(model, MixedSuperTransformerModel) and hasattr(model, "module"):
        model = model.module
    return model


@register_task("supernet_translation", dataclass=SupernetTranslationConfig)
class SupernetTranslationTask(TranslationTask):
    cfg: SupernetTranslationConfig

    def build_model(self, cfg, from_checkpoint=False):
        from ..models.supertransformer import MixedSuperTransformerModel

        if self.cfg.supernet_sandwich_random < 0:
            raise AttentionConfigError(f"--supernet-sandwich-random must be >= 0, got {self.cfg.supernet_sandwich_random}")
        if self.cfg.eval_bleu:
            raise AttentionConfigError("--eval-bleu: not supported with a supernet (beam search needs a sub-network: "
                                       "evaluate exported sub-networks with fairseq-generate)")
        model = super().build_model(cfg, from_checkpoint)
        if not isinstance(model, MixedSuperTransformerModel):
            raise AttentionConfigError(f"--task supernet_translation trains a supernet: use --arch mixed_supertransformer "
                                       f"(got {type(model).__name__}); other models train with --task translation")
        return model

    def architectures_of_update(self, model, update_num: int) -> List[Architecture]:
        """The sub-networks update ``update_num`` trains (module docstring)."""
        if self.cfg.supernet_sampling == "random":
            return [model.sample(update_num)]
        return ([model.space.extreme(largest=True), model.space.extreme(largest=False)]
                + [model.sample(update_num, index) for index in range(1, self.cfg.supernet_sandwich_random + 1)])

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        model.train()
        model.set_num_updates(update_num)
        supernet = unwrapped(model)
        architectures = self.architectures_of_update(supernet, update_num)
        total, logging = 0.0, None
        for architecture in architectures:
            supernet.active = architecture  # (in the space by construction)
            loss, sample_size, logging_output = criterion(model, sample)
            if ignore_grad:
                loss *= 0
            optimizer.backward(loss / len(architectures))
            total += loss.detach() / len(architectures)
            if logging is None:
                logging = dict(logging_output)
                for key in AVERAGED:
                    if key in logging:
                        logging[key] = logging[key] / len(architectures)
            else:
                for key in AVERAGED:
                    if key in logging:
                        logging[key] = logging[key] + logging_output[key] / len(architectures)
        return total, sample_size, logging

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging = super().valid_step(sample, model, criterion)  # eval(): the largest
        supernet = unwrapped(model)
        supernet.active = supernet.space.extreme(largest=False)
        with torch.no_grad():
            _, _, smallest = criterion(model, sample)
        supernet.active = supernet.space.extreme(largest=True)
        for key in AVERAGED:
            if key in smallest:
                logging[f"smallest_{key}"] = smallest[key]
        return loss, sample_size, logging

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not any("smallest_loss" in log for log in logging_outputs):
            return
        size = sum(log.get("sample_size", 0) for log in logging_outputs)
        tokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        loss = sum(log.get("smallest_loss", 0) for log in logging_outputs)
        metrics.log_scalar("smallest_loss", loss / size / math.log(2), size, round=3)
        if any("smallest_nll_loss" in log for log in logging_outputs):
            nll = sum(log.get("smallest_nll_loss", 0) for log in logging_outputs)
            metrics.log_scalar("smallest_nll_loss", nll / tokens / math.log(2), tokens, round=3)
