"""fairseq_plugins.files, the one atomic writer: text (UTF-8, '\\n') and binary,
JSON and lines, folders; on an error the target is untouched and no temporary
file or folder is left."""
import json
import os

import pytest

from fairseq_plugins.files import atomic_directory, atomic_output, exclusive_lock, write_json, write_lines


def leftovers(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".partial"))


def test_text_and_binary_outputs_appear_complete(tmp_path):
    text, binary = tmp_path / "sub" / "out.txt", tmp_path / "out.bin"
    with atomic_output(str(text)) as f:
        f.write("é\nzwei\n")
        assert not text.exists()
    assert text.read_bytes() == "é\nzwei\n".encode("utf-8")
    with atomic_output(str(binary), "wb") as f:
        f.write(b"\x00\xff")
    assert binary.read_bytes() == b"\x00\xff"
    assert leftovers(tmp_path) == leftovers(tmp_path / "sub") == []


@pytest.mark.parametrize("mode", ["w", "wb"])
def test_an_error_leaves_the_old_file_and_no_partial(tmp_path, mode):
    target = tmp_path / "out"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(str(target), mode) as f:
            f.write("half" if mode == "w" else b"half")
            raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert leftovers(tmp_path) == []


def test_writers_of_one_file_at_the_same_time_each_rename_a_complete_file_of_their_own(tmp_path):
    import threading

    target = tmp_path / "report.md"
    opened = threading.Barrier(2)

    def write(text):
        with atomic_output(str(target)) as f:
            f.write(text[:500])
            opened.wait()  # both temporary files open at once
            f.write(text[500:])

    texts = ["a" * 1000 + "\n", "b" * 2000 + "\n"]
    threads = [threading.Thread(target=write, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_text() in texts and leftovers(tmp_path) == []
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())  # the usual permissions


def test_a_killed_writers_temporary_file_goes_with_the_next_write(tmp_path):
    import subprocess
    import sys

    target = tmp_path / "out.json"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"out.json.{int(ended.stdout)}-0123abcd.partial"  # a writer killed halfway (its process has ended)
    (tmp_path / dead).write_text("half")
    (tmp_path / "out.json.partial").write_text("half")  # the one name writers used before
    alive = f"out.json.{os.getpid()}-89abcdef.partial"  # a writer of this process, still writing
    (tmp_path / alive).write_text("half")
    (tmp_path / "other.json.1-0123abcd.partial").write_text("x")  # another file's: not this one's to remove
    write_json(str(target), {"a": 1})
    assert leftovers(tmp_path) == sorted([alive, "other.json.1-0123abcd.partial"])


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_lines_and_json(tmp_path):
    assert write_lines(str(tmp_path / "lines.txt"), (w for w in ["a", "b c"])) == 2
    assert (tmp_path / "lines.txt").read_text() == "a\nb c\n"
    write_json(str(tmp_path / "d.json"), {"b": 1, "a": [2]}, sort_keys=True)
    assert (tmp_path / "d.json").read_text() == json.dumps({"a": [2], "b": 1}, indent=1) + "\n"


def test_atomic_directory_replaces_the_folder_or_leaves_it(tmp_path):
    target = tmp_path / "bin"
    target.mkdir()
    (target / "stale").write_text("x")
    for leftover in ("bin.partial", "bin.999999999-0badc0de.partial"):  # killed runs' (the old name; a dead pid)
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "half").write_text("x")
    with atomic_directory(str(target)) as partial:
        assert os.listdir(partial) == [] and os.path.basename(partial).startswith(f"bin.{os.getpid()}-")
        (tmp_path / partial / "dict.txt").write_text("a 1\n")
    assert os.listdir(target) == ["dict.txt"] and leftovers(tmp_path) == []
    with pytest.raises(RuntimeError):
        with atomic_directory(str(target)) as partial:
            (tmp_path / partial / "other").write_text("y")
            raise RuntimeError("killed")
    assert os.listdir(target) == ["dict.txt"] and leftovers(tmp_path) == []


def test_two_writers_of_one_folder_each_fill_their_own_and_the_last_one_wins(tmp_path):
    target = tmp_path / "bin"
    with atomic_directory(str(target)) as first:
        with atomic_directory(str(target)) as second:  # (another process, started while the first one writes)
            assert first != second and os.listdir(first) == []
            (tmp_path / second / "from_second").write_text("b")
        (tmp_path / first / "from_first").write_text("a")
    assert os.listdir(target) == ["from_first"] and leftovers(tmp_path) == []


def test_a_folder_named_with_a_trailing_slash_is_filled_beside_it(tmp_path):
    """``bin/`` is the folder bin: its partial lies beside it, not inside the folder that success replaces."""
    target = tmp_path / "bin"
    target.mkdir()
    (target / "stale").write_text("x")
    with atomic_directory(str(target) + os.sep) as partial:
        assert os.path.dirname(os.path.abspath(partial)) == str(tmp_path)
        (tmp_path / partial / "dict.txt").write_text("a 1\n")
    assert os.listdir(target) == ["dict.txt"] and leftovers(tmp_path) == []


def test_a_lock_wait_gives_up_when_told_to(tmp_path):
    """``while_waiting`` is called while another holder (a thread here, as another process) keeps the lock, and
    its exception ends the wait; without another holder the lock is taken at once."""
    import threading

    path = str(tmp_path / "row.lock")
    calls, outcome = [], []

    def give_up():
        calls.append(1)
        if len(calls) == 3:
            raise TimeoutError("stopped")

    def wait():
        try:
            with exclusive_lock(path, while_waiting=give_up):
                outcome.append("held")
        except TimeoutError:
            outcome.append("gave up")

    with exclusive_lock(path):
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(30)
        assert not waiter.is_alive() and outcome == ["gave up"] and len(calls) == 3
    with exclusive_lock(path, while_waiting=give_up):
        assert len(calls) == 3  # (not called: nobody held it)
