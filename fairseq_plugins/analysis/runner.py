"""Teacher-forced passes of a fairseq checkpoint over a data split, recording
the decoder self-attention of every layer (no generation).

Everything goes through fairseq's own APIs: the checkpoint and its task come
from ``checkpoint_utils.load_model_ensemble_and_task`` (with ``data``
pointed at the given directory), the split from ``task.load_dataset`` and the
batches from ``task.get_batch_iterator``. Translation models receive
``net_input`` (with ``prev_output_tokens``), language models ``src_tokens``;
in both cases the decoder input tokens that equal the dictionary's pad index
are the padding excluded from the statistics.
"""
import os
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import BaseWrapperDataset
from fairseq.modules import MultiheadAttention

from ..modules import default_kind
from ..modules.recording import AttentionRecorder, AttentionRecordingError, decoder_self_attentions, records_weights
from .stats import AttentionStatistics, LayerStatistics


class AnalysisError(ValueError):
    """Bad input to the attention analysis; the message names the option or file."""


@dataclass
class LayerInfo:
    index: int
    kind: str
    heads: Optional[int]
    has_distribution: bool


@dataclass
class Loaded:
    model: torch.nn.Module
    task: object
    cfg: object
    device: torch.device
    layers: List[LayerInfo]

    @property
    def recordable(self) -> List[int]:
        return [layer.index for layer in self.layers if layer.has_distribution]


def kind_name(module) -> str:
    name = getattr(module, "kind_name", None)
    if name is None and isinstance(module, MultiheadAttention):
        return f"{default_kind()} (fairseq MultiheadAttention)"  # (a stock fairseq model's attention)
    return name or type(module).__name__


def describe_layers(decoder) -> List[LayerInfo]:
    try:
        modules = decoder_self_attentions(decoder)
    except AttentionRecordingError as e:
        raise AnalysisError(f"--path: the model's decoder is not a fairseq Transformer decoder: {e}") from None
    return [
        LayerInfo(i, kind_name(m), getattr(m, "num_heads", None), records_weights(m)) for i, m in enumerate(modules)
    ]


def _available_splits(data: str) -> List[str]:
    names = set()
    for entry in os.listdir(data):
        if entry.endswith(".bin"):
            names.add(entry.split(".", 1)[0])
    return sorted(names)


def load(
    checkpoint: str,
    data: str,
    overrides: Optional[Dict] = None,
    cpu: bool = False,
) -> Loaded:
    """Load a checkpoint and its task with ``data`` as data directory."""
    if not os.path.isfile(checkpoint):
        raise AnalysisError(f"--path: checkpoint file not found: {checkpoint}")
    for directory in data.split(os.pathsep):  # fairseq's sharded form: dir1:dir2
        if not os.path.isdir(directory):
            raise AnalysisError(f"DATA: data directory not found: {directory}")
    arg_overrides = dict(overrides or {})
    arg_overrides["data"] = data
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint, arg_overrides)
    except Exception as e:  # torch.load: unpickling, zip and weights-only errors
        raise AnalysisError(f"--path: cannot read {checkpoint} as a fairseq checkpoint: {type(e).__name__}: {e}") from None
    if not isinstance(state, dict) or "model" not in state or (state.get("args") is None and state.get("cfg") is None):
        raise AnalysisError(f"--path: {checkpoint} is not a fairseq checkpoint (it needs 'model' and 'cfg' or 'args' entries)")
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=arg_overrides, state=state)
    except FileNotFoundError as e:
        raise AnalysisError(f"DATA: cannot set up the checkpoint's task from {data}: {e}") from None
    model = models[0]
    decoder = getattr(model, "decoder", None)
    if decoder is None:
        raise AnalysisError(f"--path: {type(model).__name__} has no decoder to analyse")
    layers = describe_layers(decoder)
    if not any(layer.has_distribution for layer in layers):
        kinds = ", ".join(f"layer {layer.index}: {layer.kind}" for layer in layers)
        raise AnalysisError(
            f"--path: no decoder layer of {checkpoint} has an attention distribution ({kinds}); "
            "CA/HA statistics and heatmaps need at least one such layer"
        )
    use_cuda = torch.cuda.is_available() and not cpu
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    model.to(device).eval()
    return Loaded(model, task, cfg, device, layers)


def load_split(loaded: Loaded, split: str):
    task = loaded.task
    try:
        task.load_dataset(split)
    except FileNotFoundError as e:
        data = str(getattr(getattr(task, "cfg", None), "data", "?"))
        first = data.split(os.pathsep)[0]
        splits = _available_splits(first) if os.path.isdir(first) else []
        raise AnalysisError(
            f"--gen-subset: split {split!r} not found in {data} ({e}); available splits: {', '.join(splits) or '(none)'}"
        ) from None
    return task.dataset(split)


class FirstSentences(BaseWrapperDataset):
    """The first ``count`` examples (dataset indices 0..count-1) of a dataset."""

    def __init__(self, dataset, count: int):
        super().__init__(dataset)
        self.count = min(count, len(dataset))

    def __len__(self):
        return self.count

    def ordered_indices(self):
        indices = self.dataset.ordered_indices()
        return indices[indices < self.count]

    @property
    def sizes(self):
        return self.dataset.sizes[: self.count]


def decoder_input(net_input: Dict) -> torch.Tensor:
    """prev_output_tokens of encoder-decoder models, src_tokens of language models."""
    if "prev_output_tokens" in net_input:
        return net_input["prev_output_tokens"]
    if "src_tokens" in net_input:
        return net_input["src_tokens"]
    raise AnalysisError(f"the task's batches have neither prev_output_tokens nor src_tokens (net_input keys: {sorted(net_input)})")


def record(loaded: Loaded, sample: Dict) -> Dict[int, torch.Tensor]:
    """One teacher-forced forward pass; returns {layer index: B x H x T x T}."""
    recorder = AttentionRecorder.for_decoder_self_attention(loaded.model.decoder, only_recordable=True)
    with torch.no_grad(), recorder:
        loaded.model(**sample["net_input"])
    tokens = decoder_input(sample["net_input"])
    out = {}
    for index, probs in zip(recorder.layer_indices, recorder.probs):
        if probs is None:
            raise AnalysisError(f"decoder layer {index} ({loaded.layers[index].kind}) was not called in the forward pass")
        expected = (tokens.shape[0], loaded.layers[index].heads or probs.shape[1], tokens.shape[1], tokens.shape[1])
        if probs.dim() != 4 or tuple(probs.shape) != expected:
            raise AnalysisError(
                f"decoder layer {index} ({loaded.layers[index].kind}) gave attention weights of shape "
                f"{tuple(probs.shape)}, expected B x H x T x T = {expected} (causal self-attention over the decoder input)"
            )
        out[index] = probs
    return out


@dataclass
class AnalysisResult:
    layers: List[LayerInfo]
    statistics: Dict[int, LayerStatistics]
    sentences: int = 0
    batches: int = 0
    tokens: int = 0
    padding: int = 0
    extra: Dict = field(default_factory=dict)


def check_bounds(max_tokens: Optional[int] = None, max_sentences: Optional[int] = None, max_batches: Optional[int] = None,
                 max_sentences_total: Optional[int] = None) -> None:
    """``analyse``'s bounds on the work, each positive or None; the CLI checks them before loading the checkpoint."""
    for option, value in (("--max-tokens", max_tokens), ("--max-sentences", max_sentences), ("--max-batches", max_batches),
                          ("--max-sentences-total", max_sentences_total)):
        if value is not None and value < 1:
            raise AnalysisError(f"{option} must be a positive integer, got {value}")


def analyse(
    loaded: Loaded,
    split: str,
    max_tokens: Optional[int] = None,
    max_sentences: Optional[int] = None,
    max_batches: Optional[int] = None,
    max_sentences_total: Optional[int] = None,
    per_head: bool = False,
    include_first: bool = False,
    skip_invalid_size_inputs: bool = False,
) -> AnalysisResult:
    """CA/HA of every decoder layer over ``split`` (see ``stats`` for the definitions).

    ``max_sentences_total`` keeps the first N examples of the split (dataset
    indices 0..N-1); ``max_batches`` stops after that many batches (in
    fairseq's batch order: sorted by length, as fairseq-generate).
    """
    check_bounds(max_tokens, max_sentences, max_batches, max_sentences_total)
    dataset = load_split(loaded, split)
    if len(dataset) == 0:
        raise AnalysisError(f"--gen-subset: split {split!r} is empty")
    if max_sentences_total is not None:
        dataset = FirstSentences(dataset, max_sentences_total)
    if max_tokens is None and max_sentences is None:
        max_tokens = 4096
    task, model = loaded.task, loaded.model
    pad = model.decoder.dictionary.pad()
    accumulators = {i: AttentionStatistics(per_head=per_head, include_first=include_first) for i in loaded.recordable}
    result = AnalysisResult(loaded.layers, {})
    with warnings.catch_warnings():
        # fairseq's iterator asks for pinned memory, which torch refuses (with a warning) without an accelerator
        warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true but no accelerator.*")
        try:
            iterator = task.get_batch_iterator(
                dataset=dataset,
                max_tokens=max_tokens,
                max_sentences=max_sentences,
                max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                ignore_invalid_inputs=skip_invalid_size_inputs,
                # keep every sentence: the default multiple (8) drops a last partial batch
                required_batch_size_multiple=1,
                seed=1,
                num_workers=0,
            ).next_epoch_itr(shuffle=False)
        except Exception as e:
            if not str(e).startswith("Size of sample"):
                raise
            raise AnalysisError(f"--gen-subset {split}: {e}") from None
        for sample in iterator:
            if max_batches is not None and result.batches >= max_batches:
                break
            if not sample:
                continue
            if loaded.device.type == "cuda":
                sample = utils.move_to_cuda(sample)
            tokens = decoder_input(sample["net_input"])
            real = tokens.ne(pad)
            for index, probs in record(loaded, sample).items():
                accumulators[index].update(probs, real)
            result.batches += 1
            result.sentences += tokens.shape[0]
            result.tokens += int(real.sum())
            result.padding += int((~real).sum())
    if result.batches == 0:
        raise AnalysisError(f"--gen-subset: no batch of split {split!r} could be formed (all inputs too long for the model?)")
    result.statistics = {i: acc.result() for i, acc in accumulators.items()}
    return result


@dataclass
class SentenceAttention:
    index: int
    tokens: List[str]
    # {layer index: H x T x T over the sentence's real positions}; layers
    # without an attention distribution are absent
    probs: Dict[int, torch.Tensor]


def sentence_attention(loaded: Loaded, split: str, index: int) -> SentenceAttention:
    """The decoder self-attention of example ``index`` of ``split`` alone (no padding)."""
    dataset = load_split(loaded, split)
    if not 0 <= index < len(dataset):
        raise AnalysisError(f"--sentence-index: {index} is out of range for split {split!r} ({len(dataset)} examples: 0..{len(dataset) - 1})")
    sample = dataset.collater([dataset[index]])
    if loaded.device.type == "cuda":
        sample = utils.move_to_cuda(sample)
    tokens = decoder_input(sample["net_input"])[0]
    dictionary = loaded.model.decoder.dictionary
    real = tokens.ne(dictionary.pad())
    positions = real.nonzero().squeeze(1)
    recorded = record(loaded, sample)
    probs = {i: p[0][:, positions][:, :, positions].detach().float().cpu() for i, p in recorded.items()}
    return SentenceAttention(index, [dictionary[int(t)] for t in tokens[positions]], probs)
