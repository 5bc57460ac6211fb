"""What the two syntax-hint tasks share: the ``--syntax-hints`` mode, loading
and checking the hint shards of a split, and the link to a criterion that needs
hints (``label_smoothed_cross_entropy_with_pointer``)."""
import logging
from typing import List, Optional, Sequence, Tuple

import numpy as np
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum

from ..data.hinted_datasets import has_hints
from ..data.syntax_hints import (HintDataError, check_parallel, hint_dataset_exists, hints_before_sentence_start,
                                  load_hint_dataset)

logger = logging.getLogger(__name__)

SYNTAX_HINT_MODES = ChoiceEnum(["auto", "required", "off"])

SYNTAX_HINTS_HELP = (
    "BET(SG) syntax hints ({where}.hints.bin/.idx next to the binarised data, written by "
    "data_prep/syntax_hints.py), batched as sample['pointer_hints'] for "
    "--criterion label_smoothed_cross_entropy_with_pointer. auto: load the hints of every split whose hint files "
    "exist (all of its shards or none); once a criterion that needs hints is built (--pointer-loss-weight > 0) "
    "every split loaded afterwards must have them, and splits already loaded without them are an error. "
    "required: every split loaded must have hints. off: never load hints. "
    "A split without hints gives exactly the batches of the {parent} task (default: auto)"
)


def binarised_sizes(prefix: str, dictionary, dataset_impl) -> np.ndarray:
    """The item sizes of a binarised dataset, copied: a memory-mapped dataset's
    sizes live in its mapping, which closes when the dataset is collected."""
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, dataset_impl)
    if dataset is None:
        raise HintDataError(f"binarised dataset {prefix}.bin/.idx not found")
    return np.array(dataset.sizes, dtype=np.int64)


class SyntaxHintsMixin:
    """Mixed into a fairseq task (before it in the bases). The task provides
    ``_syntax_hint_mode()``."""

    # Read by the pointer criterion: this task can put pointer_hints in samples.
    provides_pointer_hints = True

    def _init_syntax_hints(self):
        self._hints_needed_by: Optional[str] = None
        self._hint_prefix_of_split = {}

    def _syntax_hint_mode(self) -> str:  # pragma: no cover - provided by the task
        raise NotImplementedError

    def _load_hint_shards(self, split: str, shards: Sequence[Tuple[str, object, str]]) -> Optional[List[object]]:
        """Hint datasets of ``split``'s shards, or None when the split goes without hints.

        ``shards``: (hint prefix, a callable returning the binarised target sizes,
        target name for messages), in fairseq's shard order.
        """
        self._hint_prefix_of_split[split] = shards[0][0]
        mode = self._syntax_hint_mode()
        if mode == "off":
            return None
        exists = [hint_dataset_exists(prefix) for prefix, _, _ in shards]
        if mode == "required":
            reason = "--syntax-hints required"
        elif self._hints_needed_by is not None:
            reason = f"{self._hints_needed_by} needs them"
        elif any(exists):
            reason = f"other shards of split {split!r} have hints"
        else:
            logger.info(f"split {split}: no syntax hints ({shards[0][0]}.bin/.idx not found); batches carry no pointer_hints")
            return None
        missing = [prefix for (prefix, _, _), found in zip(shards, exists) if not found]
        if missing:
            raise HintDataError(
                f"split {split!r}: hint dataset {missing[0]}.bin/.idx not found ({reason}); "
                "write it with data_prep/syntax_hints.py (see recipes/README.md, BET(SG))"
            )
        hints = []
        for prefix, target_sizes, target_name in shards:
            dataset = load_hint_dataset(prefix)
            check_parallel(dataset, target_sizes(), f"{prefix}.bin/.idx", target_name)
            dropped = hints_before_sentence_start(dataset, prefix)
            if dropped:
                logger.warning(dropped)
            hints.append(dataset)
        logger.info(f"split {split}: loaded syntax hints from {', '.join(p for p, _, _ in shards)}")
        return hints

    def build_criterion(self, cfg, *args, **kwargs):
        criterion = super().build_criterion(cfg, *args, **kwargs)
        needed_by = getattr(criterion, "pointer_hints_needed_by", None)
        if needed_by:
            if self._syntax_hint_mode() == "off":
                raise HintDataError(f"{needed_by} needs syntax hints, but the task has --syntax-hints off")
            self._hints_needed_by = needed_by
            for split, dataset in self.datasets.items():
                if not has_hints(dataset):
                    raise HintDataError(
                        f"{needed_by} needs syntax hints, but split {split!r} was loaded without them "
                        f"({self._hint_prefix_of_split.get(split, '?')}.bin/.idx); write them with data_prep/syntax_hints.py"
                    )
        return criterion
