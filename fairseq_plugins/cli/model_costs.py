"""Whole-model parameter and FLOP counts of every preset (``--arch``):
``fairseq_plugins.complexity.architecture_cost`` of the preset's
``Architecture`` (the per-kind counts each kind registers, summed with
fairseq's layer structure: embeddings, positions, layer norms, FFNs, output
projection), without building the model.

    python -m fairseq_plugins.cli.model_costs                       # every preset, S = T = 128
    python -m fairseq_plugins.cli.model_costs --arch mformer_wmt_en_de --source-length 64 --target-length 64 --vocab 40000

Parameters and FLOPs that grow with the dictionary (token embeddings, the
output projection) are given per dictionary entry, so that any vocabulary size
V can be added: total = count + V x per-entry count (``--vocab V`` adds those
columns). FLOPs are those of one forward pass over one sentence pair of S
source and T target tokens (language models: T tokens), 2 per multiply-add of
the matrix products each kind's definition needs (see complexity.py); the
tests compare them with ``torch.utils.flop_counter.FlopCounterMode``. The
line above the table states S and T; ``--source-length`` where only language
models are counted is refused (it would be ignored).
"""
from __future__ import annotations  # complexity's classes in annotations: imported when used (torch)

import argparse
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence

ENCODER_DECODER_MODEL = "mixed_transformer"
LANGUAGE_MODEL = "mixed_transformer_lm"
MODELS = {ENCODER_DECODER_MODEL: "translation", LANGUAGE_MODEL: "language_modeling"}
DEFAULT_LENGTH = 128  # S and T when not given


@dataclass(frozen=True)
class ModelCost:
    arch: str
    model: str                 # "encoder-decoder" or "language model"
    parameters: int            # everything but the dictionary-sized matrices
    parameters_per_entry: int  # token embeddings and output projection, per dictionary entry
    flops: int                 # one forward pass, without the output projection
    flops_per_entry: int       # the output projection, per dictionary entry
    source_length: Optional[int]
    target_length: int

    def total_parameters(self, vocab: int) -> int:
        return self.parameters + vocab * self.parameters_per_entry

    def total_flops(self, vocab: int) -> int:
        return self.flops + vocab * self.flops_per_entry


def _unsupported(args, model_name: str):
    """Options that add modules the count does not know: an error naming them, never a wrong number."""
    checks = {
        "adaptive_softmax_cutoff": lambda v: v is not None,
        "adaptive_input": bool,
        "character_embeddings": bool,
        "cross_self_attention": bool,
        "quant_noise_pq": lambda v: bool(v),
        "scale_attn": bool,
        "scale_fc": bool,
        "scale_heads": bool,
        "scale_resids": bool,
        "base_layers": lambda v: bool(v),
    }
    used = [name for name, is_set in checks.items() if is_set(getattr(args, name, None))]
    if used:
        raise ValueError(f"{args.arch}: model_costs cannot count a {model_name} with "
                         f"{', '.join('--' + u.replace('_', '-') for u in used)}; leave those options unset")


def attention_options(args, kinds: Optional[Sequence[str]] = None) -> complexity.AttentionOptions:
    """The options of ``args`` that change a kind's counts, as each kind reads them (its
    ``AttentionCosts.options_from``). ``kinds``: the kinds the model uses (default: those its
    ``--*-attention-kinds`` name); the options of other kinds are read where they can be, and
    cannot make the count fail (e.g. Extractors' lags without target positions)."""
    from .. import complexity
    from ..modules import ATTENTION_REGISTRY, AttentionConfigError
    from ..modules.options import AttentionContext

    if kinds is None:
        lists = (getattr(args, name, None) or "" for name in ("encoder_attention_kinds", "decoder_attention_kinds", "cross_attention_kinds"))
        kinds = [kind.strip() for value in lists for kind in value.split(",")]
    values = {}
    for name, spec in ATTENTION_REGISTRY.items():
        read = spec.costs.options_from if spec.costs is not None else None
        if read is None:
            continue
        try:
            values.update(read(spec.options_class.from_args(args), AttentionContext.from_args(args)))
        except AttentionConfigError:
            if name in kinds:
                raise
    return complexity.AttentionOptions(**values)


def model_layout(cfg, language_model: bool) -> complexity.ModelLayout:
    """What fairseq's Transformer options (a TransformerConfig) add to the architecture's layers."""
    from .. import complexity

    return complexity.ModelLayout(
        encoder_learned_positions=bool(cfg.encoder.learned_pos and not cfg.no_token_positional_embeddings),
        decoder_learned_positions=bool(cfg.decoder.learned_pos and not cfg.no_token_positional_embeddings),
        max_source_positions=cfg.max_source_positions if not language_model else 0,
        max_target_positions=cfg.max_target_positions,
        layernorm_embedding=bool(cfg.layernorm_embedding),
        encoder_final_norm=bool(cfg.encoder.normalize_before) and not language_model,
        decoder_final_norm=bool(cfg.decoder.normalize_before and not cfg.no_decoder_final_norm),
        decoder_input_dim=cfg.decoder.input_dim,
        decoder_output_dim=cfg.decoder.output_dim,
        tie_adaptive_weights=bool(cfg.tie_adaptive_weights),
        share_all_embeddings=bool(cfg.share_all_embeddings) and not language_model,
        share_decoder_input_output_embed=bool(cfg.share_decoder_input_output_embed),
    )


def model_cost(args, source_length: int = DEFAULT_LENGTH, target_length: int = DEFAULT_LENGTH) -> ModelCost:
    """The counts of the model that ``args`` (an architecture's resolved options) builds:
    ``complexity.architecture_cost`` of its ``Architecture`` and layout."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS, TransformerConfig

    from .. import complexity
    from ..models.architecture import model_architecture

    model_name = ARCH_MODEL_NAME_REGISTRY.get(args.arch)
    if model_name not in MODELS:
        raise ValueError(f"--arch {args.arch}: not an architecture of {' or '.join(MODELS)}")
    if source_length < 1 or target_length < 1:
        raise ValueError(f"--source-length and --target-length must be >= 1, got {source_length} and {target_length}")
    language_model = model_name == LANGUAGE_MODEL
    # the defaults the models' build_model fills in before building
    if language_model:
        from ..models.mixed_transformer_lm import resolve_lm_sizes

        resolve_lm_sizes(args)  # as MixedTransformerLanguageModel.build_model
    else:
        from ..models.mixed_transformer import mixed_transformer_base

        mixed_transformer_base(args)
    _unsupported(args, model_name)
    if not language_model:
        for name, default in (("max_source_positions", DEFAULT_MAX_SOURCE_POSITIONS), ("max_target_positions", DEFAULT_MAX_TARGET_POSITIONS)):
            if getattr(args, name, None) is None:  # as TransformerModel.build_model
                setattr(args, name, default)
    cfg = TransformerConfig.from_namespace(args)
    architecture = model_architecture(args, decoder_only=language_model)
    kinds = {layer.attention_kind for layer in architecture.encoder_layers + architecture.decoder_layers}
    kinds |= {layer.cross_attention_kind for layer in architecture.decoder_layers if layer.cross_attention_kind is not None}
    cost = complexity.architecture_cost(architecture, source_length, target_length, attention_options(args, sorted(kinds)),
                                        model_layout(cfg, language_model))
    return ModelCost(
        arch=args.arch, model="language model" if language_model else "encoder-decoder", parameters=cost.parameters,
        parameters_per_entry=cost.parameters_per_entry, flops=cost.flops, flops_per_entry=cost.flops_per_entry,
        source_length=None if language_model else source_length, target_length=target_length,
    )


def preset_args(arch: str, extra: Sequence[str] = ()):
    """The options fairseq-train resolves for ``--arch arch`` (plus ``extra`` flags), without data."""
    from .. import register

    register()  # the models and architectures
    from fairseq import options
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model_name not in MODELS:
        raise ValueError(f"--arch {arch}: not a preset of this package; valid: {', '.join(presets())}")
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["unused", "--task", MODELS[model_name], "--arch", arch, *extra])


def presets() -> List[str]:
    from .. import register

    register()
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return [arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model in MODELS]


def lengths_line(costs: Sequence[ModelCost]) -> str:
    """The sentence lengths the FLOPs are counted at, stated above the table (its cells do not say them)."""
    sources = {cost.source_length for cost in costs if cost.source_length is not None}
    targets = {cost.target_length for cost in costs}
    if len(sources) > 1 or len(targets) > 1:
        raise ValueError("one table counts every model at the same lengths, got S in "
                         f"{sorted(sources)} and T in {sorted(targets)}")
    target = targets.pop()
    if not sources:
        return f"Forward FLOPs of one sequence of T = {target} tokens."
    models = {cost.model for cost in costs}
    language_models = f" (language models: T = {target} tokens)" if "language model" in models else ""
    return f"Forward FLOPs of one sentence pair of S = {sources.pop()} source and T = {target} target tokens{language_models}."


def encoder_decoder(arch: str) -> bool:
    """Whether the preset ``arch`` is an encoder-decoder (it reads a source length), not a language model."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return ARCH_MODEL_NAME_REGISTRY.get(arch) == ENCODER_DECODER_MODEL


def markdown_table(costs: Sequence[ModelCost], vocab: Optional[int] = None) -> str:
    """The table of ``costs``, below the line that states the lengths they were counted at."""
    header = ["`--arch`", "model", "parameters", "+ per dictionary entry", "forward GFLOPs", "+ per dictionary entry (FLOPs)"]
    if vocab is not None:
        header += [f"parameters, V = {vocab:,}", f"forward GFLOPs, V = {vocab:,}"]
    lines = [lengths_line(costs), "", "| " + " | ".join(header) + " |", "| --- | --- |" + " ---: |" * (len(header) - 2)]
    for cost in costs:
        cells = [f"`{cost.arch}`", cost.model, f"{cost.parameters:,}", f"{cost.parameters_per_entry:,}",
                 f"{cost.flops / 1e9:.3f}", f"{cost.flops_per_entry:,}"]
        if vocab is not None:
            cells += [f"{cost.total_parameters(vocab):,}", f"{cost.total_flops(vocab) / 1e9:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--arch", action="append", help="a preset (repeatable; default: every preset of this package)")
    # (no default of --source-length in the namespace: None says it was not typed, see below)
    parser.add_argument("--source-length", type=int, help=f"source tokens S of the forward pass (default {DEFAULT_LENGTH}; "
                        "encoder-decoder presets only)")
    parser.add_argument("--target-length", type=int, default=DEFAULT_LENGTH,
                        help=f"target tokens T (language models: tokens) of the forward pass (default {DEFAULT_LENGTH})")
    parser.add_argument("--vocab", type=int, help="also give totals at this dictionary size")
    parser.add_argument("--output", help="write the table to this file (atomically) instead of printing it")
    args = parser.parse_args(argv)
    from ..command_line import configure_logging

    configure_logging()
    source_length = DEFAULT_LENGTH if args.source_length is None else args.source_length
    if source_length < 1 or args.target_length < 1:
        parser.error(f"--source-length and --target-length must be >= 1, got {source_length} and {args.target_length}")
    if args.vocab is not None and args.vocab < 1:
        parser.error(f"--vocab must be >= 1, got {args.vocab}")
    valid = presets()
    unknown = [a for a in args.arch or [] if a not in valid]
    if unknown:
        parser.error(f"--arch {', '.join(unknown)}: not a preset of this package; valid: {', '.join(valid)}")
    if args.source_length is not None and not any(encoder_decoder(arch) for arch in args.arch or valid):
        parser.error(f"--source-length: an option of encoder-decoder presets, and only language models are counted "
                     f"(--arch {', '.join(args.arch)}; it would be ignored)")
    costs = [model_cost(preset_args(arch), source_length, args.target_length) for arch in args.arch or valid]
    table = markdown_table(costs, args.vocab)
    if args.output:
        from ..files import atomic_output

        with atomic_output(args.output) as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
