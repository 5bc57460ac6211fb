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
from .generation_checks import GenerationChecks
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


def cutoffs(args, option: str, vocabulary: int):
    """The cutoffs of ``--adaptive-input-cutoff`` / ``--adaptive-softmax-cutoff`` (``option``), checked as fairseq's
    AdaptiveInput and AdaptiveSoftmax need them: increasing whole numbers, below the dictionary size (the last
    may equal it)."""
    value = getattr(args, option[2:].replace("-", "_"), None)
    if value is None:
        return None
    from fairseq import options

    try:  # (parsed as fairseq's transformer_lm parses it)
        points = options.eval_str_list(value, type=int)
    except Exception:  # (eval of the option's text: a SyntaxError, NameError, ValueError ...)
        points = []
    if not points or any(b <= a for a, b in zip([0] + points, points)) or points[-1] > vocabulary:
        raise AttentionConfigError(f"{option} {value}: expected increasing whole numbers separated by commas, from 1 up to "
                                   f"the dictionary's {vocabulary} entries, e.g. {vocabulary // 4},{vocabulary // 2}")
    return points


def check_adaptive_embeddings(args, vocabulary: int) -> None:
    """fairseq's adaptive input and adaptive softmax (Baevski & Auli 2019) and character embeddings, as this
    package's language models build them: the combinations that fairseq's transformer_lm fails on (an
    AttributeError when the output projection shares a matrix that the input does not have, bare asserts for
    --tie-adaptive-weights) are one-line errors naming the options. The presets share the input and output
    embeddings (--share-decoder-input-output-embed), which has no effect with an adaptive softmax: that has its
    own output embeddings, so the option is turned off, and recorded off in the checkpoint (fairseq's
    upgrade_state_dict would otherwise add the shared output matrix, which the model does not have, and the
    checkpoint would not load)."""
    input_cutoffs = cutoffs(args, "--adaptive-input-cutoff", vocabulary) if args.adaptive_input else None
    softmax_cutoffs = cutoffs(args, "--adaptive-softmax-cutoff", vocabulary)
    if args.adaptive_input and input_cutoffs is None:
        raise AttentionConfigError("--adaptive-input needs --adaptive-input-cutoff (comma-separated cutoffs of the dictionary)")
    if softmax_cutoffs is not None and args.share_decoder_input_output_embed:
        logger.warning("--share-decoder-input-output-embed (on in this package's language-model presets) has no effect with "
                       "--adaptive-softmax-cutoff: the adaptive softmax has its own output embeddings (tied to an adaptive "
                       "input with --adaptive-input --tie-adaptive-weights); built and saved without it")
        args.share_decoder_input_output_embed = False
    unshareable = "--adaptive-input" if args.adaptive_input else "--character-embeddings" if args.character_embeddings else None
    if unshareable and args.share_decoder_input_output_embed:
        raise AttentionConfigError(
            f"{unshareable} with --share-decoder-input-output-embed (on in this package's language-model presets): the "
            f"output projection would share the input's embedding matrix, which {unshareable} does not have; add an "
            "adaptive softmax (--adaptive-softmax-cutoff; with --adaptive-input the same cutoffs and "
            "--tie-adaptive-weights tie the two), or use --arch mixed_transformer_lm, which shares nothing")
    if args.tie_adaptive_weights and not args.adaptive_input and softmax_cutoffs is None:
        # (fairseq's transformer_lm asserts; ours has built such models, whose checkpoints must still load)
        logger.warning("--tie-adaptive-weights has no effect without --adaptive-input and --adaptive-softmax-cutoff, "
                       "which it ties together")
    elif args.tie_adaptive_weights:
        if not args.adaptive_input or softmax_cutoffs is None:
            raise AttentionConfigError("--tie-adaptive-weights ties an adaptive softmax to an adaptive input: it needs "
                                       "--adaptive-input and --adaptive-softmax-cutoff")
        if softmax_cutoffs != input_cutoffs or args.adaptive_softmax_factor != args.adaptive_input_factor:
            raise AttentionConfigError(
                f"--tie-adaptive-weights: the adaptive softmax (--adaptive-softmax-cutoff {args.adaptive_softmax_cutoff}, "
                f"--adaptive-softmax-factor {args.adaptive_softmax_factor:g}) and the adaptive input "
                f"(--adaptive-input-cutoff {args.adaptive_input_cutoff}, --adaptive-input-factor {args.adaptive_input_factor:g}) "
                "must have the same cutoffs and factor")
        if args.decoder_input_dim != args.decoder_output_dim:
            raise AttentionConfigError(f"--tie-adaptive-weights: --decoder-input-dim {args.decoder_input_dim} and "
                                       f"--decoder-output-dim {args.decoder_output_dim} must be equal")


@register_model("mixed_transformer_lm", dataclass=MixedTransformerLanguageModelConfig)
class MixedTransformerLanguageModel(GenerationChecks, TransformerLanguageModel):
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
        check_adaptive_embeddings(args, len(task.target_dictionary))
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
