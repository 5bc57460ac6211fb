"""``translation_with_syntax``: fairseq's translation task whose training and
validation batches also carry the BET(SG) syntax hints of the target side as
``sample["pointer_hints"]`` (see ``data/hinted_datasets.py``).

Hints of split ``split`` (and of its extra shards ``split1``, ``split2``, ...
when fairseq combines them) are read from
``{data}/{split}.{src}-{tgt}.{tgt}.hints.bin/.idx`` of the data directory in
use (with ``data`` = ``dir1:dir2:...`` the training set of epoch e comes from
directory (e - 1) mod n, valid and test from the first), and must be parallel to
the binarised target shard. Generation ignores them.
"""
import itertools
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import BucketPadLengthDataset, ConcatDataset, indexed_dataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.hinted_datasets import HintedLanguagePairDataset
from ..data.syntax_hints import hint_dataset_prefix
from .syntax_hint_loading import SYNTAX_HINT_MODES, SYNTAX_HINTS_HELP, SyntaxHintsMixin, binarised_sizes


@dataclass
class TranslationWithSyntaxConfig(TranslationConfig):
    syntax_hints: SYNTAX_HINT_MODES = field(
        default="auto",
        metadata={"help": SYNTAX_HINTS_HELP.format(where="{split}.{src}-{tgt}.{tgt}", parent="translation")},
    )


@register_task("translation_with_syntax", dataclass=TranslationWithSyntaxConfig)
class TranslationWithSyntaxTask(SyntaxHintsMixin, TranslationTask):
    cfg: TranslationWithSyntaxConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self._init_syntax_hints()

    def _syntax_hint_mode(self) -> str:
        return str(self.cfg.syntax_hints)

    def _data_path(self, split: str, epoch: int) -> str:
        # The directory TranslationTask.load_dataset reads for this split and epoch.
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        return paths[(epoch - 1) % len(paths)]

    def _target_shards(self, data_path: str, split: str, combine: bool):
        """(split_k, binarised target prefix) of every shard fairseq loads, in its order."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        shards = []
        for k in itertools.count():
            split_k = split + (str(k) if k > 0 else "")
            for first, second in ((src, tgt), (tgt, src)):
                prefix = os.path.join(data_path, f"{split_k}.{first}-{second}.")
                if indexed_dataset.dataset_exists(prefix + src, impl=self.cfg.dataset_impl):
                    shards.append((split_k, prefix + tgt))
                    break
            else:
                break
            if not combine:
                break
        return shards

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        data_path = self._data_path(split, epoch)
        src, tgt = self.cfg.source_lang, self.cfg.target_lang

        def target_sizes(prefix):
            return lambda: binarised_sizes(prefix, self.tgt_dict, self.cfg.dataset_impl)

        shards = [
            (hint_dataset_prefix(data_path, split_k, src, tgt), target_sizes(prefix), f"{prefix}.bin/.idx")
            for split_k, prefix in self._target_shards(data_path, split, combine)
        ]
        hints = self._load_hint_shards(split, shards)
        if hints is None:
            return
        if len(hints) > 1:
            targets = pair.tgt.dataset if isinstance(pair.tgt, BucketPadLengthDataset) else pair.tgt
            # the sample ratios fairseq gave the target shards (--upsample-primary)
            hints = ConcatDataset(hints, targets.sample_ratios)
        else:
            hints = hints[0]
        self.datasets[split] = HintedLanguagePairDataset(pair, hints)
