"""Sub-networks of a trained supernet (``mixed_supertransformer``): their inherited validation loss, and
their export as standalone ``mixed_transformer`` checkpoints that fairseq-generate, fairseq-train
--finetune-from-model and the hub load like any other."""
import json
import math
import os
from typing import Dict, Iterator, Optional, Sequence, Tuple

import torch

from ..files import TextFileError, atomic_output, read_text
from ..models.architecture import Architecture
from ..modules import AttentionConfigError


SUPERNETS = ("mixed_supertransformer", "mixed_supertransformer_lm")


class SupernetError(AttentionConfigError):
    """A checkpoint or an architecture the sub-network tools cannot use; the message names it."""


def load_supernet(checkpoint: str, overrides: Optional[Dict] = None):
    """(model, task, saved state) of a supernet checkpoint; refused with a clear error when it is not one."""
    from fairseq import checkpoint_utils

    from .. import register

    register()  # registers the models and kinds

    if not os.path.isfile(checkpoint):
        raise SupernetError(f"--checkpoint {checkpoint}: no such file")
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    arch = getattr(state["cfg"]["model"], "arch", None) if state.get("cfg") is not None else None
    if arch not in SUPERNETS:
        raise SupernetError(f"--checkpoint {checkpoint}: not a supernet (its model is {arch!r}, expected "
                            f"{' or '.join(SUPERNETS)})")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides or {}, state=state)
    return models[0], task, state


def read_architecture(path: str, model, option: str = "--architecture") -> Architecture:
    """The architecture in ``path`` (JSON, as ``sample`` prints; ``option`` names it in errors), which must be
    in the supernet's space."""
    try:
        architecture = Architecture.from_json(read_text(path))
    except (TextFileError, AttentionConfigError) as error:
        raise SupernetError(f"{option} {path}: {error}") from None
    model.space.check_contains(architecture, f"{option} {path}")
    return architecture


def export(checkpoint: str, architecture_path: str, output: str) -> Tuple[int, Architecture]:
    """Write ``output``: a ``mixed_transformer`` (``mixed_transformer_lm``) checkpoint holding only the
    sub-network's weights (copies of its slices) and options; returns its parameter count and architecture."""
    model, task, state = load_supernet(checkpoint)
    architecture = read_architecture(architecture_path, model)
    subnetwork, args = model.subnetwork_and_args(architecture)
    exported = {
        "args": None,
        "cfg": {**state["cfg"], "model": args, "task": standalone_task_config(state["cfg"]["task"])},
        "model": subnetwork.state_dict(),
        "criterion": state.get("criterion"),
        # the sub-network was not trained as this model: no optimizer or data-iterator state to resume from
        "optimizer_history": [{"criterion_name": entry.get("criterion_name"), "optimizer_name": entry.get("optimizer_name"),
                               "lr_scheduler_state": {}, "num_updates": 0} for entry in state.get("optimizer_history", [])[-1:]],
        "task_state": state.get("task_state", {}),
        "extra_state": {"exported_from": {"supernet": os.path.abspath(checkpoint), "architecture": architecture.to_dict()}},
    }
    with atomic_output(output, "wb") as f:
        torch.save(exported, f)
    parameters = sum({p.data_ptr(): p.numel() for p in subnetwork.parameters()}.values())
    return parameters, architecture


def counted_cost(model, task, architecture: Architecture, source_length: int, target_length: int) -> Dict[str, int]:
    """Parameters and forward FLOPs of a sub-network of a loaded supernet (``complexity.architecture_cost``
    through ``cli.model_costs``: the registry's per-kind counts, FFNs, norms, embeddings and output projection
    at the supernet's dictionary sizes), for one sentence pair of the stated lengths."""
    from ..cli.model_costs import model_cost

    counted = model_cost(model.subnetwork_args(architecture), source_length, target_length)
    vocab = len(task.target_dictionary)
    extra = 0  # the encoder's embeddings have the source dictionary's rows
    if not model.LANGUAGE_MODEL and not getattr(model.args, "share_all_embeddings", False):
        extra = (len(task.source_dictionary) - vocab) * architecture.encoder_embed_dim
    return {"parameters": counted.total_parameters(vocab) + extra, "forward_flops": counted.total_flops(vocab)}


def cost(checkpoint: str, architecture_path: str, source_length: int = 30, target_length: int = 30,
         latency=None, reference_path: Optional[str] = None, device: str = "cpu") -> Dict:
    """``counted_cost`` of a sub-network; with ``latency`` (``latency.LatencySettings``), also the measured
    latency of the exported model (``subnetwork``: what ``export`` writes) relative to the reference
    architecture in ``reference_path`` (default: the space's largest), by ``latency.measure``'s protocol."""
    model, task, _ = load_supernet(checkpoint)
    architecture = read_architecture(architecture_path, model)
    result = {"architecture": architecture.to_dict(), "source_length": source_length, "target_length": target_length,
              **counted_cost(model, task, architecture, source_length, target_length)}
    if latency is not None:
        from .latency import measure_subnetwork

        result["latency"] = measure_subnetwork(model, task.target_dictionary, architecture,
                                               reference_architecture(reference_path, model), latency, device)
    return result


def reference_architecture(path: Optional[str], model) -> Architecture:
    """The latency's reference: the architecture in ``path`` (``--reference``), or the space's largest."""
    from .latency import default_reference

    return read_architecture(path, model, "--reference") if path else default_reference(model)


def standalone_task_config(task_cfg):
    """The task configuration of an exported sub-network: a supernet's training task (``supernet_translation``,
    ``supernet_language_modeling``) becomes fairseq's (``translation``, ``language_modeling``) with the same
    options (without the sampling ones)."""
    from omegaconf import OmegaConf

    from .supernet_tasks import PLAIN_TASKS

    values = OmegaConf.to_container(task_cfg) if OmegaConf.is_config(task_cfg) else dict(task_cfg)
    if values.get("_name") in PLAIN_TASKS:
        values = {key: value for key, value in values.items() if not key.startswith("supernet_")}
        values["_name"] = PLAIN_TASKS[values["_name"]]
    return values


def load_subset(task, subset: str) -> None:
    """``task.load_dataset(subset)``; a subset the data folder does not hold is refused naming the ones it does."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError:
        data = str(task.cfg.data).split(os.pathsep)[0]
        held = sorted({name.split(".")[0] for name in os.listdir(data) if name.endswith(".idx")}) if os.path.isdir(data) else []
        raise SupernetError(f"--subset {subset}: no such subset in the data folder {data} (it holds: "
                            f"{', '.join(held) or 'none'})") from None


class InheritedLoss:
    """The loss of sub-networks inside a loaded supernet on ``subset`` (fairseq's criterion of the checkpoint,
    in bits per token as fairseq logs it; nothing extracted): the data and the criterion are read once, then
    ``evaluate`` runs one architecture (``collect`` runs hundreds)."""

    def __init__(self, model, task, state, subset: str = "valid", max_tokens: int = 4096):
        from fairseq import utils

        self.model, self.subset = model.eval(), subset
        self.criterion = task.build_criterion(state["cfg"]["criterion"])
        self.criterion.eval()
        load_subset(task, subset)
        iterator = task.get_batch_iterator(dataset=task.dataset(subset), max_tokens=max_tokens,
                                           max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                                           ignore_invalid_inputs=False, required_batch_size_multiple=1,  # every sentence
                                           seed=1).next_epoch_itr(shuffle=False)
        self.batches = list(iterator)

    def evaluate(self, architecture: Architecture) -> Dict[str, float]:
        self.model.set_active(architecture)
        loss = nll = tokens = 0.0
        with torch.no_grad():
            for sample in self.batches:
                _, _, logging = self.criterion(self.model, sample)
                loss += float(logging["loss"])
                nll += float(logging.get("nll_loss", logging["loss"]))
                tokens += float(logging["ntokens"])
        if tokens == 0:
            raise SupernetError(f"--subset {self.subset}: no tokens to evaluate")
        return {"architecture": architecture.to_dict(), "subset": self.subset, "tokens": int(tokens),
                "loss": loss / tokens / math.log(2), "nll_loss": nll / tokens / math.log(2)}


def evaluate_architectures(checkpoint: str, architecture_paths: Sequence[Optional[str]], subset: str = "valid",
                           max_tokens: int = 4096, bleu: Optional[Dict] = None) -> Iterator[Dict]:
    """Each architecture's inherited loss on ``subset`` (``InheritedLoss``; a path None: the space's largest), in
    order, and with ``bleu`` (``validation_bleu``'s options) its beam-search BLEU too. The supernet is loaded once
    and the loss's batches read once for all of them, and every architecture is read and checked before the first
    is evaluated."""
    model, task, state = load_supernet(checkpoint)
    if bleu is not None and model.LANGUAGE_MODEL:
        raise SupernetError(f"--bleu: {checkpoint} is a language-model supernet (BLEU scores translations)")
    architectures = [read_architecture(path, model) if path else model.space.extreme(largest=True)
                     for path in architecture_paths]
    losses = InheritedLoss(model, task, state, subset, max_tokens)
    for architecture in architectures:
        result = losses.evaluate(architecture)
        if bleu is not None:
            scored = validation_bleu(model, task, architecture, subset, **bleu)
            result.update({key: value for key, value in scored.items() if key not in result})
        yield result


def validation_bleu(model, task, architecture: Architecture, subset: str = "valid", beam: int = 5,
                    lenpen: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200, post_process: Optional[str] = None,
                    batch_size: int = 64, tokenize: str = "13a", hypotheses_path: Optional[str] = None) -> Dict:
    """The inherited sub-network's beam-search BLEU on ``subset`` (``model``, ``task``: a loaded translation
    supernet, as ``load_supernet`` returns them): sacreBLEU of its hypotheses against the
    references, both as ``fairseq-generate --scoring sacrebleu --post-process P`` scores them (the same
    generator, defaults and string post-processing). The sub-network is ``subnetwork``'s copy of its slices,
    in memory: nothing is written. ``hypotheses_path``: also write the hypotheses there, one line per
    sentence in the subset's order (atomically)."""
    import sacrebleu
    from fairseq import utils
    from fairseq.sequence_generator import SequenceGenerator

    subnetwork = model.subnetwork(architecture).eval()
    dictionary = task.target_dictionary
    generator = SequenceGenerator([subnetwork], dictionary, beam_size=beam, len_penalty=lenpen, max_len_a=max_len_a,
                                  max_len_b=max_len_b)
    # fairseq-generate strips what the generator adds (its get_symbols_to_strip_from_output)
    strip = {dictionary.eos()} | set(getattr(generator, "symbols_to_strip_from_output", ()))
    load_subset(task, subset)
    iterator = task.get_batch_iterator(dataset=task.dataset(subset), max_sentences=batch_size,
                                       max_positions=utils.resolve_max_positions(task.max_positions(), subnetwork.max_positions()),
                                       ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=1
                                       ).next_epoch_itr(shuffle=False)
    hypotheses, references = {}, {}
    with torch.no_grad():
        for sample in iterator:
            outputs = task.inference_step(generator, [subnetwork], sample)
            for i, sample_id in enumerate(sample["id"].tolist()):
                target = utils.strip_pad(sample["target"][i], dictionary.pad()).int()
                references[sample_id] = dictionary.string(target, post_process, escape_unk=True, extra_symbols_to_ignore=strip)
                hypotheses[sample_id] = dictionary.string(outputs[i][0]["tokens"].int(), post_process,
                                                          extra_symbols_to_ignore=strip)
    if not hypotheses:
        raise SupernetError(f"--subset {subset}: no sentences to translate")
    order = sorted(hypotheses)
    bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in order], [[references[i] for i in order]], tokenize=tokenize)
    if hypotheses_path:
        with atomic_output(hypotheses_path, "w") as f:
            f.writelines(hypotheses[i] + "\n" for i in order)
    return {"architecture": architecture.to_dict(), "subset": subset, "sentences": len(order), "beam": beam,
            "lenpen": lenpen, "max_len_a": max_len_a, "max_len_b": max_len_b, "post_process": post_process,
            "tokenize": tokenize, "bleu": bleu.score}


def to_json(result) -> str:
    return json.dumps(result)
