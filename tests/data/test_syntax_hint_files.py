"""Opening a hint dataset checks its files against each other (the .idx header,
its size, the offsets it lists and the size of the .bin): a damaged dataset is
a one-line HintDataError naming the file, not a crash inside fairseq's
indexed dataset or at the first batch that reads past the end of the .bin."""
import struct

import pytest

from fairseq_plugins.data.syntax_hints import HintDataError, load_hint_dataset, write_hint_dataset

SENTENCES = [[0, 1, 0], [2, 0], [0, 0, 3, 1, 0]]
VALUES = sum(len(s) for s in SENTENCES)
HEADER = 26  # magic (9 bytes), version (8), dtype code (1), number of sentences (8)
REPAIR = "; write the hint dataset again with data_prep/syntax_hints.py"


@pytest.fixture
def prefix(tmp_path):
    path = str(tmp_path / "train.hints")
    write_hint_dataset(path, SENTENCES)
    return path


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_an_intact_dataset_loads(prefix):
    hints = load_hint_dataset(prefix)
    assert [hints[i].tolist() for i in range(len(hints))] == SENTENCES


@pytest.mark.parametrize("damage, message", [
    (lambda p: truncate(p + ".idx", 0), "{p}.idx is empty"),
    (lambda p: truncate(p + ".idx", 10), "{p}.idx has 10 bytes, fewer than its 26-byte header: the .idx is truncated"),
    (lambda p: patch(p + ".idx", 0, b"XXIDIDX\x00\x00"), "{p}.idx is not an index of fairseq's mmap dataset format "
                                                           "(its header does not start with b'MMIDIDX\\x00\\x00' and version 1)"),
    (lambda p: patch(p + ".idx", 17, bytes([99])), "{p}.idx names value type code 99, which fairseq does not know"),
    (lambda p: patch(p + ".idx", 18, struct.pack("<Q", 4)), f"{{p}}.idx has {HEADER + 36} bytes, but its header lists "
                                                            f"4 sentences ({HEADER + 48} bytes): the .idx is truncated"),
    (lambda p: patch(p + ".idx", HEADER + 4, struct.pack("<i", -2)), "{p}.idx lists a negative size (sentence 2)"),
    (lambda p: patch(p + ".idx", HEADER + 12 + 8, struct.pack("<q", 4)),
     "{p}.idx: the offset of sentence 2 is 4, not 12 (the sizes before it); the .idx is damaged"),
    (lambda p: truncate(p + ".bin", 4 * VALUES - 4), f"{{p}}.bin has {4 * VALUES - 4} bytes, but {{p}}.idx lists "
                                                                 f"3 sentences of {VALUES} values ({4 * VALUES} bytes): "
                                                                 "the .bin is truncated or belongs to another index"),
], ids=["empty idx", "short idx", "magic", "dtype", "idx shorter than its count", "negative size", "offsets",
        "truncated bin"])
def test_a_damaged_dataset_is_an_error_naming_the_file(prefix, damage, message):
    damage(prefix)
    with pytest.raises(HintDataError) as error:
        load_hint_dataset(prefix)
    assert str(error.value) == message.format(p=prefix) + REPAIR
