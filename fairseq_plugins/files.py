"""Output files that appear only when complete (written under a temporary
name, then renamed): used by data_prep/, the tooling and the analysis tool."""
import contextlib
import os
from typing import Iterable


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w"):
    """Open ``path + '.partial'`` for writing; rename it to ``path`` on success.
    A killed run leaves only the ``.partial`` file, which the next run overwrites."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = path + ".partial"
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


def write_lines(path: str, lines: Iterable[str]) -> int:
    """Write one line per item (atomically); returns the number of lines."""
    count = 0
    with atomic_output(path) as f:
        for line in lines:
            f.write(line + "\n")
            count += 1
    return count
