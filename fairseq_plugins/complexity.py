"""Counted complexity of one self-attention sub-layer and of each Extractor
(Zhe Chen 2023, "Attention Is Not All You Need Anymore", Tables 3-7).

For a model dimension d, h heads (softmax) and l lags (Extractors), counts the
real multiplications, additions, divisions and exponentiations of

* training: one causal pass over a sequence of n tokens (the paper: n = l);
* decoding: one new token at sequence length t, with the usual caches (keys
  and values for softmax attention, the last min(t, l) extraction inputs for
  Extractors; see ``modules/extractors/``);

and the trainable parameters, which equal those of the modules in
``fairseq_plugins.modules`` (the tests build them and compare).

Each kind's formulas live next to its code, registered with it as an
``AttentionCosts`` (``fairseq_plugins/modules/costs.py``: parameters, forward and
backward FLOPs, decoding state, asymptotic class); this module iterates the
registry. ``KIND_COSTS`` maps every registered kind to its costs, and
``architecture_cost`` sums a whole model (an ``Architecture``) from them, as
``python -m fairseq_plugins.cli.model_costs`` does for every preset.

Counting conventions:

* a dot product of length k: k multiplications, k - 1 additions; a bias adds
  one addition per output, so x W + b with x of length d_in and d_out outputs
  costs d_in d_out multiplications and d_in d_out additions;
* a sum of m vectors of length d: (m - 1) d additions;
* softmax over m scores: m exponentiations, m - 1 additions (the normaliser),
  m divisions; the maximum subtracted for numerical stability is not counted
  (it is not part of the function);
* the scaling 1/sqrt(d_h) is one multiplication per query element (fairseq
  scales q, not the scores);
* Extractors are counted as defined (eqs. 23-29, every lag term evaluated),
  not as the FFT convolution the implementation may choose for long windows.

    python -m fairseq_plugins.complexity                      # the paper's Table 7 setting: d = l = 128
    python -m fairseq_plugins.complexity --d 512 --l 256 --t 1000 --heads 8
"""
import argparse
import sys
from dataclasses import dataclass, fields
from typing import Dict, Iterator, List, Mapping, Optional, Sequence


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=128, help="model dimension (default 128, the paper's)")
    parser.add_argument("--l", type=int, default=128, help="lags = context window = training sequence length (default 128)")
    parser.add_argument("--t", type=int, default=None, help="sequence length at which one token is decoded (default: l)")
    parser.add_argument("--heads", default="1,32", help="head counts of the kinds whose rows depend on heads (a row per count), comma-separated (default 1,32: the paper's)")
    parser.add_argument("--no-output-projection", action="store_true", help="Extractors without W_out (eq. 25)")
    args = parser.parse_args(argv)
    heads = [int(h) for h in args.heads.split(",")]
    if args.d < 1 or args.l < 1 or (args.t is not None and args.t < 1) or any(h < 1 or args.d % h for h in heads):
        parser.error("--d, --l, --t and --heads must be positive, and every head count must divide --d")
    from fairseq_plugins import register
    from fairseq_plugins.command_line import configure_logging

    configure_logging()
    register()  # every kind, also those of $FAIRSEQ_PLUGINS_KIND_MODULES
    from fairseq_plugins.complexity import markdown_table  # (run as __main__, this module stops before defining it)

    print(markdown_table(args.d, args.l, args.t or args.l, heads, not args.no_output_projection), end="")


if __name__ == "__main__":  # before the registry's imports below: --help and usage errors need no torch
    sys.exit(main())

from .modules import ATTENTION_REGISTRY, DECODER_SELF, ENCODER_DECODER, ENCODER_SELF  # noqa: E402
from .modules.costs import (  # noqa: F401, E402  (the shared helpers, re-exported)
    BACKWARD_FLOPS_PER_FORWARD_FLOP,
    FLOPS_PER_MAC,
    AttentionCosts,
    AttentionOptions,
    Counts,
    lag_terms,
    linear,
    linear_parameters,
    projection_macs,
    projection_parameters,
    visible_pairs,
)

class _RegisteredCosts(Mapping):
    """kind -> AttentionCosts of every registered kind, read from the registry on each access
    (a kind registered later is included; one registered without costs is an error)."""

    def __getitem__(self, kind: str) -> AttentionCosts:
        spec = ATTENTION_REGISTRY[kind]
        if spec.costs is None:
            raise KeyError(kind)
        return spec.costs

    def __iter__(self) -> Iterator[str]:
        return (name for name, spec in ATTENTION_REGISTRY.items() if spec.costs is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


KIND_COSTS: Mapping[str, AttentionCosts] = _RegisteredCosts()


def kind_cost(kind: str) -> AttentionCosts:
    if kind not in KIND_COSTS:
        raise ValueError(f"no parameter/FLOP count for attention kind {kind!r}; counted kinds: {', '.join(sorted(KIND_COSTS))} "
                         "(a kind registers its counts with register_attention(costs=...); KIND_COSTS lists them)")
    return KIND_COSTS[kind]


# ---------------------------------------------------------- whole models ---
@dataclass(frozen=True)
class ModelLayout:
    """What a model has besides its ``Architecture``'s layers (fairseq's Transformer options)."""

    encoder_learned_positions: bool = False  # learned positional embeddings (False: sinusoidal or none)
    decoder_learned_positions: bool = False
    max_source_positions: int = 1024
    max_target_positions: int = 1024
    padding_idx: int = 1
    layernorm_embedding: bool = False
    encoder_final_norm: bool = False         # encoder normalize_before
    decoder_final_norm: bool = False         # decoder normalize_before and not no_decoder_final_norm
    decoder_input_dim: Optional[int] = None  # None: decoder_embed_dim (else a bias-free project_in_dim)
    decoder_output_dim: Optional[int] = None  # None: decoder_embed_dim (else a bias-free project_out_dim)
    tie_adaptive_weights: bool = False       # no project_out_dim
    share_all_embeddings: bool = False       # one token embedding matrix for encoder, decoder and output
    share_decoder_input_output_embed: bool = False


@dataclass(frozen=True)
class ArchitectureCost:
    parameters: int            # everything but the dictionary-sized matrices
    parameters_per_entry: int  # token embeddings and output projection, per dictionary entry
    flops: int                 # one forward pass, without the output projection
    flops_per_entry: int       # the output projection, per dictionary entry

    def total_parameters(self, vocab: int) -> int:
        return self.parameters + vocab * self.parameters_per_entry

    def total_flops(self, vocab: int) -> int:
        return self.flops + vocab * self.flops_per_entry

    def total_backward_flops(self, vocab: int) -> int:
        return BACKWARD_FLOPS_PER_FORWARD_FLOP * self.total_flops(vocab)


def layer_norm_parameters(d: int) -> int:
    return 2 * d  # weight and bias


def ffn_parameters(d: int, ffn: int) -> int:
    return linear_parameters(d, ffn) + linear_parameters(ffn, d)


def positions_parameters(learned: bool, max_positions: int, d: int, padding_idx: int = 1) -> int:
    # fairseq's PositionalEmbedding: learned ones have max_positions + padding_idx + 1 rows;
    # sinusoidal ones are a buffer, not parameters.
    return (max_positions + padding_idx + 1) * d if learned else 0


def architecture_cost(architecture, source_length: int = 128, target_length: int = 128,
                      options: AttentionOptions = AttentionOptions(), layout: ModelLayout = ModelLayout()) -> ArchitectureCost:
    """Parameters and forward FLOPs of the model of ``architecture`` (an
    ``fairseq_plugins.models.architecture.Architecture``): the per-layer costs each kind
    registers, FFNs, layer norms, positions, and the dictionary-sized matrices (token
    embeddings, output projection) per dictionary entry. FLOPs: one forward pass over one
    sentence pair of S source and T target tokens (language models: T tokens), 2 per
    multiply-add of the matrix products (``modules/costs.py``)."""
    if source_length < 1 or target_length < 1:
        raise ValueError(f"source and target lengths must be >= 1, got {source_length} and {target_length}")
    params = macs = 0
    S, T = source_length, target_length

    def attention(kind, placement, d, heads, queries, keys, kdim, head_dim):
        cost, layer_options = kind_cost(kind), with_head_dim(options, heads, head_dim)
        return (cost.parameters(placement, d, heads, kdim, layer_options),
                cost.macs(placement, d, heads, queries, keys, kdim, layer_options))

    d_enc = architecture.encoder_embed_dim
    if not architecture.decoder_only:
        params += positions_parameters(layout.encoder_learned_positions, layout.max_source_positions, d_enc, layout.padding_idx)
        params += layer_norm_parameters(d_enc) if layout.layernorm_embedding else 0
        for layer in architecture.encoder_layers:
            p, m = attention(layer.attention_kind, ENCODER_SELF, d_enc, layer.attention_heads, S, S, d_enc, layer.attention_head_dim)
            params += p + layer_norm_parameters(d_enc) + ffn_parameters(d_enc, layer.ffn_embed_dim) + layer_norm_parameters(d_enc)
            macs += m + 2 * S * d_enc * layer.ffn_embed_dim
        params += layer_norm_parameters(d_enc) if layout.encoder_final_norm else 0

    d = architecture.decoder_embed_dim
    d_in = layout.decoder_input_dim or d
    d_out = layout.decoder_output_dim or d
    if d_in != d:  # project_in_dim, bias-free
        params += d_in * d
        macs += T * d_in * d
    params += positions_parameters(layout.decoder_learned_positions, layout.max_target_positions, d, layout.padding_idx)
    params += layer_norm_parameters(d) if layout.layernorm_embedding else 0
    for layer in architecture.decoder_layers:
        p, m = attention(layer.attention_kind, DECODER_SELF, d, layer.attention_heads, T, T, d, layer.attention_head_dim)
        params += p + layer_norm_parameters(d)
        macs += m
        if layer.cross_attention_kind is not None:
            # --encoder-decoder-connect k: the last k encoder layers' outputs, k*S keys
            p, m = attention(layer.cross_attention_kind, ENCODER_DECODER, d, layer.cross_attention_heads, T,
                             layer.encoder_decoder_connect * S, d_enc, layer.cross_attention_head_dim)
            params += p + layer_norm_parameters(d)
            macs += m
        params += ffn_parameters(d, layer.ffn_embed_dim) + layer_norm_parameters(d)
        macs += 2 * T * d * layer.ffn_embed_dim
    params += layer_norm_parameters(d) if layout.decoder_final_norm else 0
    if d_out != d and not layout.tie_adaptive_weights:  # project_out_dim, bias-free
        params += d * d_out
        macs += T * d * d_out

    # dictionary-sized matrices: token embeddings (one shared matrix with
    # --share-all-embeddings) and the output projection unless tied to the decoder's
    shared_all = not architecture.decoder_only and layout.share_all_embeddings
    shared_output = layout.share_decoder_input_output_embed or shared_all
    per_entry = (0 if architecture.decoder_only or shared_all else d_enc) + d_in + (0 if shared_output else d_out)
    return ArchitectureCost(parameters=params, parameters_per_entry=per_entry,
                            flops=FLOPS_PER_MAC * macs, flops_per_entry=FLOPS_PER_MAC * T * d_out)


def with_head_dim(options: AttentionOptions, heads: int, head_dim) -> AttentionOptions:
    """A sub-layer's options: ``options`` with its attention width when it has a head dimension of its own
    (``attention_dim``, see ``modules/costs.attention_width``)."""
    if head_dim is None:
        return options
    return AttentionOptions(**{**options.as_dict(), "attention_dim": heads * head_dim})


def architecture_decoding_state_bytes(architecture, source_length: int, target_length: int,
                                      options: AttentionOptions = AttentionOptions(), element_bytes: int = 4) -> int:
    """Bytes of one sequence's incremental decoding state after ``target_length`` decoded tokens over a
    source of ``source_length`` tokens: every decoder layer's self-attention and encoder-decoder attention
    state (the latter over k*S keys with ``encoder_decoder_connect`` k), as each kind registers it (``AttentionCosts.decoding_state_bytes``; padding masks and position
    counters not counted)."""
    d, d_enc = architecture.decoder_embed_dim, architecture.encoder_embed_dim
    total = 0
    for layer in architecture.decoder_layers:
        total += kind_cost(layer.attention_kind).decoding_state_bytes(
            DECODER_SELF, d, layer.attention_heads, target_length, d,
            with_head_dim(options, layer.attention_heads, layer.attention_head_dim), element_bytes)
        if layer.cross_attention_kind is not None:
            total += kind_cost(layer.cross_attention_kind).decoding_state_bytes(
                ENCODER_DECODER, d, layer.cross_attention_heads, layer.encoder_decoder_connect * source_length, d_enc,
                with_head_dim(options, layer.cross_attention_heads, layer.cross_attention_head_dim), element_bytes)
    return total


# ------------------------------------------------------------------ table ---
def table_rows(d: int, lags: int, t: int, heads: Sequence[int] = (1, 32), output_projection: bool = True) -> List[Dict]:
    """One row per causal self-attention sub-layer whose kind has per-operation counts (a row
    per head count where heads change them): training over a sequence of l tokens, one
    token at length t, parameters."""
    options = AttentionOptions(lags=lags, output_projection=output_projection)
    rows = []
    for name, spec in ATTENTION_REGISTRY.items():
        counts = spec.costs.operation_counts if spec.costs is not None else None
        if counts is None or DECODER_SELF not in spec.placements:
            continue
        for h in heads if counts.per_head else heads[:1]:
            rows.append(dict(
                name=f"{counts.label}, {h} head{'s' if h > 1 else ''}" if counts.per_head else counts.label,
                training=counts.training(d, h, lags, options), step=counts.step(d, h, t, options),
                parameters=spec.costs.parameters(DECODER_SELF, d, h, d, options),
            ))
    return rows


def markdown_table(d: int, lags: int, t: int, heads: Sequence[int] = (1, 32), output_projection: bool = True) -> str:
    header = (
        f"Per sub-layer, d = {d}, l = {lags}: training = one causal pass over l = {lags} tokens; "
        f"decoding = one new token at length t = {t}.\n\n"
        "| sub-layer | training × | training + | training ÷ | training exp | decoding × | decoding + | decoding ÷ | decoding exp | parameters |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    lines = []
    for row in table_rows(d, lags, t, heads, output_projection):
        cells = [row["name"]]
        for part in ("training", "step"):
            counts = row[part]
            cells += [f"{getattr(counts, f.name):,}" for f in fields(counts)]
        cells.append(f"{row['parameters']:,}")
        lines.append("| " + " | ".join(cells) + " |")
    return header + "\n".join(lines) + "\n"
