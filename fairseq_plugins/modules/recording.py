"""Record the attention distributions of attention modules during an ordinary
forward pass, for losses on attention (BET(SG)'s pointer loss) and analysis
(current vs historical attention, heatmaps).

fairseq's layers call their self-attention with ``need_weights=False``; the
recorder asks every recorded module for per-head weights instead (through
forward hooks, so neither fairseq's layers nor the kinds change) and hands the
caller exactly what it asked for. Recorded weights are fairseq's
``need_head_weights`` weights transposed to B x H x T x S: the distributions
*before* attention dropout, still attached to the autograd graph.

Usage::

    with AttentionRecorder.for_decoder_self_attention(model.decoder) as recorder:
        net_output = model(**sample["net_input"])
    probs = recorder.probs  # one B x H x T x S tensor per decoder layer
"""
from typing import List, Optional, Sequence

from fairseq.modules import MultiheadAttention
from torch import Tensor, nn


class AttentionRecordingError(ValueError):
    """The modules asked for cannot be recorded (no attention distribution)."""


def decoder_self_attentions(decoder) -> List[nn.Module]:
    """The self-attention module of every layer of a fairseq Transformer decoder."""
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise AttentionRecordingError(f"{type(decoder).__name__} has no `layers`: not a fairseq Transformer decoder")
    modules = []
    # nn.ModuleList's own iterator: a LayerDropModuleList's (--decoder-layerdrop)
    # drops layers at random in training mode.
    for layer in nn.ModuleList.__iter__(layers):
        # Activation checkpointing / FSDP wrap layers; the wrapped module keeps self_attn.
        inner = getattr(layer, "module", layer)
        attn = getattr(inner, "self_attn", None) or getattr(layer, "self_attn", None)
        if attn is None:
            raise AttentionRecordingError(f"decoder layer {type(layer).__name__} has no self_attn")
        modules.append(attn)
    return modules


def records_weights(module: nn.Module) -> bool:
    """Whether an attention module has an attention distribution to record."""
    return bool(getattr(module, "returns_attention_weights", True))


class AttentionRecorder:
    """Context manager that records the per-head attention weights of ``modules``.

    ``probs[i]`` is the B x H x T x S distribution of ``modules[i]`` in the
    last forward pass inside the context (None before any call). Only
    full (non-incremental) passes are recorded; incremental calls pass through.
    """

    def __init__(self, modules: Sequence[nn.Module]):
        modules = list(modules)
        unrecordable = [type(m).__name__ for m in modules if not records_weights(m)]
        if unrecordable:
            raise AttentionRecordingError(
                f"attention modules without an attention distribution cannot be recorded: {', '.join(unrecordable)}"
            )
        self.modules = modules
        self.probs: List[Optional[Tensor]] = [None] * len(modules)
        self._handles = []
        self._caller_wanted: List[Optional[tuple]] = [None] * len(modules)

    @classmethod
    def for_decoder_self_attention(cls, decoder, only_recordable: bool = False) -> "AttentionRecorder":
        """Recorder over a decoder's self-attention layers. With ``only_recordable``
        layers whose kind has no distribution are left out (``layer_indices``
        says which layers ``probs`` belong to)."""
        modules = decoder_self_attentions(decoder)
        indices = [i for i, m in enumerate(modules) if records_weights(m) or not only_recordable]
        recorder = cls([modules[i] for i in indices])
        recorder.layer_indices = indices
        return recorder

    def __enter__(self):
        for index, module in enumerate(self.modules):
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(index), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_hook(index), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return False

    def _pre_hook(self, index):
        def hook(module, args, kwargs):
            if kwargs.get("incremental_state") is not None:
                self._caller_wanted[index] = None
                return None
            self._caller_wanted[index] = (kwargs.get("need_weights", True), kwargs.get("need_head_weights", False))
            kwargs = dict(kwargs, need_weights=True, need_head_weights=True)
            if isinstance(module, MultiheadAttention):
                # fairseq's full-pass fast path (F.multi_head_attention_forward)
                # averages the heads even when per-head weights are asked for;
                # static_kv=True, a no-op without incremental state, selects its
                # explicit path. (Our softmax kind does this itself.)
                kwargs["static_kv"] = True
            return args, kwargs

        return hook

    def _post_hook(self, index):
        def hook(module, args, kwargs, output):
            wanted = self._caller_wanted[index]
            if wanted is None:
                return None
            out, head_weights = output
            if head_weights is None:
                raise AttentionRecordingError(f"{type(module).__name__} returned no weights although asked for them")
            # fairseq's per-head weights are H x B x T x S.
            if head_weights.dim() != 4:
                raise AttentionRecordingError(
                    f"{type(module).__name__} returned weights of shape {tuple(head_weights.shape)} for "
                    "need_head_weights=True; expected H x B x T x S"
                )
            self.probs[index] = head_weights.transpose(0, 1)
            need_weights, need_head_weights = wanted
            if not need_weights and not need_head_weights:
                return out, None
            if need_head_weights:
                return out, head_weights
            return out, head_weights.mean(dim=0)

        return hook
