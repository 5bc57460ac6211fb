"""Shared machinery of the data preparation scripts.

* ``Resource`` / ``fetch``: find a release file in ``--raw-dir`` (under our
  name for it or its official file name) or download it (official location
  first, then mirrors, each with retries; interrupted downloads resume with
  HTTP range requests), then verify it.
* Checksums: a published checksum (sha256 or md5) is mandatory when we know
  one and a mismatch is an error naming the file (also for an archive in
  ``--raw-dir`` next to its extracted files; files found already extracted
  cannot be checked, which the log says). Where none is known we never
  invent one: the computed sha256 is printed with a note and recorded in
  ``<work-dir>/SHA256SUMS.local``, and later runs must match that record.
* ``atomic_output`` / ``write_lines`` / ``binarize``: outputs appear only when
  complete (written under a temporary name, then renamed).
* ``Steps``: resumable pipeline. Every step writes a stamp with a fingerprint
  of its parameters and of the steps before it once its outputs are complete; a
  second run skips stamped steps, a run killed halfway redoes only the step it
  was in (whose outputs were never renamed into place), or only the part of it
  (``Steps.run_each``: one stamp per split), a changed parameter redoes that
  step and every step after it.
* ``read_lines``: the one text reader of the preparations and the syntax-hint
  tool. Invalid UTF-8 is an error naming the file, line and byte, or, with
  ``--invalid-utf8 replace``, U+FFFD and a warning with the counts per file.
* ``log``/``log_warning``: Python ``logging`` (logger ``data_prep``) on stderr in fairseq's format
  (``time | INFO | data_prep | message``; ``configure_logging``).
* ``progress``: a tqdm bar on a terminal; in a log, a line at most every few minutes instead.
* ``require`` / ``main_guard``: a missing Python package is a one-line error
  naming it and how to install it (``make setup``, or pip with the version
  requirements.txt pins). Third-party modules are imported where they are
  used, never when a data_prep module is imported, so that this error can
  be given (the script data_prep/syntax_hints.py imports them at its top and
  reports a missing one the same way).
"""
import argparse
import contextlib
import fcntl
import gzip
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, NoReturn, Optional, Sequence, Tuple

CHUNK = 1 << 20
RECORD_NAME = "SHA256SUMS.local"
ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Import name -> the distribution that provides it, where the two differ.
DISTRIBUTIONS = {"fairseq": "fairseq-fixed", "fairseq_cli": "fairseq-fixed", "subword_nmt": "subword-nmt",
                 "hydra": "hydra-core", "sklearn": "scikit-learn"}
PIN_FILES = ("requirements.txt", "constraints.txt", "Makefile")  # where `make setup` takes the versions from
OUR_PACKAGES = ("data_prep", "fairseq_plugins")  # not installable: a missing one of these is a bug
INVALID_UTF8_POLICIES = ("error", "replace")
_invalid_utf8 = "error"  # the policy of read_lines when its caller gives none (see invalid_utf8_policy)
_inputs_read: Optional[set] = None  # the files fetch gave during a step that tracks its inputs (Steps.run)


class PrepError(RuntimeError):
    """A problem the user must fix (missing file or tool, failed checksum)."""


logger = logging.getLogger("data_prep")


class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each record (not the stream of when it was made)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


# fairseq_plugins.command_line's (fairseq_cli's), not imported from there: data_prep imports no plugin module
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def configure_logging() -> logging.Logger:
    """The ``data_prep`` logger (and its children) on stderr in fairseq's format, level ``$LOGLEVEL`` (default
    INFO); done by the command lines first, and by the first ``log`` of a program that did not. A program that
    gives the ``data_prep`` logger a handler of its own keeps it."""
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
        logger.addHandler(handler)
        logger.setLevel((os.environ.get("LOGLEVEL") or "INFO").upper())
        logger.propagate = False
    return logger


def log(message: str) -> None:
    configure_logging().info(message)


def log_warning(message: str) -> None:
    configure_logging().warning(message)


# not on a terminal: a progress line at most this often (a step's own log line says when it is done)
LOG_PROGRESS_SECONDS = 300.0


class LogProgress:
    """Progress in a log (stderr not a terminal): no bar redrawn into the file, only a line at most every
    ``interval`` seconds while the work lasts; tqdm's interface as the callers use it."""

    def __init__(self, iterable=None, total=None, desc: str = "", unit: str = "it", initial: int = 0,
                 interval: Optional[float] = None, disable: bool = False, **_):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n, self.disable = initial, disable
        self.interval = LOG_PROGRESS_SECONDS if interval is None else interval
        self._last = time.monotonic()

    def update(self, count: int = 1) -> None:
        self.n += count
        if not self.disable and time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            of = f"/{self.total}" if self.total is not None else ""
            log(f"{self.desc}: {self.n}{of} {self.unit}")

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update()

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(iterable=None, total=None, desc: str = "", unit: str = "it", **kwargs):
    """A tqdm bar on stderr when it is a terminal; otherwise (a log file) ``LogProgress``: no redrawn
    bar, a line at most every LOG_PROGRESS_SECONDS."""
    kwargs.setdefault("disable", total is not None and total < 20000)  # no bars for small files
    # (required in a log too: a missing install is the same error on a terminal and off it)
    tqdm = require("tqdm", "tqdm", "progress bars").tqdm
    if not sys.stderr.isatty():
        return LogProgress(iterable, total=total, desc=desc, unit=unit, **kwargs)
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, mininterval=0.5,
                dynamic_ncols=True, leave=False, **kwargs)


def pinned(distribution: str) -> Tuple[Optional[str], Optional[str]]:
    """(``distribution==version``, the file of PIN_FILES that pins it), or (None, None)."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(distribution)}==[\w.+!]+", re.IGNORECASE)
    for name in PIN_FILES:
        path = os.path.join(ROOT_DIR, name)
        if os.path.exists(path):
            match = pattern.search(open(path, encoding="utf-8").read())
            if match:
                return match.group(0), name
    return None, None


def distribution_of(module: str) -> str:
    top = module.split(".")[0]
    return DISTRIBUTIONS.get(top, top.replace("_", "-"))


def missing_package(distribution: str, purpose: str, module: Optional[str] = None) -> PrepError:
    """The error for a package that is not installed: what to install, and how."""
    pin, source = pinned(distribution)
    if source == "Makefile":  # installed by `make setup` outside requirements.txt (fairseq-fixed: without its dependency list)
        how = f"run `make setup` (it installs {pin}; see the Makefile)"
    elif pin:
        how = f"run `make setup`, or pip install -c constraints.txt {pin} (the version {source} pins)"
    else:
        how = "run `make setup` (pip install -c constraints.txt -r requirements.txt)"
    module_note = f" (module {module})" if module and module != distribution else ""
    return PrepError(f"{purpose} needs the Python package '{distribution}'{module_note}, which is not installed: {how}")


def require(module: str, package: str, purpose: str):
    """Import ``module`` (of the distribution ``package``) or raise a ``PrepError`` naming what is
    missing (``package``, or a dependency of it) and how to install it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or module).split(".")[0]
        if missing in OUR_PACKAGES:
            raise
        distribution = package if missing == module.split(".")[0] else distribution_of(missing)
        raise missing_package(distribution, purpose, missing) from None


def fail_for_missing_module(error: ModuleNotFoundError, purpose: str) -> NoReturn:
    """``fail`` with ``missing_package`` for a module that is not installed; one of
    our own packages missing is a bug, not an installation problem: re-raised."""
    if not error.name or error.name.split(".")[0] in OUR_PACKAGES:
        raise error
    fail(missing_package(distribution_of(error.name), purpose, error.name.split(".")[0]))


DEBUG_VARIABLE = "FAIRSEQ_PLUGINS_DEBUG"  # fairseq_plugins.errors' (not imported here: it needs torch)


def fail(error: PrepError) -> NoReturn:
    """Report a ``PrepError`` as one line on stderr and exit with status 2 (as fairseq_plugins.errors does
    for the package; with ``$FAIRSEQ_PLUGINS_DEBUG`` set, the error is raised with its traceback)."""
    if os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no"):
        raise error
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2)


# ------------------------------------------------------------------ files ---
# The atomic writers are fairseq_plugins.files' (one implementation for the repository), imported when
# first used: the fairseq_plugins package imports torch and fairseq, and a data_prep module must import
# without them so that a missing one is reported as such.
def _files():
    return require("fairseq_plugins.files", "fairseq-fixed", "data_prep")


def atomic_output(path: str, mode: str = "w"):
    """``fairseq_plugins.files.atomic_output``."""
    return _files().atomic_output(path, mode)


def atomic_directory(path: str):
    """``fairseq_plugins.files.atomic_directory``."""
    return _files().atomic_directory(path)


def write_lines(path: str, lines: Iterable[str]) -> int:
    """``fairseq_plugins.files.write_lines``: one line per item (atomically); returns the number of lines."""
    return _files().write_lines(path, lines)


def write_json(path: str, data, indent: int = 1, sort_keys: bool = False) -> None:
    """``fairseq_plugins.files.write_json``."""
    _files().write_json(path, data, indent=indent, sort_keys=sort_keys)


def copy_file(source: str, destination: str) -> None:
    """Copy ``source`` to ``destination`` atomically (a partial copy never carries the final name)."""
    with open(source, "rb") as src, atomic_output(destination, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)


def copy_text(source: str, destination: str) -> int:
    """Copy a text file line by line through ``read_lines`` (so under its invalid-UTF-8 policy: never
    bytes that fairseq-preprocess cannot decode), atomically; a missing final newline is added.
    Returns the number of lines."""
    return write_lines(destination, read_lines(source))


def sacrebleu_registry(purpose: str) -> List[Tuple[str, str]]:
    """(url, md5) of every file in the installed sacreBLEU's dataset registry that has a published md5."""
    datasets = require("sacrebleu.dataset", "sacrebleu", purpose).DATASETS
    return [(url, md5) for dataset in datasets.values()
            for url, md5 in zip(dataset.data, getattr(dataset, "md5", None) or [])]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@contextlib.contextmanager
def invalid_utf8_policy(policy: str):
    """``read_lines`` without an explicit policy follows ``policy`` inside this block (``main_guard``
    sets ``--invalid-utf8`` for a whole preparation: the reads are spread over every dataset module)."""
    global _invalid_utf8
    if policy not in INVALID_UTF8_POLICIES:
        raise ValueError(f"invalid UTF-8 policy must be one of {', '.join(INVALID_UTF8_POLICIES)}, got {policy!r}")
    saved, _invalid_utf8 = _invalid_utf8, policy
    try:
        yield
    finally:
        _invalid_utf8 = saved


def add_invalid_utf8_argument(parser: argparse.ArgumentParser) -> None:
    """``--invalid-utf8``: the one policy of every text reader (the preparations and the syntax-hint tool)."""
    parser.add_argument("--invalid-utf8", choices=INVALID_UTF8_POLICIES, default="error",
                        help="text that is not valid UTF-8: error (name the file, line and byte) or replace "
                        "(every invalid sequence becomes U+FFFD; a warning counts them per file)")


def invalid_utf8_params(args) -> Dict[str, str]:
    """Step parameters of the step that reads the release's text: the text depends on ``--invalid-utf8``.
    The default adds none, so the stamps of runs made before the option existed stay valid."""
    policy = getattr(args, "invalid_utf8", "error")
    return {} if policy == "error" else {"invalid_utf8": policy}


def read_lines(path: str, invalid_utf8: Optional[str] = None, universal_newlines: bool = False,
               warn: bool = True) -> Iterator[str]:
    """Lines without their end-of-line; .gz files are decompressed. Only '\\n' splits (as in Moses'
    scripts) unless ``universal_newlines`` ('\\r\\n' and '\\r' too, as Python's text files and so
    fairseq-preprocess read them).

    Text that is not valid UTF-8 follows ``invalid_utf8`` (default: the policy of the enclosing
    ``invalid_utf8_policy``, else "error"): "error" raises a ``PrepError`` naming the file, line and byte;
    "replace" gives U+FFFD for every invalid sequence (as ``errors="replace"``) and logs a warning with
    their count once the file has been read (``warn=False``: not again, for a second pass over a file)."""
    policy = invalid_utf8 or _invalid_utf8
    where = "decompressed file" if path.endswith(".gz") else "file"
    replaced = replaced_lines = 0
    first = ""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            offset = 0  # of the line in the (decompressed) bytes
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    if policy != "replace":
                        raise PrepError(
                            f"{path}: line {number} (byte {offset + error.start} of the {where}) is not valid UTF-8 "
                            f"({error.reason} {raw[error.start:error.end]!r}); fix the file, or pass --invalid-utf8 "
                            "replace to replace every invalid sequence with U+FFFD") from None
                    line = raw.decode("utf-8", errors="replace")
                    # One U+FFFD per invalid sequence; those already in the file are valid text, not counted.
                    replaced += line.count("\ufffd") - raw.count("\ufffd".encode())
                    replaced_lines += 1
                    first = first or f"line {number}, byte {offset + error.start}"
                offset += len(raw)
                line = line[:-1] if line.endswith("\n") else line
                if universal_newlines:
                    yield from (line[:-1] if line.endswith("\r") else line).split("\r")
                else:
                    yield line
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise damaged_gzip(path, error) from None
    finally:  # also when the reader stops early: what was replaced so far is said
        if replaced and warn:
            log_warning(f"{path}: replaced {_plural(replaced, 'invalid UTF-8 sequence')} on "
                f"{_plural(replaced_lines, 'line')} with U+FFFD (--invalid-utf8 replace; the first on {first})")


def damaged_gzip(path: str, error: BaseException) -> PrepError:
    """The error for a compressed file that ends early or is not what its name says."""
    what = "truncated" if isinstance(error, EOFError) else "damaged"
    return PrepError(f"{path}: a {what} compressed file ({error or type(error).__name__}); download or copy it again")


def require_parallel(what: str, counts: Dict[str, int]) -> None:
    """The sides of a parallel text must have one line per sentence pair: ``counts`` ({file: lines}) must agree."""
    if len(set(counts.values())) > 1:
        sides = ", ".join(f"{path} has {_plural(count, 'line')}" for path, count in counts.items())
        raise PrepError(f"{what}: the sides differ in length ({sides}); a parallel text needs one line per sentence "
                        "pair on every side (a file cut off, or of another release?)")


def require_text(path: str, expected: str) -> None:
    """A ``PrepError`` naming ``path`` when no line of it has a token (an empty file, or blank lines only):
    an empty split otherwise crashes inside subword-nmt or binarises to nothing. ``expected``: what
    the split needs, for the message."""
    opener = gzip.open if path.endswith(".gz") else open
    lines = 0
    try:
        with opener(path, "rb") as f:
            for raw in f:
                # Decoded only to see white space as fairseq's tokenizer does; read_lines judges the encoding.
                if raw.decode("utf-8", errors="replace").strip():
                    return
                lines += 1
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise damaged_gzip(path, error) from None
    raise PrepError(f"{path}: no text ({_plural(lines, 'blank line') if lines else 'an empty file'}); {expected}")


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(CHUNK), b""))


def file_digest(path: str, algorithm: str = "sha256") -> str:
    digest = hashlib.new(algorithm)
    size = os.path.getsize(path)
    with open(path, "rb") as f, progress(total=size, desc=f"{algorithm} {os.path.basename(path)}", unit="B",
                                          unit_scale=True, disable=size < (64 << 20)) as bar:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


@contextlib.contextmanager
def exclusive(work_dir: str):
    """One preparation per work directory at a time."""
    os.makedirs(work_dir, exist_ok=True)
    with open(os.path.join(work_dir, ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PrepError(f"another preparation is running in {work_dir} (lock file {lock.name})") from None
        yield


# -------------------------------------------------------------- checksums ---
@dataclass
class Resource:
    """One file of a public release: ``name`` is its file name on disk (in
    ``--raw-dir`` and as downloaded), ``urls`` the official location first,
    then mirrors. ``members``: the file names (basenames) the dataset needs
    from it once extracted; a raw directory that already holds them all
    (anywhere below it) is used as it is.

    ``raw_names``: other names under which the file is found in ``--raw-dir``
    (its official file name, another tool's name for it). ``shared_raw_names``:
    official names that other releases' files have too (WMT's ``test.tgz``): a
    file of that name is this release only if its published checksum matches
    (so one is required); any other is left alone, and the log says so."""

    name: str
    urls: Sequence[str]
    members: Sequence[str] = ()
    sha256: Optional[str] = None
    md5: Optional[str] = None
    checksum_source: str = ""
    size: Optional[int] = None
    optional: bool = False
    raw_names: Sequence[str] = ()
    shared_raw_names: Sequence[str] = ()

    def __post_init__(self):
        if self.shared_raw_names and not self.published():
            raise ValueError(f"{self.name}: shared_raw_names {list(self.shared_raw_names)} need a published checksum "
                             "to tell this release from others")

    def published(self) -> Optional[Tuple[str, str]]:
        """(algorithm, value) of the published checksum (sha256 preferred), or None."""
        if self.sha256:
            return "sha256", self.sha256
        return ("md5", self.md5) if self.md5 else None

    def accepted_names(self) -> List[str]:
        return list(dict.fromkeys([self.name, *self.raw_names, *self.shared_raw_names]))


def _records(work_dir: str) -> Dict[str, str]:
    path = os.path.join(work_dir, RECORD_NAME)
    records = {}
    if os.path.exists(path):
        for line in read_lines(path):
            if line.strip():
                digest, name = line.split(None, 1)
                records[name.strip()] = digest
    return records


def _record(work_dir: str, name: str, digest: str) -> None:
    records = _records(work_dir)
    records[name] = digest
    write_lines(os.path.join(work_dir, RECORD_NAME), [f"{d}  {n}" for n, d in sorted(records.items())])


def verify(path: str, resource: Resource, work_dir: str) -> None:
    """Check ``path`` against the published checksum, or against the hash a
    previous run recorded; raise ``PrepError`` naming the file on a mismatch."""
    size = os.path.getsize(path)
    if resource.size is not None and size != resource.size:
        raise PrepError(f"{path}: size {size} bytes, the release has {resource.size}; delete it and rerun")
    sha256 = file_digest(path, "sha256")
    for algorithm, expected in (("sha256", resource.sha256), ("md5", resource.md5)):
        if expected:
            actual = sha256 if algorithm == "sha256" else file_digest(path, "md5")
            if actual.lower() != expected.lower():
                raise PrepError(
                    f"checksum mismatch for {path}: {algorithm} is {actual}, the published value is {expected}"
                    f" ({resource.checksum_source or 'recorded in data_prep'}); delete the file and rerun"
                )
            log(f"{resource.name}: {algorithm} verified ({resource.checksum_source})")
            _record(work_dir, resource.name, sha256)
            return
    recorded = _records(work_dir).get(resource.name)
    if recorded is None:
        log(f"note: no published checksum is known for {resource.name}; its sha256 is {sha256} "
            f"(recorded in {os.path.join(work_dir, RECORD_NAME)}; later runs must match it)")
        _record(work_dir, resource.name, sha256)
    elif recorded != sha256:
        raise PrepError(
            f"checksum mismatch for {path}: sha256 is {sha256}, an earlier run recorded {recorded} in "
            f"{os.path.join(work_dir, RECORD_NAME)}; delete the file (or that line) and rerun"
        )


# --------------------------------------------------------------- download ---
def download(url: str, dest: str, retries: int = 3, timeout: float = 60.0, backoff: float = 2.0) -> None:
    """Download ``url`` to ``dest``, atomically. A ``dest + '.partial'`` left by
    an interrupted run is continued with an HTTP range request when the
    server supports it. Retries with exponential back-off, then raises."""
    partial = dest + ".partial"
    last_error = None
    for attempt in range(1, retries + 1):
        try:
            offset = os.path.getsize(partial) if os.path.exists(partial) else 0
            request = urllib.request.Request(url, headers={"User-Agent": "fairseq_plugins-data_prep"})
            if offset:
                request.add_header("Range", f"bytes={offset}-")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                resumed = offset and response.status == 206
                if not resumed:
                    offset = 0
                length = response.headers.get("Content-Length")
                total = offset + int(length) if length is not None else None
                with open(partial, "ab" if resumed else "wb") as f, progress(
                    total=total, initial=offset, desc=os.path.basename(dest), unit="B", unit_scale=True
                ) as bar:
                    for chunk in iter(lambda: response.read(CHUNK), b""):
                        f.write(chunk)
                        bar.update(len(chunk))
                if total is not None and os.path.getsize(partial) != total:
                    raise OSError(f"incomplete download: {os.path.getsize(partial)} of {total} bytes")
            os.replace(partial, dest)
            return
        except (urllib.error.URLError, OSError) as error:
            last_error = error
            if isinstance(error, urllib.error.HTTPError) and error.code == 416:
                os.remove(partial)  # stale partial file larger than the remote one
            if isinstance(error, urllib.error.HTTPError) and error.code in (403, 404, 410):
                break  # no point in retrying a missing file
            if attempt < retries:
                wait = backoff ** attempt
                log(f"{url}: {error}; retry {attempt}/{retries - 1} in {wait:.0f} s")
                time.sleep(wait)
    raise OSError(f"{url}: {last_error}")


def _files_named(root: Optional[str], name: str) -> Iterator[str]:
    if root is None:  # (no --raw-dir)
        return
    if not os.path.isdir(root):  # never skipped (the release would be downloaded instead); check_arguments says it first
        raise PrepError(f"{root}: no such folder (looking for {name} in it)")
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        if name in files:
            yield os.path.join(directory, name)


def find_file(root: Optional[str], name: str) -> Optional[str]:
    """The first file called ``name`` below ``root`` (sorted walk), or None."""
    return next(_files_named(root, name), None)


def find_files(root: Optional[str], name: str) -> List[str]:
    """Every file called ``name`` below ``root`` (sorted walk)."""
    return list(_files_named(root, name))


def find_release(resource: Resource, raw_dir: Optional[str]) -> Tuple[Optional[str], List[str]]:
    """The release file in ``raw_dir`` under one of its accepted names (or None), and notes on
    the files of a shared name found there that are not this release (their checksum differs)."""
    for name in [resource.name, *resource.raw_names]:
        path = find_file(raw_dir, name)
        if path is not None:
            return path, []
    others = []
    for name in resource.shared_raw_names:
        algorithm, expected = resource.published()
        for path in find_files(raw_dir, name):
            actual = file_digest(path, algorithm)
            if actual.lower() == expected.lower():
                return path, others
            others.append(f"{path} is not this release's {name} ({algorithm} {actual}, not the published {expected}: "
                          "another release's, or a damaged copy)")
    return None, others


def extract(archive: str, dest_dir: str) -> str:
    """Extract a .tgz/.tar.gz/.tar/.zip/.gz into ``dest_dir`` (atomically: into a
    temporary folder renamed when complete). Returns ``dest_dir``."""
    if os.path.isdir(dest_dir):
        return dest_dir
    if not archive.endswith((".tgz", ".tar.gz", ".tar", ".zip", ".gz")):
        raise PrepError(f"{archive}: unknown archive type")
    log(f"extracting {os.path.basename(archive)}")
    try:
        _extract(archive, dest_dir)
    except (EOFError, gzip.BadGzipFile, zlib.error, tarfile.TarError, zipfile.BadZipFile) as error:
        raise damaged_gzip(archive, error) from None
    return dest_dir


def _extract(archive: str, dest_dir: str) -> None:
    with atomic_directory(dest_dir) as partial:
        if archive.endswith((".tgz", ".tar.gz", ".tar")):
            with tarfile.open(archive) as tar:
                tar.extractall(partial, filter="data")
        elif archive.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(partial)
        else:
            with gzip.open(archive, "rb") as src, open(os.path.join(partial, os.path.basename(archive)[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)


def fetch(resource: Resource, raw_dir: Optional[str], work_dir: str, download_ok: bool = True,
          retries: int = 3, mirrors: Sequence[str] = (), skipped: Optional[List[str]] = None) -> Dict[str, str]:
    """``_fetch``; the files of a required resource are inputs of the step that runs it, keyed by their content
    (``Steps.run(track_inputs=True)``). An optional one's are not: a test set found by a later run is added
    without redoing the steps before it (Multi30k's extra test sets), so a changed copy of one is not noticed."""
    found = _fetch(resource, raw_dir, work_dir, download_ok, retries, mirrors, skipped)
    if _inputs_read is not None and not resource.optional:
        _inputs_read.update(os.path.abspath(path) for path in found.values() if path)
    return found


def _fetch(resource: Resource, raw_dir: Optional[str], work_dir: str, download_ok: bool = True,
           retries: int = 3, mirrors: Sequence[str] = (), skipped: Optional[List[str]] = None) -> Dict[str, str]:
    """Paths of ``resource.members`` (or of the file itself when it has no
    members), from ``raw_dir`` when they are there, else from the release file
    (found in ``raw_dir`` or downloaded into ``work_dir/downloads``), verified
    and extracted. ``mirrors``: extra base URLs tried first (the file name is
    appended). Returns {} for a missing optional resource, without a warning (the
    caller says in one line what it goes on without); its name is then appended
    to ``skipped`` (when given) if a download was tried and failed (a network
    problem a later run may not have), not when downloading is off."""
    wanted = list(resource.members) or [resource.name]
    found = {name: find_file(raw_dir, name) for name in wanted}
    if resource.members and all(found.values()):
        published = resource.published()
        archive, others = find_release(resource, raw_dir) if published else (None, [])
        for note in others:
            log(f"{resource.name}: not used: {note}")
        if archive is not None:  # the release archive is there too: it must still match its published checksum
            verify(archive, resource, work_dir)
        if published:
            log(f"{resource.name}: using {', '.join(wanted)} from {raw_dir}: files found already extracted cannot be "
                f"verified (the published {published[0]} {published[1]} is of the archive{'' if archive else ', not there'}); "
                f"put {' or '.join(resource.accepted_names())} in --raw-dir instead to have it checked")
        else:
            log(f"{resource.name}: using {', '.join(wanted)} from {raw_dir} (files, not the release archive: "
                "no checksum to verify)")
        return found
    archive, others = find_release(resource, raw_dir)
    for note in others:
        log(f"{resource.name}: not used: {note}")
    if archive is None:
        archive = os.path.join(work_dir, "downloads", resource.name)
        if not os.path.exists(archive):
            if not download_ok:
                names = ", ".join(resource.accepted_names())
                if resource.optional:
                    return {}  # (the caller says in one line which optional files it goes on without)
                location = f" ({resource.urls[0]})" if resource.urls else ""
                files = f", or its files {', '.join(wanted)}" if resource.members else ""
                raise PrepError(f"{resource.name}{location} is not in --raw-dir {raw_dir} and downloading is off; "
                                f"accepted names: {names}{files}" + "".join(f"; {note}" for note in others))
            os.makedirs(os.path.dirname(archive), exist_ok=True)
            urls = [m.rstrip("/") + "/" + resource.name for m in mirrors] + list(resource.urls)
            errors = []
            for url in urls:
                log(f"downloading {url}")
                try:
                    download(url, archive, retries=retries)
                    break
                except OSError as error:
                    errors.append(str(error))
            else:
                if resource.optional:
                    log(f"optional {resource.name} could not be downloaded ({'; '.join(errors)}); skipped")
                    if skipped is not None:
                        skipped.append(resource.name)
                    return {}
                raise PrepError(f"could not download {resource.name} from any location:\n  " + "\n  ".join(errors))
    verify(archive, resource, work_dir)
    if not resource.members:
        return {resource.name: archive}
    extracted = extract(archive, os.path.join(work_dir, "extracted", resource.name))
    found = {name: find_file(extracted, name) for name in wanted}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise PrepError(f"{archive} does not contain {', '.join(missing)}")
    return found


# ------------------------------------------------------------------ steps ---
def input_digests(record: Dict[str, list], paths: Sequence[str]) -> Dict[str, Optional[str]]:
    """{path: sha256 (None: missing)} of ``paths``; ``record`` ({path: [size, mtime_ns, sha256]}) caches the
    digests and is updated: a file whose size and modification time are unchanged is not read again."""
    digests = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            digests[path] = None
            continue
        cached = record.get(path)
        if not cached or cached[:2] != [info.st_size, info.st_mtime_ns]:
            record[path] = cached = [info.st_size, info.st_mtime_ns, file_digest(path)]
        digests[path] = cached[2]
    return digests


@dataclass
class Steps:
    """A resumable sequence of steps sharing ``work_dir/.stamps``. ``names``: every step the preparation has,
    in order (``--stop-after`` must name one: checked before any step runs)."""

    work_dir: str
    names: Sequence[str]
    stop_after: Optional[str] = None
    done: List[str] = field(default_factory=list)
    _chain: str = ""

    # An action returning this wrote complete outputs but must run again next time
    # (e.g. an optional file it could not get now): no stamp is written.
    NO_STAMP = "no stamp"

    def __post_init__(self):
        if self.stop_after is not None and self.stop_after not in self.names:
            raise PrepError(f"--stop-after {self.stop_after}: not a step of this preparation (its steps: "
                            f"{', '.join(self.names)})")

    @property
    def total(self) -> int:
        return len(self.names)

    def run(self, name: str, outputs: Sequence[str], action: Callable[[], object], track_inputs: bool = False,
            **params) -> bool:
        """Run ``action`` unless a stamp with the same fingerprint exists and all
        ``outputs`` exist. Returns True when the step ran.

        ``track_inputs``: the files the step reads through ``fetch`` (the release files, in --raw-dir or
        downloaded) are part of its fingerprint by their content (sha256, recomputed only for a file whose
        size or modification time changed): a changed input file is prepared again, an unchanged one is not."""
        global _inputs_read
        previous = self._chain
        if track_inputs:
            record = self._inputs_record(name)
            fingerprint = self._fingerprint(previous, name, dict(params, inputs=input_digests(record, list(record))))
        else:
            fingerprint = self._fingerprint(previous, name, params)
        self.done.append(name)
        stamped = None
        if track_inputs:
            def stamped():  # after the action: the digests of the files it read now
                read = sorted(_inputs_read or ())
                digests = input_digests(record, read)
                write_json(self._inputs_path(name), {path: record[path] for path in read}, sort_keys=True)
                return self._fingerprint(previous, name, dict(params, inputs=digests))

            _inputs_read = set()
        try:
            ran, self._chain = self._run_stamped(name, name, len(self.done), outputs, action, fingerprint, stamped)
        finally:
            if track_inputs:
                _inputs_read = None
        self._stop_if_asked(name)
        return ran

    def _inputs_path(self, name: str) -> str:
        return os.path.join(self.work_dir, ".stamps", f"{name}.inputs.json")

    def _inputs_record(self, name: str) -> Dict[str, list]:
        """{path: [size, mtime_ns, sha256]} of the files the step read last time (none before a first run)."""
        try:
            with open(self._inputs_path(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def run_each(self, name: str, parts: Sequence[str], outputs: Callable[[str], Sequence[str]],
                 action: Callable[[str], object], **params) -> List[str]:
        """One step made of independent parts (e.g. one per split), each run as
        ``action(part)`` with its own stamp (``<name>.<part>.done``): a run killed
        inside the step redoes only the part it was in. The step's place in the
        chain does not depend on its parts, so a part added later (a test set
        found by a later run) runs alone and the later steps keep their stamps.
        Returns the parts that ran."""
        previous = self._chain
        self.done.append(name)
        index = len(self.done)
        ran = [part for part in parts
               if self._run_stamped(f"{name}.{part}", f"{name} {part}", index, outputs(part), lambda part=part: action(part),
                                    self._fingerprint(previous, name, dict(params, part=part)))[0]]
        self._chain = self._fingerprint(previous, name, params)
        self._stop_if_asked(name)
        return ran

    @staticmethod
    def _fingerprint(previous: str, name: str, params: dict) -> str:
        fingerprint = json.dumps({"previous": previous, "step": name, "params": params}, sort_keys=True, default=str)
        return hashlib.sha256(fingerprint.encode()).hexdigest()

    def _run_stamped(self, stamp_name: str, label: str, index: int, outputs: Sequence[str], action: Callable[[], object],
                     fingerprint: str, stamped: Optional[Callable[[], str]] = None) -> Tuple[bool, str]:
        """(whether the step ran, its fingerprint); ``stamped()``: the fingerprint to stamp once it has run,
        when that depends on what it did (default: ``fingerprint``)."""
        stamp = os.path.join(self.work_dir, ".stamps", f"{stamp_name}.done")
        current = os.path.exists(stamp) and open(stamp).read().strip() == fingerprint
        if current and all(os.path.exists(p) for p in outputs):
            log(f"[{index}/{self.total}] {label}: up to date")
            return False, fingerprint
        log(f"[{index}/{self.total}] {label} ...")
        start = time.time()
        with contextlib.suppress(FileNotFoundError):
            os.remove(stamp)
        result = action()
        missing = [p for p in outputs if not os.path.exists(p)]
        if missing:
            raise RuntimeError(f"step {label} did not write {missing}")
        if stamped is not None:
            fingerprint = stamped()
        if result is Steps.NO_STAMP:
            log(f"[{index}/{self.total}] {label}: done in {time.time() - start:.1f} s, not stamped "
                "(it runs again next time)")
        else:
            with atomic_output(stamp) as f:
                f.write(fingerprint + "\n")
            log(f"[{index}/{self.total}] {label}: done in {time.time() - start:.1f} s")
        return True, fingerprint

    def _stop_if_asked(self, name: str) -> None:
        if self.stop_after == name:
            log(f"stopping after {name} (--stop-after)")
            raise SystemExit(0)


# --------------------------------------------------------------- binarise ---
def binarize(destdir: str, trainpref: str, validpref: Optional[str], testpref: Optional[str], source_lang: Optional[str] = None,
             target_lang: Optional[str] = None, joined: bool = True, workers: int = 1, extra: Sequence[str] = (),
             complete: Optional[Callable[[str], None]] = None) -> None:
    """fairseq-preprocess (in this process) into ``destdir``, atomically.
    Without ``target_lang``: ``--only-source`` (language modelling).
    ``complete(folder)`` adds the destination's other files (settings, references)
    to the folder before it is renamed into place, so that a killed run never
    leaves a destination without them."""
    options = require("fairseq.options", "fairseq-fixed", "binarisation (fairseq-preprocess)")
    preprocess = require("fairseq_cli.preprocess", "fairseq-fixed", "binarisation (fairseq-preprocess)")

    with atomic_directory(destdir) as partial:
        argv = ["--trainpref", trainpref, "--destdir", partial, "--workers", str(workers), *extra]
        if validpref:
            argv += ["--validpref", validpref]
        if testpref:
            argv += ["--testpref", testpref]
        if target_lang:
            argv += ["--source-lang", source_lang, "--target-lang", target_lang] + (["--joined-dictionary"] if joined else [])
        else:
            argv += ["--only-source"]
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(partial, "preprocess.log"))  # holds the temporary path; the rest is deterministic
        if complete is not None:
            complete(partial)


# -------------------------------------------------------------------- CLI ---
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the option help, the module docstring as it is written."""


def argument_parser(name: str, description: str, default_dest: str, steps: Sequence[str],
                    downloads: bool = True) -> argparse.ArgumentParser:
    """The options every preparation script shares; ``steps``: the names of its steps (``--stop-after``);
    ``downloads``: whether it fetches a release (the download options), or reads only files it is given."""
    # no abbreviations: check_arguments reads the options as typed (an option of the BPE mode not chosen)
    parser = argparse.ArgumentParser(prog=f"python -m data_prep.{name}", description=description, formatter_class=_Formatter,
                                     allow_abbrev=False)
    if downloads:
        parser.add_argument("--raw-dir", help="folder with the release files already on disk (archives, or the files "
                            "inside them, anywhere below it); what is missing is downloaded unless --no-download")
    else:
        parser.set_defaults(raw_dir=None, no_download=True, mirror=[], retries=1)
    parser.add_argument("--work-dir", default=f"work_dirs/data/{name}",
                        help=("downloads, " if downloads else "") + "intermediate text files and step stamps")
    parser.add_argument("--dest", default=default_dest, help="fairseq binaries (fairseq-preprocess --destdir)")
    if downloads:
        parser.add_argument("--no-download", action="store_true", help="fail instead of downloading a missing file")
        parser.add_argument("--mirror", action="append", default=[],
                            help="extra base URL tried before the built-in locations (repeatable)")
        parser.add_argument("--retries", type=int, default=3, help="download attempts per location")
    parser.add_argument("--workers", type=int, default=max(1, min(8, os.cpu_count() or 1)),
                        help="processes for tokenisation, BPE and binarisation")
    parser.add_argument("--stop-after", metavar="STEP", choices=steps,
                        help=f"stop once this step is done (rerun to continue): one of {', '.join(steps)}")
    add_invalid_utf8_argument(parser)
    return parser


def fetch_all(resources: Sequence[Resource], args, skipped: Optional[List[str]] = None) -> Dict[str, str]:
    """``fetch`` every resource with the shared options; one dict of basename -> path
    (a missing optional resource contributes nothing; see ``fetch`` for ``skipped``)."""
    paths: Dict[str, str] = {}
    for resource in resources:
        paths.update(fetch(resource, args.raw_dir, args.work_dir, download_ok=not args.no_download,
                           retries=args.retries, mirrors=args.mirror, skipped=skipped))
    return paths


# option -> the least value it takes (those a preparation has)
MINIMUM = {"workers": 1, "retries": 1, "bpe_merges": 1, "spm_vocab_size": 1}
FRACTIONS = ("valid_fraction", "test_fraction")
# option -> the --bpe that reads it (translation.add_bpe_arguments); typed with the other one, it would be ignored
BPE_OPTIONS = {"bpe_merges": "subword-nmt", "spm_vocab_size": "sentencepiece"}
# the options of downloading a missing release file (argument_parser's, downloads=True): --no-download turns them off
DOWNLOADING = ("mirror", "retries")
# an option that reads a file of the user's instead of the release (a preparation's own, e.g. enwik8's): typed, every
# option of getting the release would be ignored
INSTEAD_OF_RELEASE = ("input_file",)
RELEASE_OPTIONS = ("raw_dir", "no_download", *DOWNLOADING)
# what download can fetch from: http(s) (range requests to resume, status codes), file:// (a local copy of a mirror)
MIRROR_SCHEMES = ("http", "https", "file")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_arguments(args, typed: Sequence[str] = ()) -> None:
    """Values no step could use, and options that would be ignored, refused before any work (a ``PrepError``
    naming the option). ``typed``: the command line as typed (its defaults never make an option ignored)."""
    given = {token.split("=", 1)[0] for token in typed if token.startswith("--")}
    for dest, mode in BPE_OPTIONS.items():
        if getattr(args, "bpe", mode) != mode and _flag(dest) in given:
            raise PrepError(f"{_flag(dest)}: an option of --bpe {mode}, not of --bpe {args.bpe} (it would be ignored)")
    for local in INSTEAD_OF_RELEASE:
        if _flag(local) in given:
            for dest in RELEASE_OPTIONS:
                if _flag(dest) in given:
                    raise PrepError(f"{_flag(dest)}: an option of getting the release, which {_flag(local)} replaces with "
                                    "a file of yours (it would be ignored)")
    if "--no-download" in given:
        for dest in DOWNLOADING:
            if _flag(dest) in given:
                raise PrepError(f"{_flag(dest)}: an option of downloading, which --no-download turns off "
                                "(it would be ignored)")
    raw_dir = getattr(args, "raw_dir", None)
    if raw_dir is not None and not os.path.isdir(raw_dir):  # (not skipped: the release would be downloaded instead)
        raise PrepError(f"--raw-dir {raw_dir}: {'not a folder' if os.path.exists(raw_dir) else 'no such folder'} "
                        "(expected the folder with the release files on disk; leave it out to download them)")
    for mirror in getattr(args, "mirror", None) or ():
        url = urllib.parse.urlsplit(mirror)
        if url.scheme.lower() not in MIRROR_SCHEMES or (url.scheme.lower() != "file" and not url.netloc):
            raise PrepError(f"--mirror {mirror}: expected a base URL starting with http://, https:// or file://")
    for dest, least in MINIMUM.items():
        value = getattr(args, dest, None)
        if value is not None and value < least:
            raise PrepError(f"{_flag(dest)}: expected at least {least}, got {value}")
    fractions = [getattr(args, dest) for dest in FRACTIONS if getattr(args, dest, None) is not None]
    for dest in FRACTIONS:
        value = getattr(args, dest, None)
        if value is not None and not 0 < value < 1:
            raise PrepError(f"{_flag(dest)}: expected a fraction between 0 and 1 (both excluded), got {value}")
    if sum(fractions) >= 1:
        raise PrepError(f"{' + '.join(_flag(d) for d in FRACTIONS)}: {' + '.join(map(str, fractions))} leaves nothing "
                        "to train on; expected a sum below 1")


def require_writable_folder(path: str, option: str) -> None:
    """Create the folder ``path`` (and its parents) now and check that a file can be written in it, so that
    a destination that cannot be written fails before the work, not at its last step. ``option``: the option
    and its value, for the message."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise PrepError(f"{option}: cannot create or write the folder {path} ({error.strerror}"
                        f"{': ' + str(error.filename) if error.filename else ''})") from None


def main_guard(prepare: Callable[[argparse.Namespace], str], parser: argparse.ArgumentParser,
               argv: Optional[Sequence[str]] = None) -> str:
    """Parse, check the options and the folders, lock the work directory, run; a ``PrepError`` becomes a
    one-line error and exit status 2, and so does a module that is not installed (also one that an imported
    package needs)."""
    args = parser.parse_args(argv)
    configure_logging()
    try:
        check_arguments(args, sys.argv[1:] if argv is None else list(argv))
        if os.path.exists(args.dest) and not os.path.isdir(args.dest):
            raise PrepError(f"--dest {args.dest}: a file is in the way (expected a folder, or nothing)")
        # (the destination is written beside itself and renamed into place: its parent is what must be writable)
        require_writable_folder(os.path.dirname(os.path.abspath(args.dest)), f"--dest {args.dest}")
        require_writable_folder(args.work_dir, f"--work-dir {args.work_dir}")
        with exclusive(args.work_dir), invalid_utf8_policy(args.invalid_utf8):
            dest = prepare(args)
    except PrepError as error:
        fail(error)
    except ModuleNotFoundError as error:
        fail_for_missing_module(error, parser.prog)
    log(f"ready: {dest}")
    return dest
