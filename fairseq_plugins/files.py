"""Outputs that appear only when complete (written under a temporary name, then
renamed): the one implementation for the package, data_prep/, recipes/lib/ and
benchmarks/."""
import contextlib
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from typing import Callable, Iterable, Iterator, Optional


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w"):
    """Open a temporary ``<path>.<unique>.partial`` beside ``path`` for writing (text: UTF-8 and '\\n' line
    ends; ``mode`` with 'b': binary); flush it to disk and rename it to ``path`` on success, remove it on any
    error (the target is then untouched). The name is unique per writer, so that two processes (or threads)
    writing the same file at once each rename a complete file of their own (the last one wins) instead of
    writing into one. A killed run's ``.partial`` file is removed by the next writer of ``path`` (that of a
    process no longer running)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    remove_dead_partials(path)
    partial = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"  # (opened as any file: the usual permissions)
    kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    try:
        with open(partial, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


def remove_dead_partials(path: str):
    """Remove the temporary files (or folders) of ``path`` left by writers that were killed:
    ``<path>.<pid>-<id>.partial`` of a process no longer running, and ``<path>.partial`` (the one name all
    writers used before)."""
    pattern = re.compile(re.escape(os.path.basename(path)) + r"\.(\d+)-[0-9a-f]+\.partial")
    folder = os.path.dirname(os.path.abspath(path))
    for name in os.listdir(folder):
        match = pattern.fullmatch(name)
        if name == os.path.basename(path) + ".partial" or (match and not process_running(int(match.group(1)))):
            leftover = os.path.join(folder, name)
            if os.path.isdir(leftover) and not os.path.islink(leftover):  # (atomic_directory's)
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(leftover)


def process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's process)
        return True
    return True


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
    """Yield an empty folder ``<path>.<unique>.partial`` to fill; on success it replaces ``path`` (a folder there
    before is removed), on any error it is removed. Unique per writer, as ``atomic_output``'s files (two writers
    at once: the last one wins); a killed run's leftover is removed by the next writer of ``path``."""
    # "bin/" names the folder bin: its partial must lie beside it ("bin/.<unique>.partial" lies inside the folder
    # that success removes first)
    path = os.path.normpath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    remove_dead_partials(path)
    partial = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
    os.makedirs(partial)
    try:
        yield partial
        for attempt in range(3):  # (another writer may put its folder at ``path`` between the two steps)
            shutil.rmtree(path, ignore_errors=True)
            try:
                os.replace(partial, path)
                break
            except OSError:
                if attempt == 2:
                    raise
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


LOCK_POLL_SECONDS = 0.5


@contextlib.contextmanager
def exclusive_lock(path: str, on_wait: Optional[Callable[[], None]] = None,
                   while_waiting: Optional[Callable[[], None]] = None):
    """Hold an exclusive ``fcntl.flock`` on the file ``path`` (created where missing) for the block: one holder
    at a time, across processes and threads; released when the block ends or the process does (also when it is
    killed). ``on_wait`` is called once where another holder makes this one wait (to say so); ``while_waiting``
    then about every ``LOCK_POLL_SECONDS``, and gives up the wait by raising (a thread, which no signal reaches,
    told to stop while another process holds the lock for hours)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            if while_waiting is None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            else:
                while True:
                    while_waiting()
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        time.sleep(LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class TextFileError(ValueError):
    """A text file that cannot be read or is not UTF-8; the message says why (callers name the file)."""


def read_text(path: str) -> str:
    """The whole of a UTF-8 text file of ours (a search space, an architecture, a JSON report); a missing or
    unreadable file or one that is not UTF-8 raises ``TextFileError`` saying which byte."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise TextFileError(f"cannot read it ({error.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise TextFileError(f"not UTF-8 text (line {line}, byte {error.start}: {error.reason} "
                            f"{data[error.start:error.end]!r}); save it as UTF-8") from None


def write_lines(path: str, lines: Iterable[str]) -> int:
    """Write one line per item (atomically); returns the number of lines."""
    count = 0
    with atomic_output(path) as f:
        for line in lines:
            f.write(line + "\n")
            count += 1
    return count


def write_json(path: str, data, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` as JSON and a final newline (atomically)."""
    with atomic_output(path) as f:
        json.dump(data, f, indent=indent, sort_keys=sort_keys)
        f.write("\n")
