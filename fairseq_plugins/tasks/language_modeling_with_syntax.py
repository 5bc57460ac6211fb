"""``language_modeling_with_syntax``: fairseq's language-modelling task whose
training and validation batches also carry BET(SG) syntax hints as
``sample["pointer_hints"]`` (see ``data/hinted_datasets.py``).

Hints of split ``split`` (and of ``split1``, ``split2``, ... when fairseq
combines shards) are read from ``{data}/{split}.hints.bin/.idx`` of the data
directory of the epoch (``data`` = ``dir1:dir2:...``: directory (e - 1) mod n,
as LanguageModelingTask does) and must be parallel to the binarised text. They
go through the same transformations as the tokens: ``--shorten-method
truncate`` and a ``TokenBlockDataset`` with the same sizes, block size and
break mode, so that every block's hints line up with its targets; a hint that
points before its block's start is dropped (-1), never wrapped.
``--add-bos-token`` is supported (its row has no hint). Refused with hints:
``--shorten-method random_crop`` and ``--self-target`` / ``--past-target``.
fairseq-eval-lm and generation ignore the hints.
"""
import itertools
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import ConcatDataset, TokenBlockDataset, indexed_dataset
from fairseq.data.shorten_dataset import maybe_shorten_dataset
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..data.hinted_datasets import HintedMonolingualDataset, unwrap_hints
from ..data.syntax_hints import HintDataError, hint_dataset_prefix
from .syntax_hint_loading import SYNTAX_HINT_MODES, SYNTAX_HINTS_HELP, SyntaxHintsMixin, binarised_sizes


@dataclass
class LanguageModelingWithSyntaxConfig(LanguageModelingConfig):
    syntax_hints: SYNTAX_HINT_MODES = field(
        default="auto",
        metadata={"help": SYNTAX_HINTS_HELP.format(where="{split}", parent="language_modeling")},
    )


@register_task("language_modeling_with_syntax", dataclass=LanguageModelingWithSyntaxConfig)
class LanguageModelingWithSyntaxTask(SyntaxHintsMixin, LanguageModelingTask):
    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        super().__init__(args, dictionary, output_dictionary=output_dictionary, targets=targets)
        self._init_syntax_hints()

    def _syntax_hint_mode(self) -> str:
        return str(getattr(self.args, "syntax_hints", "auto"))

    def _shorten_split(self, split: str) -> bool:
        # maybe_shorten_dataset's rule for which splits it shortens
        split_list = self.args.shorten_data_split_list
        return split in split_list.split(",") or len(split_list) == 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        paths = utils.split_paths(self.args.data)
        data_path = paths[(epoch - 1) % len(paths)]
        impl = self.args.dataset_impl

        shards = []
        for k in itertools.count():
            split_k = split + (str(k) if k > 0 else "")
            token_prefix = os.path.join(data_path, split_k)
            if not indexed_dataset.dataset_exists(token_prefix, impl=impl):
                break
            sizes = (lambda p: lambda: binarised_sizes(p, self.dictionary, impl))(token_prefix)
            shards.append((hint_dataset_prefix(data_path, split_k), sizes, f"{token_prefix}.bin/.idx"))
            if not combine:
                break
        hints = self._load_hint_shards(split, shards)
        if hints is None:
            return

        if self.args.shorten_method == "random_crop" and self._shorten_split(split):
            raise HintDataError(
                f"split {split!r}: --shorten-method random_crop is not supported with syntax hints "
                "(a crop would cut hints off their sentence start); use truncate or none, or --syntax-hints off"
            )
        if self.targets != ["future"]:
            raise HintDataError(
                f"syntax hints need the standard future target, but the task has targets {self.targets} "
                "(--self-target / --past-target); drop those options or use --syntax-hints off"
            )
        hints = hints[0] if len(hints) == 1 else ConcatDataset(hints)
        # The same transformations LanguageModelingTask.load_dataset applies to the tokens.
        hints = maybe_shorten_dataset(
            hints,
            split,
            self.args.shorten_data_split_list,
            self.args.shorten_method,
            self.args.tokens_per_sample,
            self.args.seed,
        )
        hint_blocks = TokenBlockDataset(
            hints,
            hints.sizes,
            self.args.tokens_per_sample,
            pad=self.dictionary.pad(),
            eos=self.dictionary.eos(),
            break_mode=self.args.sample_break_mode,
            include_targets=False,
        )
        self.datasets[split] = HintedMonolingualDataset(self.datasets[split], hint_blocks)

    def eval_lm_dataloader(self, dataset, *args, **kwargs):
        # fairseq-eval-lm scores tokens only (LMContextWindowDataset re-slices targets).
        return super().eval_lm_dataloader(unwrap_hints(dataset), *args, **kwargs)
