"""Options of the ``cosformer`` kind: the horizon M of its cos re-weighting (Qin et al. 2022,
eq. 9) in causal and encoder-decoder attention, and the checks against the model's positions; the
algorithm of causal attention (``algorithms.py``)."""
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

from ..options import AttentionContext, KindOptions
from ..registry import DECODER_SELF, ENCODER_DECODER, ENCODER_SELF, PLACEMENT_NAMES, AttentionConfigError
from .algorithms import ALGORITHM_CHOICES, FUSED, triton_available


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

    cosformer_algorithm: str = field(
        default="auto",
        metadata={
            "help": "cosFormer causal attention's algorithm: auto (the torch chunked form for a full pass; decoding in the "
            "fused step kernel on CUDA when triton imports), chunked (torch, any device) or fused (Triton kernels, "
            "full pass and decoding: CUDA); choices: auto, chunked, fused",
            "placements": (DECODER_SELF,),
        },
    )

    def validate(self):
        self.cosformer_algorithm = str(self.cosformer_algorithm)
        if self.cosformer_algorithm not in ALGORITHM_CHOICES:
            raise AttentionConfigError(
                f"--cosformer-algorithm must be one of {', '.join(ALGORITHM_CHOICES)}, got {self.cosformer_algorithm!r}")
        if self.cosformer_algorithm == FUSED and not triton_available():
            raise AttentionConfigError("--cosformer-algorithm fused needs the optional dependency triton (pip install triton), "
                                       "which does not import here")
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
