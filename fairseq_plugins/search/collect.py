"""Data for the rankers (``python -m fairseq_plugins.search collect``): for N architectures sampled from a
space, the inherited validation loss inside the supernet, or the measured latency of the exported
sub-network, in milliseconds and relative to a fixed reference architecture (``latency.measure``'s
protocol: pinned processes per architecture, the two interleaved in each; ``--in-turn`` architectures
measured together, their processes taken in turn).

The output is a JSON-lines file: a header line (what is collected, the space, the sampling seed, the
checkpoint, the latency settings, the machine) and one record per architecture with its value, the
revision, the machine's load and the thread count. A rerun with the same settings continues it: the
architectures are the same seeded sequence, those already in the file are skipped, and every new record is
written at once (atomically, the whole file), so an interrupted run loses at most the architectures it was
measuring (one inherited loss, or one group of ``--in-turn`` latencies). Runs into the same file at the same time take turns to write it (a lock file beside it,
``<output>.lock``), each rereading it first: no record is lost or written twice. A run whose settings differ from the header's is refused, naming the setting.

Latency: a measurement whose repeatability (``ratio_range``: the spread of its rounds' ratios to the
reference, over every round of its ``--processes`` measuring processes, over the relative latency; it bounds
the spread between the processes, ``process_range``, too) exceeds ``--max-spread`` is measured again, up to
``--remeasure`` times (those of a group together); one that never settles is written as dropped (with its
spreads), left out by ``rank`` and counted in the summary. A file started before ``--processes`` (or
``--in-turn``) existed was measured in one process (one architecture after another): it continues with
``--processes 1`` (``--in-turn 1``).
"""
import contextlib
import datetime
import json
import os
import platform
from dataclasses import asdict
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..files import TextFileError, atomic_output, exclusive_lock, read_text
from ..provenance import available_cores, cpu_model, git_revision, load_average
from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .latency import LatencySettings, batches, measure_subnetworks, recorded_settings
from .space import SearchSpace

WHAT = ("loss", "latency")
HEADER = "collection"  # the header line's "record" field


class CollectError(AttentionConfigError):
    """A collection file or setting that cannot be used; the message names it."""


def provenance(threads: int) -> Dict[str, object]:
    return {"revision": git_revision(), "threads": threads, "load_average": load_average(),
            "time": datetime.datetime.now().isoformat(timespec="seconds")}


def machine() -> Dict[str, object]:
    return {"cpu": cpu_model(), "cores": available_cores(), "torch": torch.__version__, "python": platform.python_version()}


def file_sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_collection(path: str) -> Tuple[dict, List[dict]]:
    """(header, records) of a collection file; errors name the file and line."""
    if not os.path.isfile(path):
        raise CollectError(f"{path}: no such collection file (python -m fairseq_plugins.search collect writes one)")
    header, records = None, []
    try:
        text = read_text(path)
    except TextFileError as error:
        raise CollectError(f"{path}: {error}") from None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise CollectError(f"{path}:{number}: not JSON ({error.msg})") from None
        if number == 1:
            if entry.get("record") != HEADER:
                raise CollectError(f"{path}:1: not a collection header (a file written by `collect`)")
            header = entry
        else:
            records.append(entry)
    if header is None:
        raise CollectError(f"{path}: empty")
    return header, records


@contextlib.contextmanager
def output_lock(output: str):
    """One writer of ``output`` at a time (``fcntl.flock`` on ``<output>.lock``, released when the process
    ends, also when it is killed): two collections into the same file at once read and rewrite it in turn."""
    with exclusive_lock(output + ".lock"):
        yield


def continued_records(output: str, settings: dict) -> List[dict]:
    """The records of ``output`` (none when there is no file yet); a file of other ``settings`` is refused."""
    if not os.path.isfile(output):
        return []
    header, records = read_collection(output)
    for key, value in settings.items():
        stored = recorded_settings(header.get(key)) if key == "latency" else header.get(key)  # (older files: fewer settings)
        if stored != value:
            raise CollectError(f"{output}: collected with {key} = {json.dumps(stored)}, not "
                               f"{json.dumps(value)}: continue it with its own settings, or write another file")
    return records


def recorded(records: List[dict]) -> set:
    return {json.dumps(r["architecture"], sort_keys=True) for r in records}


def write_collection(path: str, header: dict, records: List[dict]):
    with atomic_output(path) as f:
        for entry in [header] + records:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


def distinct_samples(space: SearchSpace, n: int, seed: int) -> Iterator[Architecture]:
    """The first ``n`` distinct architectures of the space's seeded sample sequence (fewer when the space
    holds fewer)."""
    import random

    rng, seen = random.Random(seed), set()
    limit = min(n, space.size())
    attempts = 0
    while len(seen) < limit:
        architecture = space.sample(rng)
        attempts += 1
        if architecture not in seen:
            seen.add(architecture)
            yield architecture
        elif attempts > 100 * limit:
            return


def collect(what: str, checkpoint: str, space_path: str, n: int, output: str, seed: int = 1, subset: str = "valid",
            max_tokens: int = 4096, latency: Optional[LatencySettings] = None, reference: Optional[str] = None,
            max_spread: float = 0.1,
            remeasure: int = 2, device: str = "cpu", progress=None) -> dict:
    """Collect (module docstring); returns the summary (counts)."""
    from .subnetworks import InheritedLoss, load_supernet, reference_architecture

    if what not in WHAT:
        raise CollectError(f"--what: expected one of {', '.join(WHAT)}, got {what!r}")
    if n < 1:
        raise CollectError(f"-n: expected at least 1, got {n}")
    if max_spread <= 0 or remeasure < 0:
        raise CollectError("--max-spread must be > 0 and --remeasure >= 0")
    space = SearchSpace.from_file(space_path)
    latency = latency or LatencySettings()
    latency.check()
    model, task, state = load_supernet(checkpoint)
    space.check_within(model.space, f"--space {space_path}", f"the supernet {checkpoint}")
    reference_model = reference_architecture(reference, model) if what == "latency" else None
    # what the records depend on: a file continues only with the same (the same supernet: its content, wherever
    # it lies; latencies: the same machine)
    settings = {"what": what, "space": space.to_dict(), "seed": seed, "checkpoint_sha256": file_sha256(checkpoint)}
    if what == "loss":
        settings.update(subset=subset, max_tokens=max_tokens)
    else:
        settings.update(latency=asdict(latency), reference=reference_model.to_dict(), max_spread=max_spread, remeasure=remeasure,
                        device=device, machine=machine())
    header = {"record": HEADER, **settings, "checkpoint": os.path.abspath(checkpoint), "machine": machine()}
    with output_lock(output):  # the settings are checked, and the file started, by one writer at a time
        records = continued_records(output, settings)
        if not os.path.isfile(output):
            write_collection(output, header, records)
    evaluator = InheritedLoss(model, task, state, subset, max_tokens) if what == "loss" else None
    threads = latency.threads if what == "latency" else torch.get_num_threads()
    added = 0
    # latencies: the architectures not measured yet, in_turn at a time (their processes in turn; one group's
    # records written together); inherited losses one at a time
    size = latency.in_turn if what == "latency" else 1
    for group in batches((a for a in distinct_samples(space, n, seed)
                          # measured already, maybe by another run writing the file now (renamed into place
                          # whole: readable without the lock)
                          if json.dumps(a.to_dict(), sort_keys=True) not in recorded(continued_records(output, settings))),
                         size):
        if what == "loss":
            result = evaluator.evaluate(group[0])
            measured = [{"loss": result["loss"], "nll_loss": result["nll_loss"], "tokens": result["tokens"]}]
        else:
            measured = measure_settled(model, task.target_dictionary, group, reference_model, latency, max_spread,
                                       remeasure, device)
        # Another run may write the same file at the same time: under the lock, the file as it is now gets these
        # records but those that run has written for the same architectures already (never lost, never twice).
        with output_lock(output):
            records = continued_records(output, settings)
            for architecture, record in zip(group, measured):
                if json.dumps(architecture.to_dict(), sort_keys=True) in recorded(records):
                    continue
                records.append({"architecture": architecture.to_dict(), **record, **provenance(threads)})
                added += 1
                if progress:
                    progress(len(records), records[-1])
            write_collection(output, header, records)
    records = continued_records(output, settings)
    dropped = sum(1 for r in records if r.get("dropped"))
    return {"output": output, "what": what, "records": len(records), "added": added, "dropped": dropped,
            "remeasured": sum(len(r.get("spreads", [])) - 1 for r in records if what == "latency")}


def measure_settled(model, dictionary, architectures: Sequence[Architecture], reference: Architecture,
                    settings: LatencySettings, max_spread: float, remeasure: int, device: str) -> List[dict]:
    """``latency.measure_subnetworks`` of ``architectures`` (their processes in turn), those whose
    ``ratio_range`` is above ``max_spread`` measured again (together), at most ``1 + remeasure`` times in
    all; each one's record of its last measurement (without the architectures), with every spread,
    ``dropped`` when none settled."""
    last: List[dict] = [{} for _ in architectures]
    spreads: List[List[float]] = [[] for _ in architectures]
    pending = list(range(len(architectures)))
    for _ in range(1 + remeasure):
        measured = measure_subnetworks(model, dictionary, [architectures[i] for i in pending], reference, settings, device)
        for index, record in zip(pending, measured):
            last[index] = record
            spreads[index].append(record["ratio_range"])
        pending = [i for i in pending if spreads[i][-1] > max_spread]
        if not pending:
            break
    records = []
    for record, spread in zip(last, spreads):
        record = {key: value for key, value in record.items() if key not in ("reference",) and key not in asdict(settings)}
        record["spreads"] = spread
        if spread[-1] > max_spread:
            record["dropped"] = True
        records.append(record)
    return records
