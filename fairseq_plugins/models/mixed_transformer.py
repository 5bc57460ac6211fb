"""``mixed_transformer``: fairseq's Transformer with every attention sub-layer,
head count and FFN width chosen per layer (mFormer, Liu et al.: "Neural
Architecture Search on Efficient Transformers and Beyond").

Only the hooks that build layers and attention are overridden; everything else
(embeddings, positions, layer norms, incremental decoding, beam search) is
fairseq's own code. With ``--encoder-decoder-connect`` the decoder hands fairseq's
layer loop the concatenation of the most encoder layers any decoder layer reads
(``connected_source``), and each layer takes its own prefix of it and folds its
attention weights back onto the S source positions (``MixedTransformerDecoderLayer.forward``).
"""
import contextvars
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
    transformer_vaswani_wmt_en_de_big,
)
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from ..modules import DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, AttentionConfigError, build_attention
from ..modules.options import ModelKindOptions
from ..checkpoint_compat import loaded_from
from .checkpoint_checks import load_checked
from .generation_checks import GenerationChecks
from .architecture import (
    Architecture,
    DecoderLayer,
    EncoderLayer,
    default_per_layer,
    describe_architecture,
    model_architecture,
    record_architecture,
    register_preset,
)
from .layout import (
    EncoderDecoderLayoutConfig,
    add_kind_options,
    layer_config,
    layer_count_config,
    resolve_kind_options,
    set_layout_defaults,
)


def wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class MixedTransformerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with this layer's choices; ``kind_options``: the model's ``ModelKindOptions``
    (every kind's typed options and the model-wide ``AttentionContext``), handed to the attention kinds."""

    def __init__(self, cfg, choices: EncoderLayer, kind_options: ModelKindOptions, return_fc=False):
        # kept before fairseq's __init__, which calls build_self_attention
        self.choices = choices
        self.kind_options = kind_options
        super().__init__(layer_config(cfg, "encoder", choices.attention_heads, choices.ffn_embed_dim), return_fc=return_fc)

    def build_self_attention(self, embed_dim, cfg):
        return build_attention(
            self.choices.attention_kind,
            ENCODER_SELF,
            embed_dim,
            self.choices.attention_heads,
            self.kind_options,
            dropout=cfg.attention_dropout,
            option_name="--encoder-attention-kinds",
            head_dim=self.choices.attention_head_dim,
        )


class MixedTransformerDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with this layer's choices (see MixedTransformerEncoderLayer)."""

    def __init__(self, cfg, choices: DecoderLayer, kind_options: ModelKindOptions, no_encoder_attn=False,
                 source_copies: int = 1):
        """``source_copies``: how many encoder layers' outputs the decoder concatenates into the encoder
        output every layer receives (the largest ``encoder_decoder_connect`` of its layers)."""
        self.choices = choices
        self.kind_options = kind_options
        self.source_copies = source_copies
        super().__init__(layer_config(cfg, "decoder", choices.attention_heads, choices.ffn_embed_dim), no_encoder_attn=no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn:
            raise ValueError("mixed decoder layers do not support add_bias_kv / add_zero_attn")
        return build_attention(
            self.choices.attention_kind,
            DECODER_SELF,
            embed_dim,
            self.choices.attention_heads,
            self.kind_options,
            dropout=cfg.attention_dropout,
            option_name="--decoder-attention-kinds",
            head_dim=self.choices.attention_head_dim,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return build_attention(
            self.choices.cross_attention_kind,
            ENCODER_DECODER,
            embed_dim,
            self.choices.cross_attention_heads,
            self.kind_options,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            option_name="--cross-attention-kinds",
            key_copies=self.choices.encoder_decoder_connect,
            head_dim=self.choices.cross_attention_head_dim,
        )

    def forward(self, x, encoder_out: Optional[Tensor] = None, encoder_padding_mask: Optional[Tensor] = None, *args,
                self_attn_mask=None, **kwargs):
        # Kinds that are causal by construction must not receive (and need
        # not cost) fairseq's dense T x T future mask.
        if not self.self_attn.uses_future_mask:
            self_attn_mask = None
        # --encoder-decoder-connect: encoder_out holds source_copies copies of S rows, the last encoder
        # layer first; this layer's k copies are its first k*S rows (k = 1: fairseq's encoder_out).
        k = self.choices.encoder_decoder_connect
        if encoder_out is not None and k != self.source_copies:
            rows = encoder_out.size(0) // self.source_copies * k
            encoder_out = encoder_out[:rows]
            if encoder_padding_mask is not None:
                encoder_padding_mask = encoder_padding_mask[:, :rows]
        x, attn, state = super().forward(x, encoder_out, encoder_padding_mask, *args, self_attn_mask=self_attn_mask, **kwargs)
        if attn is not None and k > 1:
            # weights over the k*S keys -> over the S source positions: the sum over the k copies
            attn = attn.unflatten(-1, (k, attn.size(-1) // k)).sum(dim=-2)
        return x, attn, state


def _all_built(layers_to_build, side: str):
    if next(layers_to_build, None) is not None:
        raise RuntimeError(f"fairseq built fewer {side} layers than the architecture has")


class MixedTransformerEncoder(TransformerEncoder):
    def __init__(self, args, dictionary, embed_tokens, return_fc=False, *, architecture: Architecture):
        self.architecture = architecture
        # every kind's options, read once for all layers (validated and checked by the model's build_model)
        self.kind_options = ModelKindOptions.from_args(args)
        # fairseq's __init__ calls build_encoder_layer(cfg) once per layer, in layer order, and gives it
        # no index; so the hook takes the next entry of this iterator over the architecture's layers.
        # (Building the layers after fairseq's __init__ instead would change the order in which seeded
        # initialisation draws random numbers, and so the parameters a seeded training starts from.)
        self._layers_to_build = iter(architecture.encoder_layers)
        super().__init__(layer_count_config(args, "encoder", len(architecture.encoder_layers)), dictionary, embed_tokens, return_fc=return_fc)
        _all_built(self._layers_to_build, "encoder")
        del self._layers_to_build

    def build_encoder_layer(self, cfg):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = MixedTransformerEncoderLayer(cfg, next(self._layers_to_build), self.kind_options, return_fc=self.return_fc)
        return wrap_layer(layer, cfg)

    def forward(self, src_tokens, src_lengths: Optional[torch.Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[torch.Tensor] = None):
        # --encoder-decoder-connect k > 1: the decoder reads the earlier layers' outputs from fairseq's
        # encoder_states (which reorder_encoder_out reorders for beam search), returned only then (or when asked)
        return_all_hiddens = return_all_hiddens or self.architecture.connects_earlier_encoder_layers
        return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)


def connected_source(encoder_out: Dict[str, List[Tensor]], k: int):
    """The keys (k*S x B x C) and padding mask (B x k*S, or None) of encoder-decoder attention over the
    last ``k`` encoder layers: their outputs concatenated along time, the last layer first (HAT's order:
    the first S keys are fairseq's usual ``encoder_out``), the source's padding mask repeated k times.

    The last layer's copy is ``encoder_out`` (after the encoder's final layer norm, where there is one:
    ``--encoder-normalize-before``); the earlier layers' copies are fairseq's ``encoder_states``, the layer
    outputs as the layers return them: with post-norm layers already layer-normed, with pre-norm layers the
    residual stream without the final layer norm (as Hardware-Aware Transformers' arbitrary encoder-decoder
    attention). ``encoder_states`` holds the embeddings and then every layer's output (``build_model``
    refuses ``--encoder-layerdrop``, which would leave out the dropped layers' outputs)."""
    enc = encoder_out["encoder_out"][0]
    mask = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) > 0 else None
    if k == 1:
        return enc, mask
    layer_outputs = encoder_out["encoder_states"][1:]
    if len(layer_outputs) < k:
        raise ValueError(f"--encoder-decoder-connect {k} needs the outputs of the last {k} encoder layers in "
                         f"encoder_states (return_all_hiddens), got {len(layer_outputs)}")
    earlier = layer_outputs[-k:-1][::-1]  # the second last, third last, ... layer
    keys = torch.cat([enc] + earlier, dim=0)
    if mask is not None:
        mask = mask.repeat(1, len(earlier) + 1)
    return keys, mask


class MixedTransformerDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None, *,
                 architecture: Architecture):
        if no_encoder_attn == architecture.has_cross_attention:
            raise ValueError(f"no_encoder_attn={no_encoder_attn} but the architecture's decoder layers "
                             f"{'have' if architecture.has_cross_attention else 'have no'} encoder-decoder attention")
        self.architecture = architecture
        # every kind's options, read once for all layers (validated and checked by the model's build_model)
        self.kind_options = ModelKindOptions.from_args(args)
        # as in MixedTransformerEncoder: fairseq gives build_decoder_layer no layer index
        self._layers_to_build = iter(architecture.decoder_layers)
        # --encoder-decoder-connect: the number of encoder layers whose outputs every decoder layer receives
        # concatenated (each layer reads its own first k of them)
        self.source_copies = max((layer.encoder_decoder_connect for layer in architecture.decoder_layers), default=1)
        super().__init__(layer_count_config(args, "decoder", len(architecture.decoder_layers)), dictionary, embed_tokens,
                         no_encoder_attn=no_encoder_attn, output_projection=output_projection)
        _all_built(self._layers_to_build, "decoder")
        del self._layers_to_build
        self._any_layer_uses_future_mask = any(layer.self_attn.uses_future_mask for layer in self.layers)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = MixedTransformerDecoderLayer(cfg, next(self._layers_to_build), self.kind_options, no_encoder_attn=no_encoder_attn,
                                             source_copies=self.source_copies)
        return wrap_layer(layer, cfg)

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """fairseq's, over the concatenated outputs of the last ``source_copies`` encoder layers (``connected_source``)
        when some layer has ``encoder_decoder_connect`` > 1; each layer takes its own prefix (``forward`` of
        the layer). When decoding, the encoder-decoder attentions cache the first step's keys (fairseq's
        static_kv; cosFormer's state) and do not read later steps'."""
        if encoder_out is not None and self.source_copies > 1:
            keys, mask = connected_source(encoder_out, self.source_copies)
            encoder_out = dict(encoder_out)  # a shallow copy: the caller's (beam search's) stays as it is
            encoder_out["encoder_out"] = [keys]
            encoder_out["encoder_padding_mask"] = [] if mask is None else [mask]
        return super().extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state,
                                                   full_context_alignment, alignment_layer, alignment_heads)

    def buffered_future_mask(self, tensor):
        # The O(T^2) mask only when some layer's kind uses it (linear kinds are
        # causal by construction): keeps long-sequence kinds linear in memory.
        if not self._any_layer_uses_future_mask:
            return None
        return super().buffered_future_mask(tensor)


# The architecture ``MixedTransformerModel.build_model`` resolved from the options, while fairseq's build_model
# (which hands its build_encoder/build_decoder hooks only the options) runs inside it.
ARCHITECTURE_BEING_BUILT: contextvars.ContextVar = contextvars.ContextVar("mixed_transformer_architecture", default=None)


def architecture_being_built(hook: str) -> Architecture:
    architecture = ARCHITECTURE_BEING_BUILT.get()
    if architecture is None:
        raise AttentionConfigError(f"MixedTransformerModel.{hook}: called outside MixedTransformerModel.build_model, "
                                   "which resolves the architecture it builds")
    return architecture


def load_state_dict_describing_pruned(model, super_load, state_dict, strict, model_cfg, args):
    """fairseq's load_state_dict, after which the options describe the model: fairseq's
    ``prune_state_dict`` renumbers the kept layers and clears ``*_layers_to_keep`` in ``model_cfg``, whose
    per-layer options must then describe the pruned model (a checkpoint saved from it reloads)."""
    options = model_cfg if model_cfg is not None else args
    # the file the weights come from (None: from elsewhere), by which generation_checks tells the language model
    # of fairseq-generate --lm-path
    model.loaded_file = loaded_from(state_dict)[0]
    pruned = options is not None and any(getattr(options, name, None) for name in ("encoder_layers_to_keep", "decoder_layers_to_keep"))
    # (weights of a checkpoint file: its kinds checked, a mismatch named; checkpoint_checks.py. A pruned model
    # has other layer numbers than the file: fairseq's own loading checks it.)
    result = load_checked(model if not pruned else None, super_load, state_dict, strict=strict, model_cfg=model_cfg, args=args)
    if pruned and not any(getattr(options, name, None) for name in ("encoder_layers_to_keep", "decoder_layers_to_keep")):
        describe_architecture(options, model.architecture)
    return result


@register_model("mixed_transformer")
class MixedTransformerModel(GenerationChecks, TransformerModel):
    """Encoder-decoder Transformer with per-layer attention kinds, heads and FFN widths."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # No defaults here, so that architectures can set theirs (fairseq convention).
        gen_parser_from_dataclass(parser, EncoderDecoderLayoutConfig(), delete_default=True)
        add_kind_options(parser)  # every registered kind's options (modules/<kind>/options.py)

    @classmethod
    def build_model(cls, args, task):
        # fairseq-hydra-train hands a model without a dataclass its options as a struct DictConfig holding
        # only the config's keys. fairseq's legacy build_model fills the unset ones by setting attributes
        # (refused by a struct config) and copies the options into a TransformerConfig, which drops every key
        # of a DictConfig it does not know (the architecture record, this package's options): build from an
        # argparse Namespace of the same options, as under fairseq-train, and write the filled-in options back
        # (the checkpoint keeps them)
        from argparse import Namespace

        from omegaconf import OmegaConf, open_dict

        if not OmegaConf.is_config(args):
            return cls._build_model(args, task)
        namespace = Namespace(**OmegaConf.to_container(args, resolve=True))
        model = cls._build_model(namespace, task)
        with open_dict(args):
            for name, value in vars(namespace).items():
                args[name] = value
        return model

    @classmethod
    def _build_model(cls, args, task):
        mixed_transformer_base(args)
        if getattr(args, "architecture_file", None):  # (presets apply it; an --arch of another package does not)
            raise AttentionConfigError(f"--architecture-file needs an --arch of mixed_transformer registered by this package, not {args.arch}")
        # The whole architecture, resolved and validated before any module is built: errors name the option.
        architecture = model_architecture(args)
        # (super().build_model gives unset positions these same defaults)
        target = getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS
        source = getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS
        resolve_kind_options(args, architecture, [("--max-target-positions", target)], [("--max-source-positions", source)])
        if architecture.connects_earlier_encoder_layers and (getattr(args, "encoder_layerdrop", 0) or 0) > 0:
            raise AttentionConfigError(
                "--encoder-decoder-connect > 1 cannot be combined with --encoder-layerdrop: a dropped encoder layer has "
                "no output to attend to (prune with --encoder-layers-to-keep instead)")
        # a record of it in the options, which checkpoints keep (architecture_of_checkpoint reads a saved one)
        record_architecture(args, architecture)
        layer_counts = args.encoder_layers, args.decoder_layers
        # fairseq's build_model hands build_encoder/build_decoder only the options: they take this
        # architecture, resolved once above, from the build in progress
        building = ARCHITECTURE_BEING_BUILT.set(architecture)
        try:
            model = super().build_model(args, task)
        finally:
            ARCHITECTURE_BEING_BUILT.reset(building)
        # fairseq sets --encoder-layers/--decoder-layers to the kept counts; the per-layer options still
        # describe every layer: keep the counts they were given for, so that the saved options, with
        # *_layers_to_keep, build this model again
        args.encoder_layers, args.decoder_layers = layer_counts
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return MixedTransformerEncoder(args, src_dict, embed_tokens, architecture=architecture_being_built("build_encoder"))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        architecture = architecture_being_built("build_decoder")
        return MixedTransformerDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=not architecture.has_cross_attention,
                                       architecture=architecture)

    @property
    def architecture(self) -> Architecture:
        return self.decoder.architecture

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        return load_state_dict_describing_pruned(self, super().load_state_dict, state_dict, strict, model_cfg, args)

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
                        prepare_input: bool = True, **kwargs):
        """fairseq's ``from_pretrained``, whose hub interface prepares raw input as the data's preparation
        did (its prepare.json: lower-casing, punctuation normalisation; see fairseq_plugins/hub.py);
        ``prepare_input=False``: fairseq's hub interface as it is."""
        from fairseq import hub_utils

        from ..hub import prepared_hub

        loaded = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path,
                                           archive_map=cls.hub_models(), **kwargs)
        return prepared_hub(loaded, prepare_input)


# ---------------------------------------------------------------- presets ---
# mFormer's encoder layout searched for WMT14 (Liu et al., Table 3): cosFormer in layers 2 and 4 of 6
MFORMER_ENCODER_KINDS = "softmax,cosformer,softmax,cosformer,softmax,softmax"


@register_preset("mixed_transformer", "mixed_transformer")
def mixed_transformer_base(args):
    set_layout_defaults(args)
    base_architecture(args)


@register_preset("mixed_transformer", "mixed_transformer_iwslt_de_en")
def mixed_transformer_iwslt_de_en(args):
    set_layout_defaults(args)
    transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "cosformer_iwslt_de_en")
def cosformer_iwslt_de_en(args):
    """transformer_iwslt_de_en sizes, cosFormer in every attention sub-layer."""
    for option in ("encoder_attention_kinds", "decoder_attention_kinds", "cross_attention_kinds"):
        setattr(args, option, getattr(args, option, None) or "cosformer")
    mixed_transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "mformer_iwslt_de_en")
def mformer_iwslt_de_en(args):
    """transformer_iwslt_de_en sizes with the mFormer layout searched for WMT14
    (Liu et al., Table 3): cosFormer self-attention in encoder layers 2 and 4
    (1-based), softmax everywhere else. With other --encoder-layers the pattern repeats from layer 1
    and is cut after the last layer (``pattern_for_depth``: 4 layers get cosFormer in 2 and 4)."""
    default_per_layer(args, "encoder_attention_kinds", MFORMER_ENCODER_KINDS, 6)
    mixed_transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "mformer_wmt_en_de")
def mformer_wmt_en_de(args):
    """mFormer for WMT14 en-de (Liu et al., Table 3).

    From the paper: encoder of 6 layers, embedding 1024, mean FFN width 3072,
    linear (cosFormer) attention in encoder layers 2 and 4; decoder of 2 layers
    with mean FFN width 3584 and 16 heads; 4 encoder-decoder attention heads;
    the decoder attends to the last encoder layer (fairseq's default).
    Our choices where the paper gives only averages or nothing: every encoder
    layer uses the mean FFN width 3072 and 16 heads, every decoder layer the
    mean FFN width 3584; the rest is transformer_vaswani_wmt_en_de_big. The encoder's kinds follow
    --encoder-layers as mformer_iwslt_de_en's do.
    """
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 3072)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 16)
    default_per_layer(args, "encoder_attention_kinds", MFORMER_ENCODER_KINDS, 6)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 1024)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 3584)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 16)
    args.cross_attention_heads = getattr(args, "cross_attention_heads", None) or "4"
    set_layout_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)


@register_preset("mixed_transformer", "mixed_transformer_cpu_small")
def mixed_transformer_cpu_small(args):
    """A translation model for a CPU (our choice, not a paper's): 3 encoder and 3 decoder layers,
    d = 256, 4 heads, FFN 512, about a quarter of transformer_iwslt_de_en's compute per token; the
    recipes' PROFILE=cpu default. Kinds per layer as any preset (--encoder-attention-kinds ...)."""
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 256))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 512))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 4))
    mixed_transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "mformer_cpu_small")
def mformer_cpu_small(args):
    """mixed_transformer_cpu_small with mFormer's encoder layout, cut to its 3 layers (softmax,
    cosFormer, softmax; the pattern follows --encoder-layers as mformer_iwslt_de_en's does)."""
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    default_per_layer(args, "encoder_attention_kinds", MFORMER_ENCODER_KINDS, 6)
    mixed_transformer_cpu_small(args)
