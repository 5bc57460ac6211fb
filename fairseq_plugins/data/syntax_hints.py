"""Syntax hints of BET(SG) (Sha et al. 2022, Sec. 3.3): where to store them and
how to read them back.

A hint dataset is a fairseq indexed dataset (``mmap``) parallel to a binarised
target: one item per sentence, one non-negative integer per target token plus
one for the end-of-sentence token fairseq appends (n + 1 values for a line of n
whitespace-separated tokens).

Meaning of a value. Decoder row t is the step whose input is the previous
target token (the end-of-sentence token for t = 0, as in fairseq's
``prev_output_tokens`` and in language-model streams) and that predicts target
token t. The value d_t is a *backward distance between rows*: the pointer loss
asks row t to attend to row t - d_t (0 = itself, the paper's fallback "x_t").
Distances are relative, so they survive fairseq's batching, padding and a
language model's ``TokenBlockDataset`` blocking; a row whose t - d_t falls
before the start of its block has no hint there.

Paths, next to the binarised data (``fairseq-preprocess --destdir``):

* translation: ``{data}/{split}.{src}-{tgt}.{tgt}.hints.{bin,idx}``
* language modelling: ``{data}/{split}.hints.{bin,idx}``

Where the values come from (``data_prep/syntax_hints.py`` writes them with the
functions below, which need no parser and are tested on hand-built trees):

* The paper's rule (its indexing: the row whose input is x_t predicts x_{t+1}):
  the hint of that row is the nearest ancestor of x_{t+1} in the dependency
  tree that stands to the left of x_{t+1}; when there is none, the hint is x_t
  itself (the row's own input).
* Parses are over words, the model over subwords. Every subword belongs to a
  word (``subword_words``): subword-nmt marks a token that continues into the
  next one with a trailing ``@@``; sentencepiece marks a token that starts a
  word with a leading ``▁``; ``none``: every whitespace-separated token is a word.
* Word w's left ancestor (``left_ancestors``): walk up the heads from w
  (parent, grandparent, ..., root) and take the first word with a smaller
  index than w; none when the walk reaches a root first (a root, whose head is
  itself, has none). Heads may form several trees (a parser may split a line
  into sentences); each walk stays in its tree.
* Every subword of word w gets as hint the LAST subword of w's left ancestor
  (``hint_positions``), at target index s; that subword is the input of row
  s + 1, so target index t gets d_t = t - (s + 1) >= 0 (``hint_distances``).
  No left ancestor: d_t = 0. The end-of-sentence slot (index n): d_n = 0.
  (A parent immediately to the left, s = t - 1, also gives 0.)
"""
import os
import struct
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import data_utils, indexed_dataset

HINTS_SUFFIX = "hints"
# No value is a token id, so the dtype is fixed rather than fitted to a vocabulary.
HINT_DTYPE = np.int32
# The header of fairseq's mmap index (MMapIndexedDataset.Index): magic, version, value type code,
# number of items; then the items' sizes (int32) and byte offsets into the .bin (int64).
INDEX_HEADER = struct.Struct("<9sQBQ")
INDEX_VERSION = 1
REWRITE = "write the hint dataset again with data_prep/syntax_hints.py"


class HintDataError(ValueError):
    """A hint dataset is missing, malformed or does not match its text."""


def hint_dataset_prefix(data_dir: str, split: str, src: Optional[str] = None, tgt: Optional[str] = None) -> str:
    """Path prefix (without .bin/.idx) of the hint dataset of ``split``.

    With ``src`` and ``tgt`` (translation) the hints belong to the target side.
    """
    if (src is None) != (tgt is None):
        raise ValueError("hint_dataset_prefix: give both src and tgt (translation) or neither (language modelling)")
    if src is None:
        return os.path.join(data_dir, f"{split}.{HINTS_SUFFIX}")
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{tgt}.{HINTS_SUFFIX}")


def hint_dataset_exists(prefix: str) -> bool:
    return indexed_dataset.MMapIndexedDataset.exists(prefix)


def write_hint_dataset(prefix: str, sentences: Iterable[Sequence[int]]) -> int:
    """Write ``sentences`` (each a sequence of n + 1 distances) to ``prefix``.{bin,idx}.

    Written to temporary files first and renamed at the end, so an interrupted
    run never leaves a dataset that looks complete. Returns the number of
    sentences written.
    """
    tmp_prefix = f"{prefix}.tmp{os.getpid()}"
    builder = indexed_dataset.MMapIndexedDatasetBuilder(indexed_dataset.data_file_path(tmp_prefix), dtype=HINT_DTYPE)
    count = 0
    try:
        for distances in sentences:
            values = torch.as_tensor(np.asarray(distances, dtype=np.int64))
            if values.dim() != 1 or values.numel() == 0:
                raise HintDataError(f"sentence {count + 1}: hints must be a non-empty list of distances")
            if (values < 0).any():
                raise HintDataError(f"sentence {count + 1}: hint distances must be >= 0, got {values.tolist()}")
            builder.add_item(values)
            count += 1
        builder.finalize(indexed_dataset.index_file_path(tmp_prefix))
    except BaseException:
        for path in (indexed_dataset.data_file_path(tmp_prefix), indexed_dataset.index_file_path(tmp_prefix)):
            if os.path.exists(path):
                os.remove(path)
        raise
    os.replace(indexed_dataset.data_file_path(tmp_prefix), indexed_dataset.data_file_path(prefix))
    os.replace(indexed_dataset.index_file_path(tmp_prefix), indexed_dataset.index_file_path(prefix))
    return count


def check_hint_files(prefix: str) -> None:
    """Check ``prefix``.idx (header, size, sizes and offsets) and the size of ``prefix``.bin against it.

    fairseq's reader asserts on a damaged header and maps a short .bin without a word: the damage
    would surface as a crash inside it, or at the first batch that reads past the end of the .bin.
    """
    index_path, data_path = indexed_dataset.index_file_path(prefix), indexed_dataset.data_file_path(prefix)
    index_bytes = os.path.getsize(index_path)
    if index_bytes < INDEX_HEADER.size:
        problem = "is empty" if index_bytes == 0 else (
            f"has {index_bytes} bytes, fewer than its {INDEX_HEADER.size}-byte header: the .idx is truncated")
        raise HintDataError(f"{index_path} {problem}; {REWRITE}")
    with open(index_path, "rb") as f:
        magic, version, dtype_code, count = INDEX_HEADER.unpack(f.read(INDEX_HEADER.size))
    expected_magic = indexed_dataset.MMapIndexedDataset.Index._HDR_MAGIC
    if magic != expected_magic or version != INDEX_VERSION:
        raise HintDataError(f"{index_path} is not an index of fairseq's mmap dataset format (its header does not "
                            f"start with {expected_magic!r} and version {INDEX_VERSION}); {REWRITE}")
    dtype = indexed_dataset._code_to_dtype.get(dtype_code)  # fairseq's table of value type codes
    if dtype is None:
        raise HintDataError(f"{index_path} names value type code {dtype_code}, which fairseq does not know; {REWRITE}")
    expected_index_bytes = INDEX_HEADER.size + count * (4 + 8)
    if index_bytes != expected_index_bytes:
        raise HintDataError(f"{index_path} has {index_bytes} bytes, but its header lists {count} sentences "
                            f"({expected_index_bytes} bytes): the .idx is truncated; {REWRITE}")
    sizes = np.fromfile(index_path, dtype=np.int32, count=count, offset=INDEX_HEADER.size).astype(np.int64)
    offsets = np.fromfile(index_path, dtype=np.int64, count=count, offset=INDEX_HEADER.size + 4 * count)
    if (sizes < 0).any():
        raise HintDataError(f"{index_path} lists a negative size (sentence {int(np.argmax(sizes < 0)) + 1}); {REWRITE}")
    itemsize = np.dtype(dtype).itemsize
    expected_offsets = (np.cumsum(sizes) - sizes) * itemsize
    wrong = np.nonzero(offsets != expected_offsets)[0]
    if len(wrong):
        i = int(wrong[0])
        raise HintDataError(f"{index_path}: the offset of sentence {i + 1} is {int(offsets[i])}, not "
                            f"{int(expected_offsets[i])} (the sizes before it); the .idx is damaged; {REWRITE}")
    values = int(sizes.sum())
    data_bytes = os.path.getsize(data_path)
    if data_bytes != values * itemsize:
        raise HintDataError(f"{data_path} has {data_bytes} bytes, but {index_path} lists {count} sentences of {values} "
                            f"values ({values * itemsize} bytes): the .bin is truncated or belongs to another index; "
                            f"{REWRITE}")
    if count == 0:  # (fairseq cannot map the empty .bin of an empty dataset)
        raise HintDataError(f"{index_path} lists no sentences; {REWRITE} from the non-empty text of the split")


def load_hint_dataset(prefix: str):
    """Load a hint dataset (items are int64 tensors of distances), its files checked first (``check_hint_files``)."""
    if not hint_dataset_exists(prefix):
        raise HintDataError(
            f"hint dataset {prefix}.bin/.idx not found; write it with data_prep/syntax_hints.py "
            "(see recipes/README.md, BET(SG))"
        )
    check_hint_files(prefix)
    return data_utils.load_indexed_dataset(prefix, None, dataset_impl="mmap")


def check_parallel(hints, target_sizes, hint_name: str, target_name: str):
    """Every hint item must have exactly as many values as its target sentence.

    ``target_sizes`` are the binarised target lengths (tokens + end of sentence).
    Fails naming the first mismatching sentence (1-based line of the text).
    """
    hint_sizes = np.asarray(hints.sizes)
    target_sizes = np.asarray(target_sizes)
    if len(hint_sizes) != len(target_sizes):
        raise HintDataError(
            f"{hint_name} has {len(hint_sizes)} sentences but {target_name} has {len(target_sizes)}; "
            "produce the hints from the same text file that was binarised"
        )
    mismatch = np.nonzero(hint_sizes != target_sizes)[0]
    if len(mismatch):
        line = int(mismatch[0])
        raise HintDataError(
            f"{hint_name}: line {line + 1} has {int(hint_sizes[line])} hints but {target_name} has "
            f"{int(target_sizes[line])} tokens there (tokens + end of sentence); "
            "produce the hints from the same text file that was binarised"
        )


def hints_before_sentence_start(hints, prefix: str) -> Optional[str]:
    """What is wrong when hints of ``hints`` (the dataset loaded from ``prefix``) point before the start of their sentence (distance d_t
    above the row t, rows 0-based; 0 = the row itself), else None. The writer never makes one; at batching
    time such a hint is no hint (as one before a language-model block's start), so the loader says how many
    there are instead of dropping them without a word. (One read of the file, vectorised.)"""
    from fairseq.data import indexed_dataset

    sizes = np.array(hints.sizes, dtype=np.int64)  # (a copy: the sizes live in the dataset's memory map)
    values = np.fromfile(indexed_dataset.data_file_path(prefix), dtype=HINT_DTYPE).astype(np.int64)
    if values.size != sizes.sum():
        return None  # (check_hint_files names a damaged file)
    starts = np.cumsum(sizes) - sizes
    rows = np.arange(values.size, dtype=np.int64) - np.repeat(starts, sizes)
    bad = np.nonzero(values > rows)[0]
    if not len(bad):
        return None
    first = int(bad[0])
    sentence_of = np.searchsorted(starts, bad, side="right") - 1
    return (f"{prefix}.bin: {len(bad)} of {values.size} hints, in {len(np.unique(sentence_of))} of {len(sizes)} sentences, "
            f"point before the start of their sentence and are not used (the first: sentence {int(sentence_of[0]) + 1}, row "
            f"{int(rows[first])}, distance {int(values[first])}); data_prep/syntax_hints.py writes none: were they written "
            "for another text?")


# ------------------------------------------------------- hint extraction ---
from .subword_markers import BPE_STYLES, SENTENCEPIECE_WORD_START, SUBWORD_NMT_CONTINUATION  # noqa: E402


def subword_words(tokens: Sequence[str], bpe: str) -> Tuple[List[str], List[int]]:
    """The words of a line of subword ``tokens`` and, for every token, the index of its word.

    subword-nmt: a token ending in ``@@`` continues into the next token (the
    word's text is the tokens without their ``@@``); a line must not end in a
    continued token. sentencepiece: a token starting with ``\u2581`` starts a
    word (the word's text drops that marker; a word made of the bare marker
    alone keeps it, so no word is empty), the others continue the word before
    them (a first token without the marker starts the first word). none: one
    word per token.
    """
    if bpe not in BPE_STYLES:
        raise ValueError(f"bpe must be one of {', '.join(BPE_STYLES)}, got {bpe!r}")
    words: List[str] = []
    word_of: List[int] = []
    if bpe == "none":
        return list(tokens), list(range(len(tokens)))
    if bpe == "subword-nmt":
        pieces: List[str] = []
        for token in tokens:
            word_of.append(len(words))
            if token.endswith(SUBWORD_NMT_CONTINUATION):
                pieces.append(token[: -len(SUBWORD_NMT_CONTINUATION)])
            else:
                pieces.append(token)
                words.append("".join(pieces))
                pieces = []
        if pieces:
            raise HintDataError(
                f"subword-nmt: the last token {tokens[-1]!r} ends in '{SUBWORD_NMT_CONTINUATION}' "
                "(continues into a word that is not there); is this the BPE'd text and --bpe right?"
            )
        return words, word_of
    for token in tokens:  # sentencepiece
        if token.startswith(SENTENCEPIECE_WORD_START) or not words:
            words.append(token)
        else:
            words[-1] += token
        word_of.append(len(words) - 1)
    words = [word[1:] if word.startswith(SENTENCEPIECE_WORD_START) and len(word) > 1 else word for word in words]
    return words, word_of


def left_ancestors(heads: Sequence[int]) -> List[int]:
    """For every word w, the nearest ancestor with a smaller index than w, or -1.

    ``heads[w]`` is the index of w's head; a root is its own head. Raises
    ``HintDataError`` for a head out of range or a cycle.
    """
    n = len(heads)
    for word, head in enumerate(heads):
        if not 0 <= head < n:
            raise HintDataError(f"word {word}: head {head} is outside the sentence (0..{n - 1})")
    ancestors = []
    for word in range(n):
        current, found = word, -1
        for _ in range(n):
            parent = heads[current]
            if parent == current:  # reached a root
                break
            if parent < word:
                found = parent
                break
            current = parent
        else:
            raise HintDataError(f"heads {list(heads)} contain a cycle (word {word} never reaches a root)")
        ancestors.append(found)
    return ancestors


def hint_positions(word_of: Sequence[int], heads: Sequence[int]) -> List[int]:
    """For every subword (target index t), the target index of its hint subword or -1.

    ``word_of``: the word of every subword (``subword_words``), ``heads``: the
    word-level heads. The hint of a subword of word w is the last subword of
    w's left ancestor.
    """
    n_words = len(heads)
    in_order = all(b - a in (0, 1) for a, b in zip(word_of, word_of[1:]))
    covered = (word_of[0] == 0 and word_of[-1] == n_words - 1) if len(word_of) else n_words == 0
    if not (in_order and covered):
        raise HintDataError(
            f"the subwords' words {list(word_of)} do not cover words 0..{n_words - 1} in order (one head per word)"
        )
    last_subword = {}
    for position, word in enumerate(word_of):
        last_subword[word] = position
    ancestors = left_ancestors(heads)
    return [last_subword[ancestors[word]] if ancestors[word] >= 0 else -1 for word in word_of]


def hint_distances(word_of: Sequence[int], heads: Sequence[int]) -> List[int]:
    """The n + 1 backward row distances of a line of n subwords (see the module docstring).

    Target index t with its hint subword at s: d_t = t - (s + 1); no hint: 0;
    the end-of-sentence slot: 0.
    """
    distances = [t - (s + 1) if s >= 0 else 0 for t, s in enumerate(hint_positions(word_of, heads))]
    return distances + [0]


def sentence_hint_distances(tokens: Sequence[str], heads: Sequence[int], bpe: str) -> List[int]:
    """``hint_distances`` of a line of subword ``tokens`` whose words have ``heads``."""
    words, word_of = subword_words(tokens, bpe)
    if len(heads) != len(words):
        raise HintDataError(f"{len(heads)} heads for {len(words)} words {words}")
    return hint_distances(word_of, heads)
