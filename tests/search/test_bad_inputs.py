"""Bad input to the search's command line is one ``error:`` line naming the option or file (exit 2), before
any work, and nothing is written; two ``collect`` runs into one file at once lose and duplicate nothing.
(The bad inputs that need a trained supernet, e.g. ``evaluate --subset valid7``, are in test_supernet.py.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_plugins.errors import DEBUG_VARIABLE
from fairseq_plugins.search.collect import read_collection

ROOT = Path(__file__).resolve().parents[2]
SPACE = (ROOT / "search_spaces" / "multi30k_cpu.yaml").read_text(encoding="utf-8")  # a space of the project


def search(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fairseq_plugins.search", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def one_line_error(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


EVOLVE = ["evolve", "--space", "{d}/space.yaml", "--checkpoint", "{d}/checkpoint.pt", "--ranker", "{d}/checkpoint.pt",
          "--latency-predictor", "{d}/predictor.txt", "--output", "{d}/out"]

EVOLVE_FLOPS = ["evolve", "--space", "{d}/space.yaml", "--checkpoint", "{d}/checkpoint.pt", "--ranker", "{d}/checkpoint.pt",
                "--flops", "1", "--output", "{d}/out"]
PARETO = ["pareto", "--space", "{d}/space.yaml", "--checkpoint", "{d}/checkpoint.pt", "--ranker", "{d}/checkpoint.pt",
          "--output", "{d}/front.jsonl"]
OF_A_LATENCY_BUDGET = ("an option of a latency budget (--latency-ms, --relative-latency or --latency-of), which is not given "
                       "(it would be ignored)")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "latin1.yaml").write_bytes(("# Größe\n" + SPACE).encode("latin-1"))
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    from fairseq_plugins.search.space import SearchSpace

    baseline = SearchSpace.from_file(str(tmp_path / "space.yaml")).extreme(largest=False).to_dict()
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    (tmp_path / "outside.json").write_text(json.dumps({**baseline, "encoder_embed_dim": 1024, "decoder_embed_dim": 1024}))
    (tmp_path / "bad.json").write_text("{not json")
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["cost", "--checkpoint", "{d}/checkpoint.pt", "--architecture", "a.json", "--target-length", "0"],
     "--target-length: expected at least 1, got 0"),
    (["cost", "--checkpoint", "{d}/checkpoint.pt", "--architecture", "a.json", "--source-length", "-3"],
     "--source-length: expected at least 1, got -3"),
    (["cost", "--checkpoint", "{d}/checkpoint.pt", "--architecture", "a.json", "--latency", "--processes", "0"],
     "--processes: expected at least 1, got 0"),
    (["cost", "--checkpoint", "{d}/checkpoint.pt", "--architecture", "a.json", "--latency", "--rounds", "4"],
     "--rounds: expected at least 2 for each of the --processes 3 (at least 6: a process's repeatability is the spread "
     "over its rounds), got 4"),
    (["collect", "--what", "latency", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "-n", "2",
      "--output", "{d}/out.jsonl", "--processes", "-1"], "--processes: expected at least 1, got -1"),
    (["collect", "--what", "latency", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "-n", "2",
      "--output", "{d}/out.jsonl", "--in-turn", "0"], "--in-turn: expected at least 1, got 0"),
    (["evaluate", "--checkpoint", "{d}/checkpoint.pt", "--max-tokens", "0"], "--max-tokens: expected at least 1, got 0"),
    (["evaluate", "--checkpoint", "{d}/checkpoint.pt", "--hypotheses", "{d}/hyp.txt"],
     "--hypotheses: an option of --bleu, which is not given (it would be ignored)"),
    (["evaluate", "--checkpoint", "{d}/checkpoint.pt", "--beam=3"], "--beam: an option of --bleu, which is not given (it would be ignored)"),
    (["evaluate", "--checkpoint", "{d}/checkpoint.pt", "--bea", "3", "--bleu"], "unrecognized arguments: --bea 3"),
    (["cost", "--checkpoint", "{d}/checkpoint.pt", "--architecture", "a.json", "--rounds", "8"],
     "--rounds: an option of --latency, which is not given (it would be ignored)"),
    (["collect", "--what", "loss", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "--output",
      "{d}/out.jsonl", "--max-spread", "0.2"], "--max-spread: an option of --what latency, which is not given (it would be ignored)"),
    (["collect", "--what", "loss", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "--output",
      "{d}/out.jsonl", "--target-length", "0"], "--target-length: an option of --what latency, which is not given (it would be ignored)"),
    (["collect", "--what", "latency", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "--output",
      "{d}/out.jsonl", "--subset", "test"], "--subset: an option of --what loss, which is not given (it would be ignored)"),
    (["evaluate", "--checkpoint", "{d}/checkpoint.pt", "--bleu", "--hypotheses", "{d}/hyp.txt", "--architecture",
      "{d}/baseline.json", "--architecture", "{d}/baseline.json"],
     "--hypotheses: one file holds one architecture's hypotheses, and 2 --architecture are given: evaluate them one at a time"),
    (["collect", "--what", "loss", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "-n", "0",
      "--output", "{d}/out.jsonl"], "-n: expected at least 1"),
    (["sample", "--space", "{d}/latin1.yaml"],
     "{d}/latin1.yaml: the search space: not UTF-8 text (line 1, byte 4: invalid start byte b'\\xf6'); save it as UTF-8"),
    (["space", "--space", "{d}/missing.yaml"], "{d}/missing.yaml: the search space: cannot read it (No such file or directory)"),
    (["collect", "--what", "loss", "--checkpoint", "{d}/checkpoint.pt", "--space", "{d}/space.yaml", "-n", "2",
      "--output", "{d}/out.jsonl"], "{d}/checkpoint.pt: an empty file, not a checkpoint (an interrupted copy or save?)"),
    # --latency-of: its file read (and the other files' digests taken) before the supernet is loaded
    (EVOLVE + ["--latency-of", "{d}/missing.json"], "--latency-of {d}/missing.json: cannot read it (No such file or directory) "
     "(expected an architecture of --space in JSON, as best.json or --architecture-file hold it)"),
    (EVOLVE + ["--latency-of", "{d}/bad.json"], "--latency-of {d}/bad.json: not an architecture in JSON: Expecting property "
     "name enclosed in double quotes: line 1 column 2 (char 1) (expected an architecture of --space in JSON, as best.json "
     "or --architecture-file hold it)"),
    (EVOLVE + ["--latency-of", "{d}/outside.json"], "--latency-of {d}/outside.json: encoder.embed_dim: 1024 is outside the space (allowed: 96, 128)"),
    (["pareto", "--space", "{d}/space.yaml", "--checkpoint", "{d}/checkpoint.pt", "--latency-of", "{d}/missing.json",
      "--latency-predictor", "{d}/predictor.txt", "--output", "{d}/front.jsonl"],
     "--latency-of {d}/missing.json: cannot read it (No such file or directory) "
     "(expected an architecture of --space in JSON, as best.json or --architecture-file hold it)"),
    (EVOLVE + ["--latency-of", "{d}/baseline.json"], "--latency-predictor {d}/predictor.txt: cannot read it (No such file or "
     "directory)"),
    # evolve and pareto: an option of a fitness, or of a latency budget, not given
    (EVOLVE + ["--latency-ms", "5", "--fitness", "supernet"], "--ranker: an option of --fitness ranker, which is not given (it would be ignored)"),
    (EVOLVE + ["--latency-ms", "5", "--subset", "test"], "--subset: an option of --fitness supernet, which is not given (it would be ignored)"),
    (EVOLVE + ["--flops", "1"], f"--latency-predictor: {OF_A_LATENCY_BUDGET}"),
    (EVOLVE_FLOPS + ["--confirm", "2"], f"--confirm: {OF_A_LATENCY_BUDGET}"),
    (EVOLVE_FLOPS + ["--processes", "2"], f"--processes: {OF_A_LATENCY_BUDGET}"),
    (EVOLVE_FLOPS + ["--reference={d}/baseline.json"], f"--reference: {OF_A_LATENCY_BUDGET}"),
    (PARETO + ["--objective", "flops", "--latency-predictor", "{d}/predictor.txt"],
     "--latency-predictor: an option of --objective latency or a latency budget (--latency-ms, --relative-latency or "
     "--latency-of), which is not given (it would be ignored)"),
    (PARETO + ["--objective", "flops", "--beam", "3"], "unrecognized arguments: --beam 3"),  # (pareto measures nothing)
], ids=["cost-target-length", "cost-source-length", "cost-processes", "cost-rounds-per-process", "collect-processes", "collect-in-turn",
        "evaluate-max-tokens", "evaluate-hypotheses-without-bleu", "evaluate-beam-without-bleu", "evaluate-abbreviation",
        "cost-rounds-without-latency", "collect-loss-max-spread", "collect-loss-target-length", "collect-latency-subset", "evaluate-hypotheses-of-two", "collect-n", "space-not-utf8", "space-missing",
        "collect-empty-checkpoint", "evolve-latency-of-missing", "evolve-latency-of-not-json", "evolve-latency-of-outside",
        "pareto-latency-of-missing", "evolve-latency-predictor-missing", "evolve-ranker-without-its-fitness",
        "evolve-subset-without-its-fitness", "evolve-predictor-without-latency-budget", "evolve-confirm-without-latency-budget",
        "evolve-processes-without-latency-budget", "evolve-reference-without-latency-budget",
        "pareto-predictor-without-latency", "pareto-measures-nothing"])
def test_bad_input_is_one_line_naming_it_and_writes_nothing(files, argv, message):
    before = sorted(os.listdir(files))
    result = search(*[a.format(d=files) for a in argv])
    assert one_line_error(result).endswith(message.format(d=files))
    assert sorted(os.listdir(files)) == before  # no output, no lock file


def test_the_debug_variable_shows_the_traceback(files):
    result = search("sample", "--space", files / "latin1.yaml", env={DEBUG_VARIABLE: "1"})
    assert result.returncode != 0 and "Traceback" in result.stderr and "SearchSpaceError" in result.stderr


def test_an_architecture_file_that_is_not_utf8_is_named(tmp_path):
    from fairseq_plugins.models.architecture import Architecture
    from fairseq_plugins.modules import AttentionConfigError

    path = tmp_path / "architecture.json"
    path.write_bytes('{"note": "Größe"}'.encode("latin-1"))
    with pytest.raises(AttentionConfigError) as error:
        Architecture.from_file(str(path))
    assert str(error.value) == (f"--architecture-file {path}: not UTF-8 text (line 1, byte 12: invalid start byte "
                                "b'\\xf6'); save it as UTF-8")


# The collection's machinery with a stand-in supernet (a loss computed from the architecture, slowly enough
# that the two runs overlap): what is tested is the file, not the loss.
WRITER = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from fairseq_plugins.search import collect, subnetworks
from fairseq_plugins.search.space import SearchSpace

class Supernet:
    LANGUAGE_MODEL = False
    space = SearchSpace.from_file({space!r})

class Loss:
    def __init__(self, *args):
        pass
    def evaluate(self, architecture):
        time.sleep(0.05)
        return {{"loss": float(len(json.dumps(architecture.to_dict()))), "nll_loss": 1.0, "tokens": 1}}

subnetworks.load_supernet = lambda checkpoint: (Supernet(), None, {{}})
subnetworks.InheritedLoss = Loss
open({ready!r} + str(os.getpid()), "w").close()
while len([n for n in os.listdir({folder!r}) if n.startswith("ready")]) < 2:  # start together
    time.sleep(0.01)
print(json.dumps(collect.collect("loss", {checkpoint!r}, {space!r}, {n}, {output!r})))
"""


def test_two_collections_into_one_file_at_once_lose_and_duplicate_nothing(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "supernet.pt").write_bytes(b"a stand-in")
    (tmp_path / "sync").mkdir()
    output = tmp_path / "losses.jsonl"
    script = WRITER.format(root=str(ROOT), space=str(tmp_path / "space.yaml"), checkpoint=str(tmp_path / "supernet.pt"),
                           n=24, output=str(output), ready=str(tmp_path / "sync" / "ready"), folder=str(tmp_path / "sync"))
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    summaries = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    header, records = read_collection(str(output))
    keys = [json.dumps(r["architecture"], sort_keys=True) for r in records]
    assert len(keys) == len(set(keys)) == 24  # every architecture once
    assert sum(s["added"] for s in summaries) == 24  # each record written by exactly one of the runs
    assert header["what"] == "loss" and not os.path.exists(str(output) + ".partial")


def test_a_latency_collection_from_before_processes_continues_only_as_it_was_measured(tmp_path):
    """A file whose header's latency settings have no ``processes`` was measured in one process: it continues
    with ``--processes 1``; the default (several) is refused naming the setting, not mixed into it."""
    from dataclasses import asdict

    from fairseq_plugins.search.collect import CollectError, continued_records, write_collection
    from fairseq_plugins.search.latency import LatencySettings

    older = {key: value for key, value in asdict(LatencySettings()).items() if key != "processes"}
    output = tmp_path / "latency.jsonl"
    records = [{"architecture": {"a": 1}, "latency_ms": 3.0, "relative_latency": 0.5, "ratio_range": 0.01}]
    write_collection(str(output), {"record": "collection", "what": "latency", "latency": older}, records)
    assert continued_records(str(output), {"what": "latency", "latency": asdict(LatencySettings(processes=1))}) == records
    with pytest.raises(CollectError, match=r"collected with latency = \{.*\"processes\": 1.*\}, not \{.*\"processes\": 3"):
        continued_records(str(output), {"what": "latency", "latency": asdict(LatencySettings())})
