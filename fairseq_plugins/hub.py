"""The hub interface prepares raw input as the data's preparation did.

data_prep writes ``prepare.json`` beside the dictionaries it binarises: among its settings the Moses
steps of the valid and test text (``moses_eval``: punctuation normalisation, removal of non-printing
characters) and whether the text was lower-cased (``lowercase``, Multi30k's and IWSLT14's default).
``MixedTransformerModel.from_pretrained`` reads it from the model's data folder and applies the same
steps to every sentence it is given, around the tokenizer the hub was built with: a lower-cased model
then translates "Zwei Männer ..." as it does "zwei männer ..." (its output stays lower-cased), instead
of meeting capitalised words it has never seen. Data without the file (prepared otherwise) is used as
before; ``from_pretrained(..., prepare_input=False)`` leaves the input as it is.

fairseq-interactive (and every tool that builds fairseq's ``--tokenizer``): ``--tokenizer moses_prepared
--moses-preparation-file DATA/prepare.json`` is fairseq's Moses tokenizer with the same steps around it.
"""
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.data.encoders import register_tokenizer
from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig
from fairseq.hub_utils import GeneratorHubInterface

logger = logging.getLogger(__name__)

PREPARATION_FILE = "prepare.json"


@dataclass(frozen=True)
class InputPreparation:
    """The steps of the preparation that a raw source sentence needs (data_prep/text.py's MosesPipeline
    for the valid and test text, and lowercase.perl after it)."""

    lang: str
    normalize_punctuation: bool = False
    remove_non_printing: bool = False
    lowercase: bool = False

    @classmethod
    def of_data(cls, data_dir: str, source_lang: Optional[str]) -> Optional["InputPreparation"]:
        """The preparation recorded in ``data_dir/prepare.json`` for ``source_lang``; None without the
        file or for data that is not a translation preparation's."""
        path = os.path.join(data_dir, PREPARATION_FILE)
        return cls.of_file(path, source_lang) if os.path.isfile(path) else None

    @classmethod
    def of_file(cls, path: str, source_lang: Optional[str]) -> Optional["InputPreparation"]:
        """The preparation recorded in the ``prepare.json`` at ``path`` (see ``of_data``)."""
        try:
            with open(path, encoding="utf-8") as f:
                settings = json.load(f)
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not the settings file data_prep writes ({error})") from None
        if not isinstance(settings, dict) or "src" not in settings:  # (a language model's preparation)
            return None
        moses = settings.get("moses_eval") or {}
        return cls(lang=source_lang or settings["src"], normalize_punctuation=bool(moses.get("normalize_punctuation")),
                   remove_non_printing=bool(moses.get("remove_non_printing")), lowercase=bool(settings.get("lowercase")))

    @property
    def steps(self) -> list:
        return [name for name, on in (("Moses punctuation normalisation", self.normalize_punctuation),
                                      ("removal of non-printing characters", self.remove_non_printing),
                                      ("lower-casing", self.lowercase)) if on]

    def before_tokenizer(self, sentence: str) -> str:
        if self.normalize_punctuation:
            from sacremoses import MosesPunctNormalizer

            sentence = MosesPunctNormalizer(lang=self.lang, perl_parity=True).normalize(sentence)
        if self.remove_non_printing:
            import regex

            sentence = regex.sub(r"\p{C}", " ", sentence)  # remove-non-printing-char.perl
        return sentence

    def after_tokenizer(self, sentence: str) -> str:
        return sentence.lower() if self.lowercase else sentence  # (lowercase.perl, after tokenisation)


class PreparedInputHubInterface(GeneratorHubInterface):
    """fairseq's hub interface whose ``tokenize`` (the first step of ``encode``, so of ``translate``
    and ``sample``) applies the data's preparation around the hub's tokenizer."""

    def __init__(self, cfg, task, models, preparation: Optional[InputPreparation] = None):
        super().__init__(cfg, task, models)
        self.preparation = preparation

    def tokenize(self, sentence: str) -> str:
        if self.preparation is None:
            return super().tokenize(sentence)
        return self.preparation.after_tokenizer(super().tokenize(self.preparation.before_tokenizer(sentence)))


def prepared_hub(loaded: dict, prepare_input: bool = True) -> GeneratorHubInterface:
    """The hub interface of what ``fairseq.hub_utils.from_pretrained`` loaded, preparing its input as
    the data's ``prepare.json`` says (unless ``prepare_input`` is False)."""
    cfg = loaded["args"]
    preparation = None
    if prepare_input:
        preparation = InputPreparation.of_data(cfg.task.data, getattr(cfg.task, "source_lang", None))
        if preparation is not None and preparation.steps:
            logger.info(f"input prepared as the data was ({os.path.join(cfg.task.data, PREPARATION_FILE)}): "
                        f"{', '.join(preparation.steps)} ({preparation.lang})")
    return PreparedInputHubInterface(cfg, loaded["task"], loaded["models"], preparation)


@dataclass
class PreparedMosesTokenizerConfig(MosesTokenizerConfig):
    moses_preparation_file: str = field(
        default="", metadata={"help": "the data's prepare.json (data_prep writes it beside the dictionaries): its "
                                      "punctuation normalisation and lower-casing are applied around Moses, as the "
                                      "preparation applied them"})


@register_tokenizer("moses_prepared", dataclass=PreparedMosesTokenizerConfig)
class PreparedMosesTokenizer(MosesTokenizer):
    """fairseq's Moses tokenizer with the data preparation's steps around it (``InputPreparation``), for
    fairseq-interactive and other tools that take fairseq's --tokenizer."""

    def __init__(self, cfg: PreparedMosesTokenizerConfig):
        super().__init__(cfg)
        if not cfg.moses_preparation_file or not os.path.isfile(cfg.moses_preparation_file):
            raise ValueError(f"--moses-preparation-file {cfg.moses_preparation_file!r}: give the prepare.json of the "
                             "model's data (data_prep writes it beside the dictionaries)")
        self.preparation = InputPreparation.of_file(cfg.moses_preparation_file, cfg.source_lang)

    def encode(self, x: str) -> str:
        if self.preparation is None:
            return super().encode(x)
        return self.preparation.after_tokenizer(super().encode(self.preparation.before_tokenizer(x)))
