"""``supernet_translation`` and ``supernet_language_modeling``: fairseq's translation and language-modeling
tasks for training a supernet (``mixed_supertransformer``, ``mixed_supertransformer_lm``) with a sampling
rule of several sub-networks per update, and validation of the largest and the smallest.

``--supernet-sampling random`` trains one sub-network per update (what the supernet does under plain
``--task translation`` / ``language_modeling`` too): every layer's kind is drawn uniformly, so every kind of
a placement is trained as often as any other in expectation. ``sandwich`` trains, on the same batch, the
largest and the smallest sub-network once per attention kind (``SearchSpace.extremes_per_kind``: with every
sub-layer of the i-th kind of its placement's list, for each i) and ``--supernet-sandwich-random`` random
ones, the gradient being the mean of their losses' gradients. This is the sandwich rule of once-for-all /
BigNAS with its extremes taken per kind: with the extremes of the first kind only (all softmax), the other
kinds' weights would be trained by the random sub-networks alone, and their inherited losses would then
measure under-training rather than the kind. With k kinds an update trains 2k + R sub-networks. Every sub-network of an update is a function of
``--seed`` and the update number only, so data-parallel ranks and resumed runs train the same ones.
Validation reports the largest sub-network's loss as ``loss`` (what ``checkpoint_best`` follows) and the
smallest's as ``smallest_loss``.

Data-parallel training: a sub-network uses only some of the supernet's containers, so PyTorch's
DistributedDataParallel (fairseq's default ``--ddp-backend pytorch_ddp``/``c10d``) needs
``--find-unused-parameters`` (without it the second update stops with "Expected to have finished reduction
in the prior iteration"); the first update refuses a wrapper without it. Containers no sub-network of an
update uses then keep no gradient on any rank, as in a single-process run (``legacy_ddp`` gives them zeros).
The sub-networks of an update but the last run under the wrapper's ``no_sync``: one all-reduce per update.
"""
import contextlib
import math
from dataclasses import dataclass, field
from typing import List

import torch
from fairseq import metrics
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .supernet import MixedSuperTransformerLanguageModel, MixedSuperTransformerModel, SupernetBase

SAMPLING_RULES = ChoiceEnum(["random", "sandwich"])
# Each supernet task -> fairseq's task of the same options (an exported sub-network's).
PLAIN_TASKS = {"supernet_translation": "translation", "supernet_language_modeling": "language_modeling"}
# Logged sums that are averaged over an update's sub-networks (the counts are the same for all).
AVERAGED = ("loss", "nll_loss")


@dataclass
class SupernetSamplingConfig:
    """The sampling options both supernet tasks add to fairseq's task options."""

    supernet_sampling: SAMPLING_RULES = field(
        default="random",
        metadata={"help": "sub-networks trained per update: random (one sampled, every layer's kind uniform) or sandwich "
                  "(the largest and the smallest once per attention kind, with every sub-layer of that kind, so that every "
                  "kind in every placement is trained at every update as the first one is; then --supernet-sandwich-random "
                  "sampled ones; the mean of their losses: 2 x kinds + R sub-networks per update)"},
    )
    supernet_sandwich_random: int = field(
        default=2, metadata={"help": "sandwich: sampled sub-networks besides the largest and the smallest of each kind (default: 2)"}
    )


@dataclass
class SupernetTranslationConfig(TranslationConfig, SupernetSamplingConfig):
    pass


@dataclass
class SupernetLanguageModelingConfig(LanguageModelingConfig, SupernetSamplingConfig):
    pass


def unwrapped(model):
    """The supernet inside fairseq's data-parallel wrappers (they forward attribute reads to the module but
    keep assignments, such as the active architecture, for themselves)."""
    while not isinstance(model, SupernetBase) and hasattr(model, "module"):
        model = model.module
    return model


def check_data_parallel(model):
    """Refuse PyTorch's DistributedDataParallel without ``find_unused_parameters`` around a supernet (module
    docstring): its reducer would wait, at the next update, for the gradients of the containers this one left
    unused."""
    from torch.nn.parallel import DistributedDataParallel

    while not isinstance(model, SupernetBase) and hasattr(model, "module"):
        if isinstance(model, DistributedDataParallel) and not model.find_unused_parameters:
            raise AttentionConfigError(
                "--find-unused-parameters: a supernet's sub-networks leave containers unused, which "
                "--ddp-backend pytorch_ddp/c10d (fairseq's default) needs to be told (or use --ddp-backend legacy_ddp)")
        model = model.module


class SupernetTrainingMixin:
    """The sampling rule, validation of the largest and the smallest, and their metrics, over a fairseq
    task (``SUPERNET``: the supernet model class the task trains)."""

    SUPERNET = None
    SUPERNET_ARCH = None

    @property
    def sampling(self):
        """The task's options (fairseq's legacy tasks, such as language modeling, keep them in ``args``)."""
        return self.cfg if getattr(self, "cfg", None) is not None else self.args

    def check_supernet(self, model):
        if self.sampling.supernet_sandwich_random < 0:
            raise AttentionConfigError(f"--supernet-sandwich-random must be >= 0, got {self.sampling.supernet_sandwich_random}")
        if not isinstance(model, self.SUPERNET):
            raise AttentionConfigError(f"--task {self.task_name} trains a supernet: use --arch {self.SUPERNET_ARCH} "
                                       f"(got {type(model).__name__}); other models train with --task {PLAIN_TASKS[self.task_name]}")
        return model

    def architectures_of_update(self, model, update_num: int) -> List[Architecture]:
        """The sub-networks update ``update_num`` trains (module docstring)."""
        if self.sampling.supernet_sampling == "random":
            return [model.sample(update_num)]
        return (model.space.extremes_per_kind()
                + [model.sample(update_num, index) for index in range(1, self.sampling.supernet_sandwich_random + 1)])

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        model.train()
        model.set_num_updates(update_num)
        supernet = unwrapped(model)
        check_data_parallel(model)
        architectures = self.architectures_of_update(supernet, update_num)
        total, logging = 0.0, None
        for index, architecture in enumerate(architectures):
            supernet.active = architecture  # (in the space by construction)
            # the wrapper all-reduces the gradients once, after the last sub-network's backward
            last = index == len(architectures) - 1
            with contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync():
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


@register_task("supernet_translation", dataclass=SupernetTranslationConfig)
class SupernetTranslationTask(SupernetTrainingMixin, TranslationTask):
    cfg: SupernetTranslationConfig
    task_name, SUPERNET_ARCH, SUPERNET = "supernet_translation", "mixed_supertransformer", MixedSuperTransformerModel

    def build_model(self, cfg, from_checkpoint=False):
        if self.cfg.eval_bleu:
            raise AttentionConfigError("--eval-bleu: not supported with a supernet (beam search needs a sub-network: "
                                       "evaluate exported sub-networks with fairseq-generate)")
        return self.check_supernet(super().build_model(cfg, from_checkpoint))


@register_task("supernet_language_modeling", dataclass=SupernetLanguageModelingConfig)
class SupernetLanguageModelingTask(SupernetTrainingMixin, LanguageModelingTask):
    task_name, SUPERNET_ARCH, SUPERNET = ("supernet_language_modeling", "mixed_supertransformer_lm",
                                          MixedSuperTransformerLanguageModel)

    def build_model(self, args, from_checkpoint=False):
        return self.check_supernet(super().build_model(args, from_checkpoint))
