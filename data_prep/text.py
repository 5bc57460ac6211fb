"""Text processing of the standard translation preparations, in Python:
Moses' tokenizer.perl, lowercase.perl, normalize-punctuation.perl,
remove-non-printing-char.perl and clean-corpus-n.perl (through ``sacremoses``
and re-implementations line for line), subword-nmt's learn_bpe / apply_bpe,
and sentencepiece. Every function writes its output atomically."""
import multiprocessing
import os
import re
import unittest.mock
from typing import Callable, Iterable, List, Optional, Sequence

from .common import (atomic_output, count_lines, log, progress, read_lines, require, require_parallel, require_text,
                     write_lines)

# --------------------------------------------------------------- raw text ---
# prepare-iwslt14.sh / prepare-wmt14en2de.sh: grep '<seg id' | sed 's/<seg id="[0-9]*">\s*//g'
#   | sed 's/\s*<\/seg>\s*//g' | sed "s/\’/\'/g"   (GNU sed's \s: ASCII white space)
_SEG_OPEN = re.compile(r'<seg id="[0-9]*">[ \t\r\f\v]*')
_SEG_CLOSE = re.compile(r"[ \t\r\f\v]*</seg>[ \t\r\f\v]*")


def reference_segments(path: str) -> List[str]:
    """The segments as sacreBLEU reads a WMT SGML file (``sacrebleu -t ... --echo ref``),
    so that scores against them equal sacreBLEU's own test sets."""
    return [re.sub(r"\s+", " ", re.sub(r"<seg.*?>(.*)</seg>.*?", "\\1", line).strip())
            for line in read_lines(path) if line.startswith("<seg ")]


def sgm_segments(path: str, fix_apostrophe: bool = True) -> List[str]:
    """The ``<seg id=...>`` texts of an IWSLT XML or WMT SGML file, as the
    fairseq scripts extract them (no unescaping of XML entities, as there)."""
    segments = []
    for line in read_lines(path):
        if "<seg id" not in line:
            continue
        line = _SEG_CLOSE.sub("", _SEG_OPEN.sub("", line))
        segments.append(line.replace("\u2019", "'") if fix_apostrophe else line)
    return segments


# ---------------------------------------------------------------- Moses ---
_CACHE: dict = {}  # per process: tools are built once, not per pickled task


def _moses_tools(lang: str):
    if ("moses", lang) not in _CACHE:
        sacremoses = require("sacremoses", "sacremoses", "Moses tokenisation")
        regex = require("regex", "regex", "remove-non-printing-char")

        _CACHE["moses", lang] = (
            sacremoses.MosesPunctNormalizer(lang=lang, perl_parity=True),
            sacremoses.MosesTokenizer(lang=lang),
            regex.compile(r"\p{C}"),
        )
    return _CACHE["moses", lang]


class MosesPipeline:
    """normalize-punctuation -> remove-non-printing-char -> tokenizer -> lowercase,
    each stage optional, applied to one line (picklable for worker processes)."""

    def __init__(self, lang: str, tokenize: bool = True, aggressive_dashes: bool = False, escape: bool = True,
                 lowercase: bool = False, normalize_punctuation: bool = False, remove_non_printing: bool = False):
        self.lang, self.tokenize, self.aggressive_dashes, self.escape = lang, tokenize, aggressive_dashes, escape
        self.lowercase, self.normalize_punctuation, self.remove_non_printing = lowercase, normalize_punctuation, remove_non_printing

    def __call__(self, line: str) -> str:
        normalizer, tokenizer, non_printing = _moses_tools(self.lang)
        if self.normalize_punctuation:
            line = normalizer.normalize(line)
        if self.remove_non_printing:
            line = non_printing.sub(" ", line)  # remove-non-printing-char.perl: s/\p{C}/ /g
        if self.tokenize:
            line = tokenizer.tokenize(line, aggressive_dash_splits=self.aggressive_dashes, return_str=True,
                                      escape=self.escape)
        if self.lowercase:
            line = line.lower()
        return line


def map_file(function: Callable[[str], str], sources: Sequence[str], dst: str, workers: int = 1) -> int:
    """Write ``function(line)`` for every line of ``sources`` (concatenated) to
    ``dst``, in order, streaming through ``workers`` processes. Returns the line count."""
    total = sum(count_lines(path) for path in sources)
    lines = (line for path in sources for line in read_lines(path))
    count = 0
    with atomic_output(dst) as out, progress(total=total, desc=os.path.basename(dst), unit="lines") as bar:
        if workers <= 1 or total < 5000:
            results = map(function, lines)
            pool = None
        else:
            pool = multiprocessing.get_context("fork").Pool(workers)
            results = pool.imap(function, lines, chunksize=1000)
        try:
            for result in results:
                out.write(result + "\n")
                count += 1
                bar.update()
        finally:
            if pool is not None:
                pool.terminate()
    return count


def moses_file(src: str, dst: str, pipeline: MosesPipeline, workers: int = 1) -> int:
    """Apply ``pipeline`` to every line of ``src``; returns the line count."""
    return map_file(pipeline, [src], dst, workers)


def detokenizer(lang: str) -> Callable[[str], str]:
    sacremoses = require("sacremoses", "sacremoses", "Moses detokenisation")
    moses = sacremoses.MosesDetokenizer(lang=lang)
    return lambda line: moses.detokenize(line.split())


# ------------------------------------------------------------ cleaning ---
def _clean_words(line: str) -> str:
    line = line.replace("|", "")  # not factored
    return re.sub(r"\s+", " ", line).strip(" ")


def clean_corpus(src_in: str, tgt_in: str, src_out: str, tgt_out: str, min_len: int = 1, max_len: int = 175,
                 ratio: float = 1.5, max_word_length: int = 1000) -> int:
    """clean-corpus-n.perl -ratio R corpus l1 l2 out MIN MAX: drop pairs with an
    empty side, a side outside [MIN, MAX] words, a length ratio above R either
    way, or a word longer than max_word_length; '|' is removed and white space
    collapsed, as there. Returns the number of pairs kept."""
    require_parallel("cleaning", {src_in: count_lines(src_in), tgt_in: count_lines(tgt_in)})
    total = kept = 0
    with atomic_output(src_out) as src_file, atomic_output(tgt_out) as tgt_file:
        for source, target in zip(read_lines(src_in), read_lines(tgt_in)):
            total += 1
            source, target = _clean_words(source), _clean_words(target)
            if not source or not target:
                continue
            source_words, target_words = source.split(" "), target.split(" ")
            sc, tc = len(source_words), len(target_words)
            if not (min_len <= sc <= max_len and min_len <= tc <= max_len):
                continue
            if sc / tc > ratio or tc / sc > ratio:
                continue
            if max(map(len, source_words + target_words)) > max_word_length:
                continue
            src_file.write(source + "\n")
            tgt_file.write(target + "\n")
            kept += 1
    log(f"clean-corpus: kept {kept} of {total} pairs")
    return kept


def concatenate(paths: Iterable[str], dst: str) -> int:
    return write_lines(dst, (line for path in paths for line in read_lines(path)))


def split_every(src: str, every: int, held_out: str, rest: str) -> None:
    """awk 'NR%N == 0' -> held_out, 'NR%N != 0' -> rest (1-based line numbers)."""
    write_lines(held_out, (line for i, line in enumerate(read_lines(src), 1) if i % every == 0))
    write_lines(rest, (line for i, line in enumerate(read_lines(src), 1) if i % every != 0))


# ------------------------------------------------------------------ BPE ---
def learn_bpe(inputs: Sequence[str], codes: str, merges: int, workers: int = 1) -> None:
    """subword-nmt learn_bpe -s MERGES on the concatenation of ``inputs`` (joint BPE)."""
    require("subword_nmt", "subword-nmt", "BPE")
    from subword_nmt import learn_bpe as subword_module

    for path in inputs:  # subword-nmt crashes deep inside on a side without text
        require_text(path, "BPE is learnt on the training text (did the data, or its cleaning, leave no pair?)")
    joint = codes + ".input"
    concatenate(inputs, joint)

    # subword-nmt draws its own tqdm bar over the merges on stderr, redrawn into a log file: ours instead
    # (a bar on a terminal, at most a line every few minutes in a log)
    def merge_progress(iterable, *args, **kwargs):
        return progress(iterable, total=len(iterable), desc=f"learn_bpe {os.path.basename(codes)}", unit="merges",
                        disable=False)

    with open(joint, encoding="utf-8") as infile, atomic_output(codes) as outfile, \
            unittest.mock.patch.object(subword_module, "tqdm", merge_progress):
        subword_module.learn_bpe(infile, outfile, merges, num_workers=max(1, workers))
    os.remove(joint)


class _BPE:
    def __init__(self, codes: str):
        self.key = ("bpe", codes, os.stat(codes).st_mtime_ns)

    def __call__(self, line: str) -> str:
        if self.key not in _CACHE:
            from subword_nmt.apply_bpe import BPE

            with open(self.key[1], encoding="utf-8") as f:
                _CACHE[self.key] = BPE(f)
        return _CACHE[self.key].process_line(line)


def apply_bpe(codes: str, src: str, dst: str, workers: int = 1) -> None:
    """subword-nmt apply_bpe -c CODES < src > dst."""
    require("subword_nmt", "subword-nmt", "BPE")
    map_file(_BPE(codes), [src], dst, workers)


def train_sentencepiece(inputs: Sequence[str], model_prefix: str, vocab_size: int, model_type: str = "bpe",
                        max_sentences: int = 10_000_000) -> None:
    """A joint sentencepiece model (``model_prefix``.model/.vocab), deterministic
    (seeded sampling of at most ``max_sentences`` lines)."""
    spm = require("sentencepiece", "sentencepiece", "sentencepiece")
    partial = model_prefix + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(model_prefix)), exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(inputs), model_prefix=partial, vocab_size=vocab_size, model_type=model_type,
        character_coverage=1.0, input_sentence_size=max_sentences, shuffle_input_sentence=True, seed_sentencepiece_size=1_000_000,
        num_threads=1, minloglevel=2,
    )
    for suffix in (".model", ".vocab"):
        os.replace(partial + suffix, model_prefix + suffix)


def apply_sentencepiece(model: str, src: str, dst: str) -> None:
    spm = require("sentencepiece", "sentencepiece", "sentencepiece")
    processor = spm.SentencePieceProcessor(model_file=model)
    write_lines(dst, (" ".join(processor.encode(line, out_type=str)) for line in read_lines(src)))


def line_count_report(paths: Sequence[str]) -> None:
    for path in paths:
        log(f"  {os.path.basename(path)}: {count_lines(path)} lines")


def dictionary_size(dest: str, lang: Optional[str] = None) -> int:
    """Symbols of fairseq's dictionary: its 4 special symbols and the dict
    file's entries, without the 'madeupword' padding to a multiple of 8."""
    name = f"dict.{lang}.txt" if lang else "dict.txt"
    return 4 + sum(1 for line in read_lines(os.path.join(dest, name)) if not line.startswith("madeupword"))
