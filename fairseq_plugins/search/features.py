"""Architecture features for the rankers (``rank``), the pruning of a space (``prune``) and the search.

An architecture of a space becomes a fixed-length vector (RankNAS, Hu et al. 2021, ranks Hardware-Aware
Transformers' sub-networks by such features): the embedding widths and layer counts; per layer slot up to
the space's deepest side the FFN width, head counts, the attention kinds (their index in the space's list)
and the encoder-decoder connect, missing (NaN) where the architecture has fewer
layers; and summary features: the forward FLOPs and parameters the registry counts for a 30-token sentence
pair (without the dictionary-sized embeddings and output projection) and, per placement, how many
sub-layers use each kind.

Every per-layer feature belongs to a field of the space (``SPACE_FIELD``), through which ``prune`` fixes it;
summary features belong to none.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..models.architecture import Architecture
from .space import SearchSpace

SUMMARY_LENGTH = 30  # tokens of the sentence pair the summary FLOPs are counted for


@dataclass(frozen=True)
class Feature:
    name: str
    space_field: Optional[str]  # e.g. "decoder.attention_kinds"; None for summary features


class FeatureEncoder:
    """The features of the architectures of ``space`` (module docstring)."""

    def __init__(self, space: SearchSpace):
        self.space = space
        features: List[Feature] = []
        sides = ([("encoder", space.encoder)] if space.encoder is not None else []) + [("decoder", space.decoder)]
        for side, choices in sides:
            features += [Feature(f"{side}.embed_dim", f"{side}.embed_dim"), Feature(f"{side}.layers", f"{side}.layers")]
        for side, choices in sides:
            for i in range(max(choices.layers)):
                prefix = f"{side}.layer{i}"
                features += [Feature(f"{prefix}.ffn_embed_dim", f"{side}.ffn_embed_dim"),
                             Feature(f"{prefix}.attention_heads", f"{side}.attention_heads"),
                             Feature(f"{prefix}.attention_kind", f"{side}.attention_kinds")]
                if side == "decoder" and space.encoder is not None:
                    features += [Feature(f"{prefix}.cross_attention_heads", "decoder.cross_attention_heads"),
                                 Feature(f"{prefix}.cross_attention_kind", "decoder.cross_attention_kinds"),
                                 Feature(f"{prefix}.encoder_decoder_connect", "decoder.encoder_decoder_connect")]
        features += [Feature("flops", None), Feature("parameters", None)]
        for side, choices in sides:
            for kind in choices.attention_kinds:
                features.append(Feature(f"count.{side}_self.{kind}", f"{side}.attention_kinds"))
            if side == "decoder" and space.encoder is not None:
                for kind in choices.cross_attention_kinds:
                    features.append(Feature(f"count.cross.{kind}", "decoder.cross_attention_kinds"))
        self.features = features

    @property
    def names(self) -> List[str]:
        return [f.name for f in self.features]

    def encode(self, architecture: Architecture) -> List[float]:
        """The feature vector of ``architecture`` (in ``names`` order)."""
        from ..complexity import architecture_cost

        values: Dict[str, float] = {}
        space = self.space
        sides = []
        if space.encoder is not None:
            sides.append(("encoder", space.encoder, architecture.encoder_embed_dim, architecture.encoder_layers))
        sides.append(("decoder", space.decoder, architecture.decoder_embed_dim, architecture.decoder_layers))
        for side, choices, width, layers in sides:
            values[f"{side}.embed_dim"] = width
            values[f"{side}.layers"] = len(layers)
            for i, layer in enumerate(layers):
                prefix = f"{side}.layer{i}"
                values[f"{prefix}.ffn_embed_dim"] = layer.ffn_embed_dim
                values[f"{prefix}.attention_heads"] = layer.attention_heads
                values[f"{prefix}.attention_kind"] = choices.attention_kinds.index(layer.attention_kind)
                values[f"count.{side}_self.{layer.attention_kind}"] = values.get(f"count.{side}_self.{layer.attention_kind}", 0) + 1
                if side == "decoder" and space.encoder is not None:
                    values[f"{prefix}.cross_attention_heads"] = layer.cross_attention_heads
                    values[f"{prefix}.cross_attention_kind"] = choices.cross_attention_kinds.index(layer.cross_attention_kind)
                    values[f"{prefix}.encoder_decoder_connect"] = layer.encoder_decoder_connect
                    values[f"count.cross.{layer.cross_attention_kind}"] = values.get(f"count.cross.{layer.cross_attention_kind}", 0) + 1
        cost = architecture_cost(architecture, SUMMARY_LENGTH, SUMMARY_LENGTH)
        values["flops"], values["parameters"] = cost.flops, cost.parameters
        return [float(values[f.name]) if f.name in values else (0.0 if f.name.startswith("count.") else math.nan)
                for f in self.features]

    def matrix(self, architectures: Sequence[Architecture]) -> List[List[float]]:
        return [self.encode(a) for a in architectures]

    def field_importance(self, importance: Dict[str, float]) -> List[Tuple[str, float]]:
        """The importance of each space field: the sum over its features (summary features have none), most
        important first (fields with no feature in ``importance`` count 0)."""
        totals: Dict[str, float] = {}
        for feature in self.features:
            if feature.space_field is not None:
                totals[feature.space_field] = totals.get(feature.space_field, 0.0) + float(importance.get(feature.name, 0.0))
        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))
