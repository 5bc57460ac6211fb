"""``mixed_supertransformer`` (and ``mixed_supertransformer_lm``, over a language-model space): a
weight-sharing supernet over a search space (``--search-space``), the SuperTransformer of Hardware-Aware
Transformers with the attention kind of every sub-layer as one more choice (the mixed-attention paper's
search, Liu et al., Table 1).

Weight sharing as HAT: the supernet holds, per parameter, one container as large as the largest shape any
architecture of the space gives it; a sub-network's parameter is the leading slice of its container along
every dimension (embeddings, projections, FFNs, layer norms), and a sub-network with fewer layers uses the
first ones. A parameter that a kind declares as equal parts concatenated along its last dimension
(``concatenated_parameters``: BET's score weight [w_H ; w_K]) takes the leading slice of each part, so that
a part shares weights with the same part of every other sub-network. Head counts: with the space's
``head_dim: sliced`` a sub-layer of width e and h heads uses the leading e x e block of its projections,
split into h heads; with ``head_dim: fixed`` every head has the space's head dimension d_h and the sub-layer
uses the leading h d_h rows (q, k, v) and columns (output projection), the first h heads. The sub-network
itself is the ordinary ``mixed_transformer`` (``mixed_transformer_lm``) model of its ``Architecture``, run
with ``torch.func.functional_call`` on the slices: the code that runs inside the supernet is the code of the
exported model, so both compute the same function by construction, and the gradients of a training step
reach exactly the slices the sampled sub-network uses.

Attention kinds whose only parameters are the q/k/v/out projections (softmax, cosFormer: those of
fairseq's MultiheadAttention) share one set of projection containers per sub-layer, so a sub-layer keeps
its projections when the search switches it between them; a kind with other parameters (Extractors,
BET's score weights) keeps containers of its own, sliced the same way; ``--supernet-separate-kind-weights``
gives every kind its own.

Training: every update trains one sub-network sampled from the space by a generator seeded with
``--seed`` and the update number (``set_num_updates``), so that data-parallel ranks and resumed runs
train the same ones. ``eval()`` makes the largest architecture active (fairseq's validation reports its
loss); ``set_active`` chooses another.
"""
import argparse
import collections
import copy
import dataclasses
import json
import random
from typing import Dict, Optional, Tuple

import torch
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS
from torch import nn

from ..models.architecture import Architecture, architecture_options
from ..models.mixed_transformer import MixedTransformerModel, mixed_transformer_base
from ..models.mixed_transformer_lm import MixedTransformerLanguageModel, mixed_transformer_lm_base, resolve_lm_sizes
from ..modules import ATTENTION_REGISTRY, AttentionConfigError
from .space import SearchSpace

# The parameters of fairseq's MultiheadAttention: kinds with no others share them across kinds.
PROJECTION_PARAMETERS = frozenset(f"{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")) | {"out_proj.weight", "out_proj.bias"}
# Sub-networks built recently, kept for the next steps (building one allocates and initialises its modules).
TEMPLATE_CACHE = 8
# Options the supernet's own options hold that a sub-network recomputes from its architecture.
DERIVED_OPTIONS = ("decoder_output_dim", "decoder_input_dim", "architecture", "preset", "architecture_file",
                   "encoder_layers_to_keep", "decoder_layers_to_keep")


def _container_name(key: str) -> str:
    """A parameter name as a key of ``nn.ParameterDict``, which refuses dots."""
    return key.replace(".", "/")


def _apply_to_buffers(module: nn.Module, fn):
    """``fn`` on every buffer of ``module`` and its sub-modules, as ``nn.Module._apply`` does to buffers."""
    for submodule in module.modules():
        for name, buffer in submodule._buffers.items():
            if buffer is not None:
                submodule._buffers[name] = fn(buffer)


def leading_index(shape, container_shape, parts: int = 1, device=None) -> tuple:
    """Where a parameter of ``shape`` lies in its container of ``container_shape``: the leading slice along
    every dimension; for a parameter of ``parts`` equal parts concatenated along its last dimension, the
    leading slice of each part (part p of the container starts at p x its part size)."""
    index = tuple(slice(0, s) for s in shape)
    if parts == 1:
        return index
    part, container_part = shape[-1] // parts, container_shape[-1] // parts
    columns = torch.cat([torch.arange(p * container_part, p * container_part + part, device=device) for p in range(parts)])
    return index[:-1] + (columns,)


class SupernetBase(BaseFairseqModel):
    """The supernet (module docstring) of the standalone model class ``STANDALONE`` (registered as
    ``STANDALONE_ARCH``); ``active``: the architecture ``forward`` runs."""

    STANDALONE = None  # the sub-networks' model class
    STANDALONE_ARCH = None  # its --arch name (what an exported checkpoint records)
    LANGUAGE_MODEL = False

    @classmethod
    def add_args(cls, parser):
        """The standalone model's options (a sub-network's: dropout, embeddings, ...) and the supernet's."""
        cls.STANDALONE.add_args(parser)
        parser.add_argument("--search-space", metavar="FILE",
                            help="the search space (YAML, see search_spaces/ and fairseq_plugins/search/space.py) whose "
                            "architectures the supernet holds")
        parser.add_argument("--supernet-separate-kind-weights", action="store_true",
                            help="give every attention kind its own projections (default: kinds whose parameters are the "
                            "q/k/v/out projections, softmax and cosformer, share them per sub-layer)")

    @classmethod
    def read_space(cls, args):
        """The search space of ``args``: the one recorded in a saved supernet's options, else --search-space
        (then recorded, so that the checkpoint loads without the file)."""
        from ..search.space import SearchSpace

        name = getattr(args, "arch", None) or cls.__name__
        recorded = getattr(args, "search_space_record", None)
        if recorded:  # a saved supernet: the space it was trained on, wherever its file is now
            space = SearchSpace.from_dict(json.loads(recorded), "the supernet checkpoint's search space")
        elif not getattr(args, "search_space", None):
            raise AttentionConfigError(f"--search-space: {name} needs a search space file (search_spaces/*.yaml)")
        else:
            space = SearchSpace.from_file(args.search_space)
            args.search_space_record = json.dumps(space.to_dict())  # saved with the options in the checkpoint
        if space.language_model != cls.LANGUAGE_MODEL:
            expected = ("a language-model space (no encoder section)" if cls.LANGUAGE_MODEL
                        else "an encoder-decoder space (with an encoder section)")
            raise AttentionConfigError(f"--search-space {args.search_space}: {name} needs {expected}; use "
                                       f"{'mixed_supertransformer_lm' if space.language_model else 'mixed_supertransformer'}")
        return space

    def __init__(self, args, task, space):
        super().__init__()
        self.args = args
        self.space = space
        # plain attributes (not modules: their parameters are not the supernet's)
        object.__setattr__(self, "_task", task)
        object.__setattr__(self, "_templates", collections.OrderedDict())
        self.separate_kind_weights = bool(getattr(args, "supernet_separate_kind_weights", False))
        self.seed = int(getattr(args, "seed", 1) or 1)
        self.active = space.extreme(largest=True)
        self.weights = nn.ParameterDict()
        self.container_parts: Dict[str, int] = {}  # container -> parts of a concatenated parameter (``leading_index``)
        # The containers: every parameter of every probe architecture (each kind and head count at the largest
        # widths and depths) at the largest shape any gives it, initialised as the probes' modules are.
        for probe in self._probes():
            template, keys = self._template(probe)
            for name, parameter in template.named_parameters():
                key = _container_name(keys[name])
                if key not in self.weights:
                    self.weights[key] = nn.Parameter(parameter.detach().clone())
                    continue
                container, parts = self.weights[key], self.container_parts.get(key, 1)
                if container.dim() != parameter.dim():
                    raise AttentionConfigError(f"supernet: parameter {keys[name]} has shapes of different ranks "
                                               f"({tuple(container.shape)}, {tuple(parameter.shape)})")
                shape = tuple(max(a, b) for a, b in zip(container.shape, parameter.shape))
                if shape != tuple(container.shape):
                    grown = parameter.new_zeros(shape)
                    grown[leading_index(container.shape, shape, parts)] = container.detach()
                    self.weights[key] = nn.Parameter(grown)
                    container = self.weights[key]
                with torch.no_grad():  # the slice a sub-network of this shape uses, as its module initialises it
                    container[leading_index(parameter.shape, container.shape, parts)] = parameter.detach()

    # --------------------------------------------------------- architectures ---
    def _probes(self):
        """Architectures that together give every parameter its largest shape: the largest one with each
        kind (the i-th of every placement's list, ``SearchSpace.extreme``) and each head count (the j-th of
        every heads list)."""
        enc, dec = self.space.encoder, self.space.decoder
        head_lists = [dec.attention_heads] + ([enc.attention_heads, dec.cross_attention_heads] if enc else [])
        for i in range(self.space.kind_choices):
            largest = self.space.extreme(largest=True, kind_index=i)
            for j in range(max(map(len, head_lists))):
                cross = {}
                if enc:
                    cross = dict(cross_attention_heads=dec.cross_attention_heads[j % len(dec.cross_attention_heads)])
                yield dataclasses.replace(
                    largest,
                    decoder_layers=tuple(dataclasses.replace(
                        layer, attention_heads=dec.attention_heads[j % len(dec.attention_heads)], **cross)
                        for layer in largest.decoder_layers),
                    encoder_layers=tuple(dataclasses.replace(
                        layer, attention_heads=enc.attention_heads[j % len(enc.attention_heads)])
                        for layer in largest.encoder_layers),
                ).check()

    def sample(self, update: int, index: int = 0) -> Architecture:
        """The ``index``-th sampled architecture of update ``update``: a function of the seed, the update number
        and the index only (``index`` > 0: further sub-networks of one update, ``--supernet-sampling sandwich``)."""
        return self.space.sample(random.Random(f"{self.seed}:{update}" + (f":{index}" if index else "")))

    def set_num_updates(self, num_updates):
        super().set_num_updates(num_updates)
        self.active = self.sample(num_updates)

    def train(self, mode: bool = True):
        """``eval()`` makes the largest architecture active (validation during training reports it; the next
        training step samples again); ``set_active`` after it chooses another."""
        if not mode:
            self.active = self.space.extreme(largest=True)
        return super().train(mode)

    def set_active(self, architecture: Architecture):
        """Run ``architecture`` (evaluation, export); it must be in the space."""
        self.space.check_contains(architecture)
        self.active = architecture

    # ------------------------------------------------------------ sub-networks ---
    def subnetwork_args(self, architecture: Architecture) -> argparse.Namespace:
        """The options of the standalone model of ``architecture``: the supernet's (dropout,
        embeddings, positions ...) with the architecture's per-layer options."""
        args = copy.deepcopy(argparse.Namespace(**vars(self.args)))
        for name in DERIVED_OPTIONS + ("search_space", "search_space_record", "supernet_separate_kind_weights"):
            if hasattr(args, name):
                delattr(args, name)
        vars(args).update(architecture_options(architecture))
        args.arch = args._name = self.STANDALONE_ARCH  # (fairseq picks the model class by _name when loading)
        return args

    def _template(self, architecture: Architecture) -> Tuple[BaseFairseqModel, Dict[str, str]]:
        """The standalone model of ``architecture`` (cached) and, for each of its parameters, the
        key of its container."""
        cached = self._templates.get(architecture)
        if cached is not None:
            self._templates.move_to_end(architecture)
            return cached
        with torch.random.fork_rng(devices=[]):  # building draws initial values: not from the training's generator
            template = self.STANDALONE.build_model(self.subnetwork_args(architecture), self._task)
        # every parameter name, tied ones too (fairseq ties the output projection to the embeddings): a tied
        # name takes the container of the first name of its tensor
        keys, first = {}, {}
        for name, parameter in template.named_parameters(remove_duplicate=False):
            keys[name] = keys[first[id(parameter)]] if id(parameter) in first else self._container_key(template, name)
            first.setdefault(id(parameter), name)
            self._record_parts(template, name, parameter, _container_name(keys[name]))
        self._follow_weights(template)
        self._templates[architecture] = (template, keys)
        while len(self._templates) > TEMPLATE_CACHE:
            self._templates.popitem(last=False)
        return template, keys

    def _follow_weights(self, template: nn.Module):
        """Put a new template's buffers (fairseq's sinusoidal positions, version counters) where ``.to()``,
        ``.cuda()`` or ``.half()`` has put the containers: on their device, floating ones in their dtype. (Its
        parameters stay where they were built: ``call_active`` replaces every one of them by a slice.)"""
        container = next(iter(self.weights.values()), None)
        if container is not None:
            _apply_to_buffers(template, lambda t: t.to(container.device, container.dtype if t.is_floating_point() else None))

    def _apply(self, fn, recurse=True):
        """``nn.Module._apply`` (what ``to``, ``cuda``, ``half`` ... run) on the containers, and on the buffers of
        the cached templates, which are no modules of the supernet (their parameters are not its)."""
        super()._apply(fn, recurse)
        for template, _ in self._templates.values():
            _apply_to_buffers(template, fn)
        return self

    def _container_key(self, template: nn.Module, name: str) -> str:
        for path, module in template.named_modules():
            kind = getattr(module, "kind_name", None)
            if kind not in ATTENTION_REGISTRY or not name.startswith(path + "."):
                continue
            own = {n for n, _ in module.named_parameters()}
            if not self.separate_kind_weights and own <= PROJECTION_PARAMETERS:
                return name
            return f"{path}@{kind}{name[len(path):]}"
        return name

    def _record_parts(self, template: nn.Module, name: str, parameter: torch.Tensor, container: str):
        """The parts of ``name`` if its module declares it concatenated (``concatenated_parameters``), recorded
        for its container, which every sub-network must then see the same way."""
        module_path, _, local = name.rpartition(".")
        parts = getattr(template.get_submodule(module_path), "concatenated_parameters", {}).get(local, 1)
        if parameter.shape[-1] % parts:
            raise AttentionConfigError(f"supernet: parameter {name} of shape {tuple(parameter.shape)} is declared as "
                                       f"{parts} concatenated parts, which its last dimension does not divide")
        if self.container_parts.setdefault(container, parts) != parts:
            raise AttentionConfigError(f"supernet: parameter {name} is {parts} concatenated parts in one sub-network "
                                       f"and {self.container_parts[container]} in another")

    def container_index(self, key: str, shape) -> tuple:
        """The index of a sub-network's parameter of ``shape`` in container ``key`` (``leading_index``)."""
        container = self.weights[key]
        return leading_index(shape, container.shape, self.container_parts.get(key, 1), container.device)

    def _sliced_parameters(self, template: nn.Module, keys: Dict[str, str]) -> Dict[str, torch.Tensor]:
        """Every parameter name of ``template`` (tied ones included) -> its slice of its container."""
        sliced = {}
        for name, parameter in template.named_parameters(remove_duplicate=False):
            key = _container_name(keys[name])
            sliced[name] = self.weights[key][self.container_index(key, parameter.shape)]
        return sliced

    def subnetwork(self, architecture: Optional[Architecture] = None) -> BaseFairseqModel:
        """A standalone model (``STANDALONE``) of ``architecture`` (default: ``active``) holding copies of
        its slices."""
        return self.subnetwork_and_args(architecture)[0]

    def subnetwork_and_args(self, architecture: Optional[Architecture] = None) -> Tuple[BaseFairseqModel, argparse.Namespace]:
        """``subnetwork`` and the model options it was built from (what ``export`` saves in the checkpoint)."""
        architecture = architecture or self.active
        self.space.check_contains(architecture)
        template, keys = self._template(architecture)
        args = self.subnetwork_args(architecture)
        with torch.random.fork_rng(devices=[]):
            model = self.STANDALONE.build_model(args, self._task)
        sliced = self._sliced_parameters(template, keys)
        with torch.no_grad():
            for name, parameter in model.named_parameters():  # (tied names once)
                parameter.copy_(sliced[name])
        return model.to(next(iter(self.weights.values())).device), args

    # ----------------------------------------------------------------- fairseq ---
    def call_active(self, *args, **kwargs):
        """The active sub-network's forward on the slices."""
        template, keys = self._template(self.active)
        template.train(self.training)
        parameters = self._sliced_parameters(template, keys)
        # tie_weights=False: the tied names are all given (functional_call's own tying leaves fairseq's output
        # projection untied after the call)
        return torch.func.functional_call(template, parameters, args, kwargs, tie_weights=False)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        template, _ = self._template(self.active)
        return template.get_normalized_probs(net_output, log_probs, sample)

    def max_decoder_positions(self):
        return self.args.max_target_positions


@register_model("mixed_supertransformer")
class MixedSuperTransformerModel(SupernetBase):
    """The encoder-decoder supernet: sub-networks are ``mixed_transformer`` models."""

    STANDALONE = MixedTransformerModel
    STANDALONE_ARCH = "mixed_transformer"

    @classmethod
    def build_model(cls, args, task):
        space = cls.read_space(args)
        if getattr(args, "share_all_embeddings", False) and not space.shared_embed_dim:
            raise AttentionConfigError(f"--share-all-embeddings needs one width for encoder and decoder: set "
                                       f"shared_embed_dim: true in --search-space {args.search_space}")
        # fairseq's default positions, as TransformerModel.build_model sets them (max_positions reads them)
        args.max_source_positions = getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS
        args.max_target_positions = getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS
        return cls(args, task, space)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        return self.call_active(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def max_positions(self):
        return (self.args.max_source_positions, self.args.max_target_positions)


@register_model("mixed_supertransformer_lm")
class MixedSuperTransformerLanguageModel(SupernetBase):
    """The language-model supernet (a space without an encoder section): sub-networks are
    ``mixed_transformer_lm`` models; trained with fairseq's ``language_modeling`` task (one sampled
    sub-network per update)."""

    STANDALONE = MixedTransformerLanguageModel
    STANDALONE_ARCH = "mixed_transformer_lm"
    LANGUAGE_MODEL = True

    @classmethod
    def build_model(cls, args, task):
        space = cls.read_space(args)
        resolve_lm_sizes(args, task)  # the LM defaults and positions (--tokens-per-sample, --add-bos-token)
        return cls(args, task, space)

    @property
    def supported_targets(self):
        return {"future"}

    def forward(self, src_tokens, **kwargs):
        return self.call_active(src_tokens, **kwargs)

    def max_positions(self):
        return self.args.max_target_positions


@register_model_architecture("mixed_supertransformer", "mixed_supertransformer")
def mixed_supertransformer(args):
    """fairseq's transformer defaults (dropout, positions, ...); widths, depths and per-layer choices come
    from the search space."""
    mixed_transformer_base(args)


@register_model_architecture("mixed_supertransformer_lm", "mixed_supertransformer_lm")
def mixed_supertransformer_lm(args):
    """fairseq's transformer_lm defaults; widths, depths and per-layer choices come from the search space."""
    mixed_transformer_lm_base(args)
