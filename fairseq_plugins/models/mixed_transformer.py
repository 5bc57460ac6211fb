"""``mixed_transformer``: fairseq's Transformer with every attention sub-layer,
head count and FFN width chosen per layer (mFormer, Liu et al.: "Neural
Architecture Search on Efficient Transformers and Beyond").

Only the hooks that build layers and attention are overridden; everything else
(embeddings, positions, layer norms, incremental decoding, beam search) is
fairseq's own code.
"""
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
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

from ..modules import DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, build_attention
from .layout import (
    EncoderDecoderLayoutConfig,
    check_cosformer_horizon,
    decoder_layout,
    encoder_layout,
    layer_config,
    set_layout_defaults,
    warn_unused_kind_options,
)


def wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class MixedTransformerEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        return build_attention(
            cfg.layer_choice.self_kind,
            ENCODER_SELF,
            embed_dim,
            cfg.encoder.attention_heads,
            cfg.model_args,
            dropout=cfg.attention_dropout,
            option_name="--encoder-attention-kinds",
        )


class MixedTransformerDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn:
            raise ValueError("mixed decoder layers do not support add_bias_kv / add_zero_attn")
        return build_attention(
            cfg.layer_choice.self_kind,
            DECODER_SELF,
            embed_dim,
            cfg.decoder.attention_heads,
            cfg.model_args,
            dropout=cfg.attention_dropout,
            option_name="--decoder-attention-kinds",
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return build_attention(
            cfg.layer_choice.cross_kind,
            ENCODER_DECODER,
            embed_dim,
            cfg.layer_choice.cross_heads,
            cfg.model_args,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            option_name="--cross-attention-kinds",
        )

    def forward(self, x, *args, self_attn_mask=None, **kwargs):
        # Kinds that are causal by construction must not receive (and need
        # not cost) fairseq's dense T x T future mask.
        if not self.self_attn.uses_future_mask:
            self_attn_mask = None
        return super().forward(x, *args, self_attn_mask=self_attn_mask, **kwargs)


class MixedTransformerEncoder(TransformerEncoder):
    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        # fairseq builds layers inside __init__ without passing their index.
        self._model_args = args
        self._layout = encoder_layout(args)
        self._layers_built = 0
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, cfg):
        cfg = TransformerConfig.from_namespace(cfg)
        choice = self._layout[self._layers_built]
        self._layers_built += 1
        layer = MixedTransformerEncoderLayer(layer_config(cfg, "encoder", choice, self._model_args), return_fc=self.return_fc)
        return wrap_layer(layer, cfg)


class MixedTransformerDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self._model_args = args
        self._layout = decoder_layout(args, has_encoder_attention=not no_encoder_attn)
        self._layers_built = 0
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn, output_projection=output_projection)
        self._any_layer_uses_future_mask = any(layer.self_attn.uses_future_mask for layer in self.layers)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        choice = self._layout[self._layers_built]
        self._layers_built += 1
        layer = MixedTransformerDecoderLayer(layer_config(cfg, "decoder", choice, self._model_args), no_encoder_attn=no_encoder_attn)
        return wrap_layer(layer, cfg)

    def buffered_future_mask(self, tensor):
        # The O(T^2) mask only when some layer's kind uses it (linear kinds are
        # causal by construction): keeps long-sequence kinds linear in memory.
        if not self._any_layer_uses_future_mask:
            return None
        return super().buffered_future_mask(tensor)


@register_model("mixed_transformer")
class MixedTransformerModel(TransformerModel):
    """Encoder-decoder Transformer with per-layer attention kinds, heads and FFN widths."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # No defaults here, so that architectures can set theirs (fairseq convention).
        gen_parser_from_dataclass(parser, EncoderDecoderLayoutConfig(), delete_default=True)

    @classmethod
    def build_model(cls, args, task):
        mixed_transformer_base(args)
        # Validate the whole layout before any module is built: errors name the option.
        encoder = encoder_layout(args)
        decoder = decoder_layout(args, has_encoder_attention=not getattr(args, "no_cross_attention", False))
        # (super().build_model gives unset positions these same defaults)
        target = getattr(args, "max_target_positions", None) or DEFAULT_MAX_TARGET_POSITIONS
        source = getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS
        check_cosformer_horizon(args, encoder, decoder, [("--max-target-positions", target)],
                                [("--max-source-positions", source)])
        warn_unused_kind_options(args, encoder, decoder)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return MixedTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return MixedTransformerDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=args.no_cross_attention)


# ---------------------------------------------------------------- presets ---
@register_model_architecture("mixed_transformer", "mixed_transformer")
def mixed_transformer_base(args):
    set_layout_defaults(args)
    base_architecture(args)


@register_model_architecture("mixed_transformer", "mixed_transformer_iwslt_de_en")
def mixed_transformer_iwslt_de_en(args):
    set_layout_defaults(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("mixed_transformer", "cosformer_iwslt_de_en")
def cosformer_iwslt_de_en(args):
    """transformer_iwslt_de_en sizes, cosFormer in every attention sub-layer."""
    for option in ("encoder_attention_kinds", "decoder_attention_kinds", "cross_attention_kinds"):
        setattr(args, option, getattr(args, option, None) or "cosformer")
    mixed_transformer_iwslt_de_en(args)


@register_model_architecture("mixed_transformer", "mformer_iwslt_de_en")
def mformer_iwslt_de_en(args):
    """transformer_iwslt_de_en sizes with the mFormer layout searched for WMT14
    (Liu et al., Table 3): cosFormer self-attention in encoder layers 2 and 4
    (1-based), softmax everywhere else."""
    args.encoder_attention_kinds = getattr(args, "encoder_attention_kinds", None) or (
        "softmax,cosformer,softmax,cosformer,softmax,softmax"
    )
    mixed_transformer_iwslt_de_en(args)


@register_model_architecture("mixed_transformer", "mformer_wmt_en_de")
def mformer_wmt_en_de(args):
    """mFormer for WMT14 en-de (Liu et al., Table 3).

    From the paper: encoder of 6 layers, embedding 1024, mean FFN width 3072,
    linear (cosFormer) attention in encoder layers 2 and 4; decoder of 2 layers
    with mean FFN width 3584 and 16 heads; 4 encoder-decoder attention heads;
    the decoder attends to the last encoder layer (fairseq's default).
    Our choices where the paper gives only averages or nothing: every encoder
    layer uses the mean FFN width 3072 and 16 heads, every decoder layer the
    mean FFN width 3584; the rest is transformer_vaswani_wmt_en_de_big.
    """
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 3072)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 16)
    args.encoder_attention_kinds = getattr(args, "encoder_attention_kinds", None) or (
        "softmax,cosformer,softmax,cosformer,softmax,softmax"
    )
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 1024)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 3584)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 16)
    args.cross_attention_heads = getattr(args, "cross_attention_heads", None) or "4"
    set_layout_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)
