"""``mixed_transformer_lm``: fairseq's Transformer language model with the
attention kind, head count and FFN width of every layer chosen per layer."""
from dataclasses import dataclass

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)

from .layout import (
    DecoderLayoutConfig,
    check_cosformer_horizon,
    decoder_layout,
    set_layout_defaults,
    warn_unused_kind_options,
)
from .mixed_transformer import MixedTransformerDecoder


@dataclass
class MixedTransformerLanguageModelConfig(TransformerLanguageModelConfig, DecoderLayoutConfig):
    pass


def resolve_lm_sizes(args):
    """The preset's defaults, the kept layers and the positions, as ``build_model`` sees them (also used by
    ``cli.model_costs``, which counts without building). Returns the (option, positions) the model is built
    for: the sequences are --tokens-per-sample long; an explicit --max-target-positions may be more."""
    mixed_transformer_lm_base(args)
    if getattr(args, "decoder_layers_to_keep", None):
        args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
    positions = [("--tokens-per-sample", getattr(args, "tokens_per_sample", None))]
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = getattr(args, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
    else:
        positions.append(("--max-target-positions", args.max_target_positions))
    return positions


@register_model("mixed_transformer_lm", dataclass=MixedTransformerLanguageModelConfig)
class MixedTransformerLanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        positions = resolve_lm_sizes(args)
        decoder = decoder_layout(args, has_encoder_attention=False)  # errors name the option, before building
        check_cosformer_horizon(args, [], decoder, positions)
        warn_unused_kind_options(args, [], decoder)
        if args.character_embeddings or args.adaptive_input:
            # fairseq builds these inputs inline in build_model; reuse them
            # from a throw-away stock model rather than copying that code.
            embed_tokens = super().build_model(args, task).decoder.embed_tokens
        else:
            embed_tokens = cls.build_embedding(args, task.source_dictionary, args.decoder_input_dim)
        decoder = MixedTransformerDecoder(args, task.target_dictionary, embed_tokens, no_encoder_attn=True)
        return cls(decoder)


# The plain "mixed_transformer_lm" architecture is registered by
# register_model(dataclass=...); build_model fills its defaults with this.
def mixed_transformer_lm_base(args):
    set_layout_defaults(args, decoder_only=True)
    base_lm_architecture(args)


@register_model_architecture("mixed_transformer_lm", "mixed_transformer_lm_tiny")
def mixed_transformer_lm_tiny(args):
    """A small LM for quick CPU work: 2 layers, d = 128, 4 heads, FFN 512, pre-norm."""
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", True)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    mixed_transformer_lm_base(args)


@register_model_architecture("mixed_transformer_lm", "cosformer_lm_tiny")
def cosformer_lm_tiny(args):
    """mixed_transformer_lm_tiny with cosFormer in every layer."""
    args.decoder_attention_kinds = getattr(args, "decoder_attention_kinds", None) or "cosformer"
    mixed_transformer_lm_tiny(args)


@register_model_architecture("mixed_transformer_lm", "mformer_lm_tiny")
def mformer_lm_tiny(args):
    """mixed_transformer_lm_tiny with 4 layers alternating cosFormer and softmax."""
    args.decoder_layers = getattr(args, "decoder_layers", 4)
    args.decoder_attention_kinds = getattr(args, "decoder_attention_kinds", None) or "cosformer,softmax,cosformer,softmax"
    mixed_transformer_lm_tiny(args)
