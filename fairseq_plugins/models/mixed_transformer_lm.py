"""``mixed_transformer_lm``: fairseq's Transformer language model with the
attention kind, head count and FFN width of every layer chosen per layer."""
import argparse
import dataclasses
import logging
import sys
from dataclasses import dataclass

from fairseq.models import register_model
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)

from ..modules import AttentionConfigError
from .architecture import Architecture, default_per_layer, model_architecture, record_architecture, register_preset
from ..modules.options import Positions
from .layout import DecoderLayoutConfig, KindOptionsConfig, add_kind_options, resolve_kind_options, set_layout_defaults
from .mixed_transformer import MixedTransformerDecoder, load_state_dict_describing_pruned

logger = logging.getLogger(__name__)


@dataclass
class MixedTransformerLanguageModelConfig(TransformerLanguageModelConfig, DecoderLayoutConfig, KindOptionsConfig):
    """fairseq's LM options, the per-layer choices and the options of every kind registered when this
    module is imported (``layout.KindOptionsConfig``)."""


def adds_bos_token(args, task=None) -> bool:
    """Whether the samples start with fairseq's BOS token (``--task language_modeling --add-bos-token``):
    the task's setting where the task is known (fairseq-eval-lm and fairseq-generate rebuild a checkpoint's
    model with the task they set up), else the copy the model options keep."""
    task_cfg = getattr(task, "cfg", None) or getattr(task, "args", None)
    value = getattr(task_cfg, "add_bos_token", None) if task_cfg is not None else None
    if value is None:
        value = getattr(args, "add_bos_token", None)
    return bool(value)


def resolve_lm_sizes(args, task=None):
    """The preset's defaults and the positions, as ``build_model`` sees them (also used by
    ``cli.model_costs``, which counts without building; the kept layers are the architecture's, see
    ``model_architecture``). Returns the ``Positions`` the model is built for: the
    sequences are --tokens-per-sample long, one more with --add-bos-token (fairseq's MonolingualDataset
    prepends the BOS token to a block of --tokens-per-sample tokens); an explicit --max-target-positions
    may be more. The default --max-target-positions counts the BOS position: fairseq's own
    transformer_lm does not, and its learned positions then fail on the first full block."""
    mixed_transformer_lm_base(args)
    tokens = getattr(args, "tokens_per_sample", None)
    bos = int(tokens is not None and adds_bos_token(args, task))
    sample = Positions("--tokens-per-sample", tokens, bos, "the BOS token of --add-bos-token")
    positions = [sample]
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = sample.count if tokens is not None else DEFAULT_MAX_TARGET_POSITIONS
    else:
        positions.append(Positions("--max-target-positions", args.max_target_positions))
    return positions


# The fairseq commands that sample from a language model (imported only by those commands' entry points)
GENERATION_COMMANDS = frozenset({"fairseq_cli.generate", "fairseq_cli.interactive"})


def eval_lm_context_window() -> int:
    """fairseq-eval-lm's --context-window, which it has already taken from the task's --tokens-per-sample
    (fairseq_cli/eval_lm.py) and keeps in its own configuration, which the model never sees: read from the
    command line, as fairseq parses it (no abbreviations). 0 in every other command."""
    if "fairseq_cli.eval_lm" not in sys.modules:
        return 0
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--context-window", type=int, default=0)
    return max(parser.parse_known_args(sys.argv[1:])[0].context_window, 0)


def check_task_fits(args, task) -> None:
    """The task's samples must fit the model's positions: fairseq-eval-lm rebuilds a checkpoint's model with
    the task of its command line, and a longer block (--tokens-per-sample above the positions the model was
    trained for, or one more for a BOS token of --add-bos-token the model was trained without) is skipped
    by fairseq's batching, so the perplexity is over nothing (1.00 over 0 tokens), or fails on an index."""
    if GENERATION_COMMANDS & set(sys.modules):
        # fairseq-generate / fairseq-interactive feed prompts, not --tokens-per-sample blocks (its default
        # 1024 there is no request to score 1024-token blocks); generation stops at the positions by itself
        return
    # (fairseq's language_modeling task keeps its options as .args, a dataclass task as .cfg)
    tokens = next((value for value in (getattr(getattr(task, name, None), "tokens_per_sample", None) for name in ("cfg", "args"))
                   if value is not None), None)
    if tokens is None:
        return
    if tokens < 1:  # fairseq-eval-lm has taken --context-window from it
        raise AttentionConfigError(f"--tokens-per-sample: {tokens} tokens per block are left to score; expected at least 1 "
                                   "(with fairseq-eval-lm: give a --context-window smaller than --tokens-per-sample)")
    bos = int(adds_bos_token(args, task))
    if getattr(args, "add_bos_token", False) and not bos:  # args: the checkpoint's training options
        logger.warning("the checkpoint was trained with --add-bos-token and this task has none: every block is "
                       "scored without the <s> that started each block in training; add --add-bos-token")
    # fairseq-eval-lm scores blocks of --tokens-per-sample minus --context-window tokens, each after up to
    # --context-window tokens of context: the model sees --tokens-per-sample positions (+ BOS) all the same
    tokens += eval_lm_context_window()
    limit = getattr(args, "max_target_positions", None)
    if limit is not None and tokens + bos > limit:
        needs = f"--tokens-per-sample {tokens} + 1 (the BOS token of --add-bos-token)" if bos else f"--tokens-per-sample {tokens}"
        raise AttentionConfigError(
            f"{needs}: more than the model's {limit} positions (--max-target-positions; a checkpoint's: what it was trained "
            f"for); give --tokens-per-sample {limit - bos} or less" + (", or leave out --add-bos-token if the model was "
                                                                      "trained without it" if bos else ""))


@register_model("mixed_transformer_lm", dataclass=MixedTransformerLanguageModelConfig)
class MixedTransformerLanguageModel(TransformerLanguageModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # kinds registered after this module was imported (a --user-dir kind package): their options too
        add_kind_options(parser, known=[f.name for f in dataclasses.fields(MixedTransformerLanguageModelConfig)])

    @classmethod
    def build_model(cls, args, task):
        if getattr(args, "architecture_file", None):  # (presets apply it; fairseq's own mixed_transformer_lm does not)
            raise AttentionConfigError(
                "--architecture-file needs an --arch preset of mixed_transformer_lm registered by this package "
                "(e.g. mixed_transformer_lm_tiny), not mixed_transformer_lm itself")
        positions = resolve_lm_sizes(args, task)
        check_task_fits(args, task)
        # The whole architecture, resolved and validated before any module is built: errors name the option.
        architecture = model_architecture(args, decoder_only=True)
        resolve_kind_options(args, architecture, positions)
        record_architecture(args, architecture)
        if args.character_embeddings or args.adaptive_input:
            # fairseq builds these inputs inline in build_model; reuse them
            # from a throw-away stock model rather than copying that code
            # (which sets --decoder-layers to the kept count: the per-layer options keep theirs).
            layers = args.decoder_layers
            embed_tokens = super().build_model(args, task).decoder.embed_tokens
            args.decoder_layers = layers
        else:
            embed_tokens = cls.build_embedding(args, task.source_dictionary, args.decoder_input_dim)
        decoder = MixedTransformerDecoder(args, task.target_dictionary, embed_tokens, no_encoder_attn=True,
                                          architecture=architecture)
        return cls(decoder)

    @property
    def architecture(self) -> Architecture:
        return self.decoder.architecture

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        return load_state_dict_describing_pruned(self, super().load_state_dict, state_dict, strict, model_cfg, args)


# The plain "mixed_transformer_lm" architecture is registered by
# register_model(dataclass=...); build_model fills its defaults with this.
def mixed_transformer_lm_base(args):
    set_layout_defaults(args, decoder_only=True)
    base_lm_architecture(args)


def small_lm(args, layers: int, embed_dim: int, ffn_embed_dim: int, heads: int):
    """The sizes of a small pre-norm LM with tied input and output embeddings, where not given."""
    args.decoder_layers = getattr(args, "decoder_layers", layers)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", embed_dim)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", ffn_embed_dim)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", heads)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", True)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    mixed_transformer_lm_base(args)


@register_preset("mixed_transformer_lm", "mixed_transformer_lm_tiny")
def mixed_transformer_lm_tiny(args):
    """A small LM for quick CPU work: 2 layers, d = 128, 4 heads, FFN 512, pre-norm."""
    small_lm(args, layers=2, embed_dim=128, ffn_embed_dim=512, heads=4)


@register_preset("mixed_transformer_lm", "cosformer_lm_tiny")
def cosformer_lm_tiny(args):
    """mixed_transformer_lm_tiny with cosFormer in every layer."""
    args.decoder_attention_kinds = getattr(args, "decoder_attention_kinds", None) or "cosformer"
    mixed_transformer_lm_tiny(args)


@register_preset("mixed_transformer_lm", "mformer_lm_tiny")
def mformer_lm_tiny(args):
    """mixed_transformer_lm_tiny with 4 layers alternating cosFormer and softmax (with other
    --decoder-layers the alternation goes on: ``pattern_for_depth``)."""
    args.decoder_layers = getattr(args, "decoder_layers", 4)
    default_per_layer(args, "decoder_attention_kinds", "cosformer,softmax", 4)
    mixed_transformer_lm_tiny(args)


@register_preset("mixed_transformer_lm", "mixed_transformer_lm_cpu_small")
def mixed_transformer_lm_cpu_small(args):
    """A language model for a CPU (our choice, not a paper's): 4 layers, d = 256, 4 heads, FFN 1024,
    pre-norm, tied input and output embeddings; the recipes' PROFILE=cpu default (word- and byte-level)."""
    small_lm(args, layers=4, embed_dim=256, ffn_embed_dim=1024, heads=4)
