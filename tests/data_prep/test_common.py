"""data_prep.common: downloads (retries, mirrors, resumed partial files),
checksums (published, recorded, mismatches naming the file), atomic outputs
and resumable steps. Files are served by a local HTTP server the test starts."""
import functools
import gzip
import hashlib
import http.server
import os
import re
import threading

import pytest

from data_prep import common
from data_prep.common import PrepError, Resource, Steps, atomic_output, fetch, verify

PAYLOAD = b"release bytes\n" * 1000


class FlakyHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder; /flaky/* fails the first two requests; honours Range."""

    failures = {}
    ranges = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/flaky/"):
            count = FlakyHandler.failures.get(self.path, 0)
            FlakyHandler.failures[self.path] = count + 1
            if count < 2:
                self.send_error(503)
                return
            self.path = self.path[len("/flaky"):]
        byte_range = self.headers.get("Range")
        if byte_range:
            FlakyHandler.ranges.append(byte_range)
            path = self.translate_path(self.path)
            data = open(path, "rb").read()
            start = int(byte_range.split("=")[1].rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            self.wfile.write(data[start:])
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "release.tgz").write_bytes(PAYLOAD)
    handler = functools.partial(FlakyHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    FlakyHandler.failures, FlakyHandler.ranges = {}, []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(common.time, "sleep", lambda seconds: None)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_download_retries_then_falls_back_to_a_mirror(server, tmp_path, capsys):
    dead = "http://127.0.0.1:9/release.tgz"  # nothing listens on port 9
    resource = Resource("release.tgz", urls=[dead, f"{server}/missing/release.tgz", f"{server}/flaky/release.tgz"],
                        sha256=sha256(PAYLOAD), checksum_source="test")
    paths = fetch(resource, raw_dir=None, work_dir=str(tmp_path / "work"), retries=3)
    assert open(paths["release.tgz"], "rb").read() == PAYLOAD
    assert FlakyHandler.failures["/flaky/release.tgz"] == 3  # two 503s, then success
    err = capsys.readouterr().err
    assert "retry 1/2" in err and "sha256 verified" in err


def test_a_file_url_mirror_is_downloaded_from(tmp_path):
    """file:// is one of the schemes --mirror takes (check_arguments): a local copy of a mirror is read as one."""
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "release.tgz").write_bytes(PAYLOAD)
    resource = Resource("release.tgz", urls=["http://127.0.0.1:9/release.tgz"], sha256=sha256(PAYLOAD), checksum_source="test")
    paths = fetch(resource, raw_dir=None, work_dir=str(tmp_path / "work"), retries=1,
                  mirrors=[(tmp_path / "mirror").as_uri() + "/"])
    assert open(paths["release.tgz"], "rb").read() == PAYLOAD


def test_all_locations_failing_is_an_error_naming_the_file(tmp_path):
    resource = Resource("release.tgz", urls=["http://127.0.0.1:9/release.tgz"])
    with pytest.raises(PrepError, match="could not download release.tgz"):
        fetch(resource, raw_dir=None, work_dir=str(tmp_path), retries=2)


def test_an_interrupted_download_resumes_with_a_range_request(server, tmp_path):
    dest = tmp_path / "release.tgz"
    (tmp_path / "release.tgz.partial").write_bytes(PAYLOAD[:5000])
    common.download(f"{server}/release.tgz", str(dest))
    assert dest.read_bytes() == PAYLOAD
    assert FlakyHandler.ranges == ["bytes=5000-"]
    assert not (tmp_path / "release.tgz.partial").exists()


def test_published_checksum_mismatch_names_the_file(server, tmp_path):
    resource = Resource("release.tgz", urls=[f"{server}/release.tgz"], md5="0" * 32, checksum_source="test table")
    with pytest.raises(PrepError, match=r"checksum mismatch for .*release.tgz: md5 is [0-9a-f]{32}, the published value is 0{32} \(test table\)"):
        fetch(resource, raw_dir=None, work_dir=str(tmp_path))


def test_unknown_checksum_is_printed_recorded_and_enforced_later(tmp_path, capsys):
    archive = tmp_path / "raw" / "release.tgz"
    archive.parent.mkdir()
    archive.write_bytes(PAYLOAD)
    resource = Resource("release.tgz", urls=[])
    verify(str(archive), resource, str(tmp_path / "work"))
    err = capsys.readouterr().err
    assert f"no published checksum is known for release.tgz; its sha256 is {sha256(PAYLOAD)}" in err
    assert (tmp_path / "work" / common.RECORD_NAME).read_text() == f"{sha256(PAYLOAD)}  release.tgz\n"
    verify(str(archive), resource, str(tmp_path / "work"))  # same file: fine
    archive.write_bytes(PAYLOAD + b"tampered")
    with pytest.raises(PrepError, match=r"checksum mismatch for .*release.tgz: sha256 is .* an earlier run recorded"):
        verify(str(archive), resource, str(tmp_path / "work"))


def test_raw_dir_archive_or_extracted_members(tmp_path):
    raw = tmp_path / "raw"
    (raw / "deep").mkdir(parents=True)
    with gzip.open(raw / "train.de.gz", "wb") as f:
        f.write(b"hallo\n")
    resource = Resource("train.de.gz", urls=[], members=["train.de"])
    paths = fetch(resource, str(raw), str(tmp_path / "work"), download_ok=False)
    assert open(paths["train.de"]).read() == "hallo\n"
    (raw / "deep" / "train.de").write_text("schon da\n")  # extracted members win over the archive
    paths = fetch(resource, str(raw), str(tmp_path / "work2"), download_ok=False)
    assert paths["train.de"] == str(raw / "deep" / "train.de")
    missing = Resource("other.tgz", urls=["http://127.0.0.1:9/other.tgz"], members=["x"])
    with pytest.raises(PrepError, match="other.tgz .* is not in --raw-dir .* downloading is off"):
        fetch(missing, str(raw), str(tmp_path / "work"), download_ok=False)
    optional = Resource("other.tgz", urls=[], members=["x"], optional=True)
    assert fetch(optional, str(raw), str(tmp_path / "work"), download_ok=False) == {}
    # a raw folder that is not there is an error, not a download (the CLI's check_arguments says so first)
    gone = re.escape(str(tmp_path / "gone"))
    with pytest.raises(PrepError, match=f"^{gone}: no such folder \\(looking for train.de in it\\)$"):
        fetch(resource, str(tmp_path / "gone"), str(tmp_path / "work3"))


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_output(str(target)) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert not target.exists() and not (tmp_path / "out.txt.partial").exists()
    with atomic_output(str(target)) as f:
        f.write("whole\n")
    assert target.read_text() == "whole\n"


def test_steps_skip_done_work_and_redo_what_a_changed_parameter_affects(tmp_path):
    calls = []

    def pipeline(merges):
        steps = Steps(str(tmp_path), ("a", "b", "c"))
        for name, params in (("a", {}), ("b", {"merges": merges}), ("c", {})):
            out = tmp_path / f"{name}.txt"
            steps.run(name, [str(out)], lambda name=name, out=out: (calls.append(name), out.write_text(name)), **params)

    pipeline(10)
    assert calls == ["a", "b", "c"]
    pipeline(10)
    assert calls == ["a", "b", "c"]  # second run: nothing
    (tmp_path / "c.txt").unlink()
    pipeline(10)
    assert calls[3:] == ["c"]  # a missing output is redone
    pipeline(20)
    assert calls[4:] == ["b", "c"]  # a changed parameter redoes its step and the later ones


def test_steps_with_a_stamp_per_part(tmp_path):
    """run_each: a part whose output is missing (killed inside it) or that is new (a test set found later)
    runs alone; the steps after it keep their stamps; a changed parameter redoes every part."""
    calls = []

    def pipeline(splits, option=1):
        steps = Steps(str(tmp_path), ("tokenize", "text"))

        def tokenize(split):
            calls.append(split)
            (tmp_path / f"tok.{split}").write_text(split)

        steps.run_each("tokenize", splits, lambda split: [str(tmp_path / f"tok.{split}")], tokenize, option=option)
        steps.run("text", [str(tmp_path / "text")], lambda: (calls.append("text"), (tmp_path / "text").write_text("t")))

    pipeline(["train", "valid"])
    assert calls == ["train", "valid", "text"]
    assert sorted(os.listdir(tmp_path / ".stamps")) == ["text.done", "tokenize.train.done", "tokenize.valid.done"]
    (tmp_path / "tok.valid").unlink()
    pipeline(["train", "valid"])
    assert calls[3:] == ["valid"]
    pipeline(["train", "valid", "test"])
    assert calls[4:] == ["test"]  # the new part only; "text" keeps its stamp (its place in the chain is unchanged)
    pipeline(["train", "valid", "test"], option=2)
    assert calls[5:] == ["train", "valid", "test", "text"]


def test_a_step_that_tracks_its_inputs_reruns_when_their_content_changes(tmp_path):
    """The raw step's release files are keyed by content: an edited file redoes the step and the later ones; a
    file rewritten with the same content (another modification time) does not; nor does a plain rerun."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.de").write_text("eins\n")
    calls = []

    def pipeline():
        steps = Steps(str(tmp_path / "work"), ("raw", "text"))
        resource = common.Resource(name="train.de.gz", urls=[], members=["train.de"])

        def read_raw():
            calls.append("raw")
            path = common.fetch(resource, str(raw), str(tmp_path / "work"), download_ok=False)["train.de"]
            (tmp_path / "raw.out").write_text(open(path).read())

        steps.run("raw", [str(tmp_path / "raw.out")], read_raw, track_inputs=True, raw_dir=str(raw))
        steps.run("text", [str(tmp_path / "text")], lambda: (calls.append("text"), (tmp_path / "text").write_text("t")))

    pipeline()
    pipeline()
    assert calls == ["raw", "text"]
    (raw / "train.de").write_text("zwei\n")
    pipeline()
    assert calls[2:] == ["raw", "text"] and (tmp_path / "raw.out").read_text() == "zwei\n"
    os.utime(raw / "train.de", ns=(1, 1))  # same content, another time: read again, found unchanged
    pipeline()
    assert calls[4:] == []


def test_a_misspelled_stop_after_is_refused_before_any_step(tmp_path):
    with pytest.raises(PrepError, match=r"^--stop-after tokenise: not a step of this preparation \(its steps: raw, "
                       r"tokenize, text\)$"):
        Steps(str(tmp_path), ("raw", "tokenize", "text"), stop_after="tokenise")
    assert not os.listdir(tmp_path)


def test_one_preparation_per_work_dir(tmp_path):
    with common.exclusive(str(tmp_path)):
        with pytest.raises(PrepError, match="another preparation is running"):
            with common.exclusive(str(tmp_path)):
                pass


def test_missing_package_names_the_install_command():
    with pytest.raises(PrepError, match="needs the Python package 'no-such-package'.*requirements.txt"):
        common.require("no_such_module_xyz", "no-such-package", "Tokenisation")


def test_release_archive_in_raw_dir_is_verified_and_extracted(tmp_path, capsys):
    import tarfile

    folder = tmp_path / "src" / "de-en"
    folder.mkdir(parents=True)
    (folder / "train.tags.de-en.de").write_text("hallo\n")
    (tmp_path / "raw").mkdir()
    with tarfile.open(tmp_path / "raw" / "de-en.tgz", "w:gz") as tar:
        tar.add(folder, arcname="de-en")
    resource = Resource("de-en.tgz", urls=[], members=["train.tags.de-en.de"])
    paths = fetch(resource, str(tmp_path / "raw"), str(tmp_path / "work"), download_ok=False)
    assert open(paths["train.tags.de-en.de"]).read() == "hallo\n"
    assert "no published checksum is known for de-en.tgz" in capsys.readouterr().err
    missing = Resource("de-en.tgz", urls=[], members=["train.tags.de-en.fr"])
    with pytest.raises(PrepError, match="de-en.tgz does not contain train.tags.de-en.fr"):
        fetch(missing, str(tmp_path / "raw"), str(tmp_path / "work"), download_ok=False)
