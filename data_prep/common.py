"""Shared machinery of the data preparation scripts.

* ``Resource`` / ``fetch``: find a release file in ``--raw-dir`` or download it
  (official location first, then mirrors, each with retries; interrupted
  downloads resume with HTTP range requests), then verify it.
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
  was in (whose outputs were never renamed into place), a changed parameter
  redoes that step and every step after it.
* ``progress``: tqdm progress bars on stderr.
"""
import argparse
import contextlib
import fcntl
import gzip
import hashlib
import importlib
import json
import os
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

from fairseq_plugins.files import atomic_output  # noqa: F401  (re-exported: data_prep scripts use it from here)

CHUNK = 1 << 20
RECORD_NAME = "SHA256SUMS.local"


class PrepError(RuntimeError):
    """A problem the user must fix (missing file or tool, failed checksum)."""


def log(message: str) -> None:
    print(f"[data_prep] {message}", file=sys.stderr, flush=True)


def progress(iterable=None, total=None, desc: str = "", unit: str = "it", **kwargs):
    """A tqdm bar on stderr (refreshed every 30 s when stderr is not a terminal)."""
    from tqdm import tqdm

    interval = 0.5 if sys.stderr.isatty() else 30.0
    kwargs.setdefault("disable", total is not None and total < 20000)  # no bars for small files
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, mininterval=interval,
                dynamic_ncols=True, leave=False, **kwargs)


def require(module: str, package: str, purpose: str):
    """Import ``module`` or fail with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise PrepError(
            f"{purpose} needs the Python package '{package}' (pinned in requirements.txt): "
            f"pip install -c constraints.txt -r requirements.txt  [{error}]"
        ) from None


# ------------------------------------------------------------------ files ---
def write_lines(path: str, lines: Iterable[str]) -> int:
    """Write one line per item (atomically); returns the number of lines."""
    count = 0
    with atomic_output(path) as f:
        for line in lines:
            f.write(line + "\n")
            count += 1
    return count


def read_lines(path: str) -> Iterator[str]:
    """Lines without their end-of-line (only '\\n' splits, as in Moses' scripts); .gz files are decompressed."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="\n", errors="replace") as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


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
    """One file of a public release: ``name`` is its file name on disk,
    ``urls`` the official location first, then mirrors. ``members``: the file
    names (basenames) the dataset needs from it once extracted; a raw directory
    that already holds them all (anywhere below it) is used as it is."""

    name: str
    urls: Sequence[str]
    members: Sequence[str] = ()
    sha256: Optional[str] = None
    md5: Optional[str] = None
    checksum_source: str = ""
    size: Optional[int] = None
    optional: bool = False


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


def find_file(root: Optional[str], name: str) -> Optional[str]:
    """The first file called ``name`` below ``root`` (sorted walk), or None."""
    if not root or not os.path.isdir(root):
        return None
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        if name in files:
            return os.path.join(directory, name)
    return None


def extract(archive: str, dest_dir: str) -> str:
    """Extract a .tgz/.tar.gz/.tar/.zip/.gz into ``dest_dir`` (atomically: into a
    temporary folder renamed when complete). Returns ``dest_dir``."""
    if os.path.isdir(dest_dir):
        return dest_dir
    partial = dest_dir + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    log(f"extracting {os.path.basename(archive)}")
    if archive.endswith((".tgz", ".tar.gz", ".tar")):
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
    elif archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(partial)
    elif archive.endswith(".gz"):
        with gzip.open(archive, "rb") as src, open(os.path.join(partial, os.path.basename(archive)[:-3]), "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
    else:
        raise PrepError(f"{archive}: unknown archive type")
    os.replace(partial, dest_dir)
    return dest_dir


def fetch(resource: Resource, raw_dir: Optional[str], work_dir: str, download_ok: bool = True,
          retries: int = 3, mirrors: Sequence[str] = (), skipped: Optional[List[str]] = None) -> Dict[str, str]:
    """Paths of ``resource.members`` (or of the file itself when it has no
    members), from ``raw_dir`` when they are there, else from the release file
    (found in ``raw_dir`` or downloaded into ``work_dir/downloads``), verified
    and extracted. ``mirrors``: extra base URLs tried first (the file name is
    appended). Returns {} for a missing optional resource; its name is then
    appended to ``skipped`` (when given) if a download was tried and failed
    (a network problem a later run may not have), not when downloading is off."""
    wanted = list(resource.members) or [resource.name]
    found = {name: find_file(raw_dir, name) for name in wanted}
    if resource.members and all(found.values()):
        published = resource.sha256 or resource.md5
        archive = find_file(raw_dir, resource.name) if published else None
        if archive is not None:  # the release archive is there too: it must still match its published checksum
            verify(archive, resource, work_dir)
        if published:
            algorithm = "sha256" if resource.sha256 else "md5"
            log(f"{resource.name}: using {', '.join(wanted)} from {raw_dir}: files found already extracted cannot be "
                f"verified (the published {algorithm} {published} is of the archive{'' if archive else ', not there'}); "
                f"put {resource.name} in --raw-dir instead to have it checked")
        else:
            log(f"{resource.name}: using {', '.join(wanted)} from {raw_dir} (files, not the release archive: "
                "no checksum to verify)")
        return found
    archive = find_file(raw_dir, resource.name)
    if archive is None:
        archive = os.path.join(work_dir, "downloads", resource.name)
        if not os.path.exists(archive):
            if not download_ok:
                if resource.optional:
                    log(f"warning: optional {resource.name} is not in {raw_dir}; skipped")
                    return {}
                raise PrepError(f"{resource.name} (or its files {', '.join(wanted)}) is not in --raw-dir {raw_dir} "
                                "and downloading is off")
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
                    log(f"warning: optional {resource.name} could not be downloaded; skipped ({'; '.join(errors)})")
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
@dataclass
class Steps:
    """A resumable sequence of steps sharing ``work_dir/.stamps``."""

    work_dir: str
    total: int
    stop_after: Optional[str] = None
    done: List[str] = field(default_factory=list)
    _chain: str = ""

    # An action returning this wrote complete outputs but must run again next time
    # (e.g. an optional file it could not get now): no stamp is written.
    NO_STAMP = "no stamp"

    def run(self, name: str, outputs: Sequence[str], action: Callable[[], object], **params) -> bool:
        """Run ``action`` unless a stamp with the same fingerprint exists and all
        ``outputs`` exist. Returns True when the step ran."""
        fingerprint = json.dumps({"previous": self._chain, "step": name, "params": params}, sort_keys=True, default=str)
        self._chain = hashlib.sha256(fingerprint.encode()).hexdigest()
        index = len(self.done) + 1
        stamp = os.path.join(self.work_dir, ".stamps", f"{name}.done")
        self.done.append(name)
        current = os.path.exists(stamp) and open(stamp).read().strip() == self._chain
        if current and all(os.path.exists(p) for p in outputs):
            log(f"[{index}/{self.total}] {name}: up to date")
            ran = False
        else:
            log(f"[{index}/{self.total}] {name} ...")
            start = time.time()
            with contextlib.suppress(FileNotFoundError):
                os.remove(stamp)
            result = action()
            missing = [p for p in outputs if not os.path.exists(p)]
            if missing:
                raise RuntimeError(f"step {name} did not write {missing}")
            if result is Steps.NO_STAMP:
                log(f"[{index}/{self.total}] {name}: done in {time.time() - start:.1f} s, not stamped "
                    "(it runs again next time)")
            else:
                with atomic_output(stamp) as f:
                    f.write(self._chain + "\n")
                log(f"[{index}/{self.total}] {name}: done in {time.time() - start:.1f} s")
            ran = True
        if self.stop_after == name:
            log(f"stopping after {name} (--stop-after)")
            raise SystemExit(0)
        return ran


# --------------------------------------------------------------- binarise ---
def binarize(destdir: str, trainpref: str, validpref: Optional[str], testpref: Optional[str], source_lang: Optional[str] = None,
             target_lang: Optional[str] = None, joined: bool = True, workers: int = 1, extra: Sequence[str] = ()) -> None:
    """fairseq-preprocess (in this process) into ``destdir``, atomically.
    Without ``target_lang``: ``--only-source`` (language modelling)."""
    from fairseq import options
    from fairseq_cli import preprocess

    partial = destdir + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
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
    if os.path.isdir(destdir):
        shutil.rmtree(destdir)
    os.replace(partial, destdir)


# -------------------------------------------------------------------- CLI ---
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the option help, the module docstring as it is written."""


def argument_parser(name: str, description: str, default_dest: str) -> argparse.ArgumentParser:
    """The options every preparation script shares."""
    parser = argparse.ArgumentParser(prog=f"python -m data_prep.{name}", description=description, formatter_class=_Formatter)
    parser.add_argument("--raw-dir", help="folder with the release files already on disk (archives, or the files "
                        "inside them, anywhere below it); what is missing is downloaded unless --no-download")
    parser.add_argument("--work-dir", default=f"work_dirs/data/{name}",
                        help="downloads, intermediate text files and step stamps")
    parser.add_argument("--dest", default=default_dest, help="fairseq binaries (fairseq-preprocess --destdir)")
    parser.add_argument("--no-download", action="store_true", help="fail instead of downloading a missing file")
    parser.add_argument("--mirror", action="append", default=[],
                        help="extra base URL tried before the built-in locations (repeatable)")
    parser.add_argument("--retries", type=int, default=3, help="download attempts per location")
    parser.add_argument("--workers", type=int, default=max(1, min(8, os.cpu_count() or 1)),
                        help="processes for tokenisation, BPE and binarisation")
    parser.add_argument("--stop-after", metavar="STEP", help="stop once this step is done (rerun to continue)")
    return parser


def fetch_all(resources: Sequence[Resource], args, skipped: Optional[List[str]] = None) -> Dict[str, str]:
    """``fetch`` every resource with the shared options; one dict of basename -> path
    (a missing optional resource contributes nothing; see ``fetch`` for ``skipped``)."""
    paths: Dict[str, str] = {}
    for resource in resources:
        paths.update(fetch(resource, args.raw_dir, args.work_dir, download_ok=not args.no_download,
                           retries=args.retries, mirrors=args.mirror, skipped=skipped))
    return paths


def main_guard(prepare: Callable[[argparse.Namespace], str], parser: argparse.ArgumentParser,
               argv: Optional[Sequence[str]] = None) -> str:
    """Parse, lock the work directory, run; a ``PrepError`` becomes a one-line error and exit status 2."""
    args = parser.parse_args(argv)
    try:
        with exclusive(args.work_dir):
            dest = prepare(args)
    except PrepError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    log(f"ready: {dest}")
    return dest
