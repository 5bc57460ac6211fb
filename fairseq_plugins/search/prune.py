"""Pruning a search space by feature importance (``python -m fairseq_plugins.search prune``).

The mixed-attention paper prunes its space with the ranker's feature importances before the search (its
code copies the kept features into the search script by hand). Here the importances of a ranker's features
(``rank`` writes them) are summed per field of the space (``FeatureEncoder.field_importance``: every
per-layer feature belongs to one field, e.g. ``decoder.attention_kinds``); the ``keep`` most important
fields that still have a choice stay free, every other field is fixed at its value in the best architecture
of the ranker's data (for a per-layer field, the value most of its layers use, the space's first on ties).
With ``shared_embed_dim`` the two sides' widths are one choice: fixing either fixes both. A fixed connect
deeper than the shallowest free encoder depth becomes the deepest connect that depth allows.
"""
from collections import Counter
from typing import Dict, List, Tuple

from ..models.architecture import Architecture
from .space import SearchSpace, SearchSpaceError


def field_value(architecture: Architecture, field: str):
    """The value of a space field in ``architecture``; per-layer fields: (value, count) pairs, most common first."""
    side, name = field.split(".", 1)
    layers = architecture.encoder_layers if side == "encoder" else architecture.decoder_layers
    if name == "embed_dim":
        return architecture.encoder_embed_dim if side == "encoder" else architecture.decoder_embed_dim
    if name == "layers":
        return len(layers)
    attribute = {"attention_kinds": "attention_kind", "cross_attention_kinds": "cross_attention_kind"}.get(name, name)
    counts = Counter(getattr(layer, attribute) for layer in layers)
    return counts.most_common()


def prune(space: SearchSpace, field_importance: List[Tuple[str, float]], best: Architecture, keep: int) -> Tuple[SearchSpace, Dict]:
    """The pruned space and what was kept and fixed (module docstring)."""
    if keep < 0:
        raise SearchSpaceError(f"--keep: expected 0 or more, got {keep}")
    space.check_contains(best, "the best architecture of the ranker's data")
    data = space.to_dict()
    importance = dict(field_importance)
    known = {f"{side}.{name}" for side in ("encoder", "decoder") if side in data for name in data[side]}
    unknown = sorted(set(importance) - known)
    if unknown:
        raise SearchSpaceError(f"--importance: field {unknown[0]} is not a field of the space (fields: {', '.join(sorted(known))})")
    # the choices: a field with more than one value; shared widths are one choice of both sides' fields
    # (a field the importances do not name counts 0)
    groups = [(f,) for f in sorted(known) if len(data[f.split(".")[0]][f.split(".", 1)[1]]) > 1]
    if space.shared_embed_dim and space.encoder is not None:
        widths = ("encoder.embed_dim", "decoder.embed_dim")
        groups = [g for g in groups if g[0] not in widths] + ([widths] if (widths[0],) in groups else [])
    ordered = sorted(groups, key=lambda g: (-sum(importance.get(f, 0.0) for f in g), g))
    free = [f for group in ordered[:keep] for f in group]
    fixed = {}
    for field in (f for group in ordered[keep:] for f in group):
        side, name = field.split(".", 1)
        choices = data[side][name]
        value = field_value(best, field)
        if isinstance(value, list):  # per-layer: the most common value, the space's first among equally common
            top = value[0][1]
            value = min((v for v, c in value if c == top), key=choices.index)
        data[side][name] = [value]
        fixed[field] = value
    connect = "decoder.encoder_decoder_connect"
    if connect in fixed and min(data["encoder"]["layers"]) < fixed[connect]:
        # a connect deeper than the shallowest encoder left free would leave that depth no choice: the deepest
        # connect that every free depth allows (the space guarantees one)
        depth = min(data["encoder"]["layers"])
        fixed[connect] = max(k for k in space.decoder.encoder_decoder_connect if k <= depth)
        data["decoder"]["encoder_decoder_connect"] = [fixed[connect]]
    pruned = SearchSpace.from_dict(data, "the pruned space")
    return pruned, {"kept": free, "fixed": fixed, "size_before": space.size(), "size_after": pruned.size()}


def to_yaml(space: SearchSpace, comment: str) -> str:
    import yaml

    return "".join(f"# {line}\n" for line in comment.splitlines()) + yaml.safe_dump(space.to_dict(), sort_keys=False)
