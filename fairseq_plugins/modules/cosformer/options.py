"""Options of the ``cosformer`` kind: the horizon M of its cos re-weighting (Qin et al. 2022,
eq. 9) in causal and encoder-decoder attention, and the checks against the model's positions."""
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

from ..options import AttentionContext, KindOptions
from ..registry import DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, PLACEMENT_NAMES, AttentionConfigError


@dataclass
class CosformerOptions(KindOptions):
    cosformer_max_positions: Optional[int] = field(
        default=None,
        metadata={
            "help": "cosFormer horizon M of causal and encoder-decoder attention: positions must stay below it, so it "
            "must be at least the positions the model is built for (default: --max-target-positions, and for "
            "encoder-decoder attention the larger of source and target)",
            # encoder self-attention takes its M from each sequence
            "placements": (DECODER_SELF, ENCODER_DECODER),
        },
    )

    def validate(self):
        if self.cosformer_max_positions is not None:
            self.cosformer_max_positions = int(self.cosformer_max_positions)
            if self.cosformer_max_positions < 1:
                raise AttentionConfigError(f"--cosformer-max-positions must be >= 1, got {self.cosformer_max_positions}")

    def check_model(self, context: AttentionContext, layers: Sequence[Tuple[str, int]]):
        """An explicit ``--cosformer-max-positions`` must cover the positions the model is built for, or
        cosFormer fails only at the first batch with a longer sequence, possibly hours into training.
        Causal self-attention sees target positions, encoder-decoder attention both (as ``horizon_for``)."""
        horizon = self.cosformer_max_positions
        if horizon is None:  # the default horizon is taken from these same positions
            return
        for placement, layer in layers:
            if placement == ENCODER_SELF:
                continue
            candidates = list(context.target_positions) + (list(context.source_positions) if placement == ENCODER_DECODER else [])
            known = [entry for entry in candidates if entry.value is not None]
            if not known:
                continue
            largest = max(known, key=lambda entry: entry.count)  # (the first option on a tie)
            if horizon < largest.count:
                option = largest.option
                raise AttentionConfigError(
                    f"--cosformer-max-positions {horizon} is smaller than {largest.describe()}, the positions the model is "
                    f"built for: cosformer {PLACEMENT_NAMES[placement]} (decoder layer {layer}) would fail at the first "
                    f"longer sequence; raise --cosformer-max-positions to at least {largest.count} or lower {option} (a checkpoint "
                    f"trained before this check loads with --model-overrides \"{{'{option[2:].replace('-', '_')}': "
                    f"{horizon - largest.extra}}}\")")


def horizon_for(placement: str, options: CosformerOptions, context: AttentionContext) -> Optional[int]:
    """The fixed M of causal and encoder-decoder attention (None: per sequence)."""
    if placement == ENCODER_SELF:
        return None
    if options.cosformer_max_positions is not None:
        return options.cosformer_max_positions
    candidates = [context.max_target_positions] + ([context.max_source_positions] if placement != DECODER_SELF else [])
    candidates = [int(c) for c in candidates if c is not None]
    if not candidates:
        raise AttentionConfigError(
            "cosformer needs a horizon M for causal and encoder-decoder attention: "
            "set --cosformer-max-positions (or --max-target-positions)"
        )
    return max(candidates)
