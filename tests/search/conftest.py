"""Fixtures shared by the model tests."""
import pytest


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A folder with small dictionaries for translation (src, tgt) and language models (dict.txt)."""
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(12)))
    return str(path)
