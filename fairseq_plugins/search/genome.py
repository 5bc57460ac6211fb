"""Architectures as fixed-length genomes, for the evolutionary and the multi-objective search.

As in Hardware-Aware Transformers' evolution, a genome holds a gene for every choice of the space at its
deepest: the embedding widths, the layer counts, and every layer slot's choices up to the most layers a
side can have; an architecture uses the slots up to its layer counts (the others are carried along, so
that a crossover or a mutation of the depth finds them). A decoder layer's connect larger than the
architecture's encoder depth is read as the largest choice that fits (the space guarantees one).
"""
import random
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..models.architecture import Architecture, DecoderLayer, EncoderLayer
from .space import SearchSpace

Genome = Tuple  # the values of ``GenomeCodec.genes``, in order


@dataclass(frozen=True)
class Gene:
    name: str
    choices: Tuple


class GenomeCodec:
    """The genes of a space's genomes, and the conversions between genomes and architectures."""

    def __init__(self, space: SearchSpace):
        self.space = space
        genes: List[Gene] = []
        enc, dec = space.encoder, space.decoder
        if enc is not None:
            genes += [Gene("encoder.embed_dim", tuple(enc.embed_dim)), Gene("encoder.layers", tuple(enc.layers))]
        if enc is None or not space.shared_embed_dim:
            genes.append(Gene("decoder.embed_dim", tuple(dec.embed_dim)))
        genes.append(Gene("decoder.layers", tuple(dec.layers)))
        if enc is not None:
            for i in range(max(enc.layers)):
                genes += [Gene(f"encoder.layer{i}.ffn_embed_dim", tuple(enc.ffn_embed_dim)),
                          Gene(f"encoder.layer{i}.attention_heads", tuple(enc.attention_heads)),
                          Gene(f"encoder.layer{i}.attention_kind", tuple(enc.attention_kinds))]
        for i in range(max(dec.layers)):
            genes += [Gene(f"decoder.layer{i}.ffn_embed_dim", tuple(dec.ffn_embed_dim)),
                      Gene(f"decoder.layer{i}.attention_heads", tuple(dec.attention_heads)),
                      Gene(f"decoder.layer{i}.attention_kind", tuple(dec.attention_kinds))]
            if enc is not None:
                genes += [Gene(f"decoder.layer{i}.cross_attention_heads", tuple(dec.cross_attention_heads)),
                          Gene(f"decoder.layer{i}.cross_attention_kind", tuple(dec.cross_attention_kinds)),
                          Gene(f"decoder.layer{i}.encoder_decoder_connect", tuple(dec.encoder_decoder_connect))]
        self.genes = genes
        self.index = {gene.name: i for i, gene in enumerate(genes)}

    def draw(self, rng: random.Random) -> Genome:
        return tuple(rng.choice(gene.choices) for gene in self.genes)

    def decode(self, genome: Genome) -> Architecture:
        values: Dict[str, object] = dict(zip((g.name for g in self.genes), genome))
        space = self.space
        encoder_width, encoder_layers = None, ()
        if space.encoder is not None:
            encoder_width = values["encoder.embed_dim"]
            encoder_layers = tuple(
                EncoderLayer(values[f"encoder.layer{i}.attention_kind"], values[f"encoder.layer{i}.attention_heads"],
                             values[f"encoder.layer{i}.ffn_embed_dim"])
                for i in range(values["encoder.layers"]))
        decoder_width = values.get("decoder.embed_dim", encoder_width)
        decoder_layers = []
        for i in range(values["decoder.layers"]):
            kind, heads, ffn = (values[f"decoder.layer{i}.attention_kind"], values[f"decoder.layer{i}.attention_heads"],
                                values[f"decoder.layer{i}.ffn_embed_dim"])
            if space.encoder is None:
                decoder_layers.append(DecoderLayer(kind, heads, ffn))
                continue
            fitting = [k for k in space.decoder.encoder_decoder_connect if k <= len(encoder_layers)]
            wanted = values[f"decoder.layer{i}.encoder_decoder_connect"]
            connect = max([k for k in fitting if k <= wanted] or [min(fitting)])
            decoder_layers.append(DecoderLayer(kind, heads, ffn, values[f"decoder.layer{i}.cross_attention_kind"],
                                               values[f"decoder.layer{i}.cross_attention_heads"], connect))
        return space.with_head_dims(Architecture(decoder_embed_dim=decoder_width, decoder_layers=tuple(decoder_layers),
                                                 encoder_embed_dim=encoder_width, encoder_layers=encoder_layers)).check()

    def encode(self, architecture: Architecture, rng: random.Random) -> Genome:
        """A genome that decodes to ``architecture``; the slots beyond its layer counts are drawn from ``rng``."""
        self.space.check_contains(architecture)
        values = {gene.name: rng.choice(gene.choices) for gene in self.genes}
        sides = [("decoder", architecture.decoder_embed_dim, architecture.decoder_layers)]
        if self.space.encoder is not None:
            sides.insert(0, ("encoder", architecture.encoder_embed_dim, architecture.encoder_layers))
        for side, width, layers in sides:
            values[f"{side}.embed_dim"] = width
            values[f"{side}.layers"] = len(layers)
            for i, layer in enumerate(layers):
                values[f"{side}.layer{i}.ffn_embed_dim"] = layer.ffn_embed_dim
                values[f"{side}.layer{i}.attention_heads"] = layer.attention_heads
                values[f"{side}.layer{i}.attention_kind"] = layer.attention_kind
                if side == "decoder" and self.space.encoder is not None:
                    values[f"{side}.layer{i}.cross_attention_heads"] = layer.cross_attention_heads
                    values[f"{side}.layer{i}.cross_attention_kind"] = layer.cross_attention_kind
                    values[f"{side}.layer{i}.encoder_decoder_connect"] = layer.encoder_decoder_connect
        return tuple(values[gene.name] for gene in self.genes)

    def mutate(self, genome: Genome, probability: float, rng: random.Random) -> Genome:
        """Every gene redrawn (uniformly among its choices) with ``probability``."""
        return tuple(rng.choice(gene.choices) if rng.random() < probability else value
                     for gene, value in zip(self.genes, genome))

    def crossover(self, first: Genome, second: Genome, rng: random.Random) -> Genome:
        """Every gene from either parent, with probability 1/2 each."""
        return tuple(a if rng.random() < 0.5 else b for a, b in zip(first, second))
