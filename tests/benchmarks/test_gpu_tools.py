"""The GPU tools (benchmarks/sdpa_backends.py, benchmarks/gpu_checks.sh) on a machine without one: they
refuse clearly, and sdpa_backends.py's whole loop runs with CUDA faked by the CPU (forced backends the
CPU lacks say so instead of stopping the run)."""
import os
import re
import subprocess

import pytest
import torch

from benchmarks import sdpa_backends

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sdpa_backends_needs_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        sdpa_backends.main(["--lengths", "8"])


def test_sdpa_backends_reports_every_case_and_backend(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "the CPU, as a stand-in")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *args, **kwargs: self)
    assert sdpa_backends.main(["--lengths", "8"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    cases = {line.split(" T=")[0] for line in lines}
    assert {"softmax", "bet", "bet[no_diag_free]"} <= cases
    assert len(lines) == len(cases) * 2 * len(sdpa_backends.ROWS)  # both paddings, every row
    for line in lines:
        if " fp32 MATH:" in line:  # float32 against float64: every output and gradient close
            errors = [float(value) for value in re.findall(r"=(\d\.\de[-+]\d+)", line)]
            assert errors and max(errors) < 1e-4, line
    assert any("CUDNN_ATTENTION: cannot run" in line for line in lines)  # no cuDNN on the CPU: said, not fatal


def test_gpu_checks_sh_names_what_is_missing(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "DATA_BIN"}
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_checks.sh"), str(tmp_path / "out")],
                            env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "DATA_BIN" in result.stderr and "prepare.sh" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("env, message", [
    ({}, "WORK_DIR: the bench-quality work folder"),
    ({"WORK_DIR": "missing", "JOBS": "0"}, "JOBS=0: expected a positive number"),
    ({"WORK_DIR": "missing", "TIME_LIMIT": "9m"}, "TIME_LIMIT=9m: expected a positive number of seconds"),
    ({"WORK_DIR": "missing", "BENCH": "supernet"}, "BENCH=supernet: expected quality, search or convergence"),
    ({"WORK_DIR": "missing"}, "WORK_DIR=missing has no data-bin/"),
])
def test_gpu_rows_sh_refuses_bad_settings_before_anything_runs(tmp_path, env, message):
    clean = {k: v for k, v in os.environ.items() if k not in ("WORK_DIR", "JOBS", "TIME_LIMIT", "BENCH")}
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_rows.sh"), str(tmp_path / "out")],
                            cwd=tmp_path, env={**clean, **env}, capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "out").exists()


def unpack_rows(out):
    """OUT_DIR/rows.tar.gz, unpacked beside it."""
    import tarfile

    target = out.parent / "unpacked"
    with tarfile.open(out / "rows.tar.gz") as archive:
        archive.extractall(target, filter="data")
    return target


def test_gpu_rows_sh_runs_the_search_driver_and_brings_its_results_back(tmp_path):
    """BENCH=search: the search's train stage on the GPU, its trainings in WORK_DIR (bench-quality's folder),
    its stage results copied to OUT_DIR (PYTHON=echo shows the command it runs)."""
    work = tmp_path / "work"
    (work / "data-bin").mkdir(parents=True)
    (work / "results" / "multi30k_converged").mkdir(parents=True)
    results = tmp_path / "search_results"
    (results / "train").mkdir(parents=True)
    (results / "train" / "softmax_seed1.json").write_text("{}")
    clean = {k: v for k, v in os.environ.items() if k not in ("JOBS", "TIME_LIMIT")}
    env = {**clean, "WORK_DIR": str(work), "BENCH": "search", "PYTHON": "echo", "SEARCH_RESULTS": str(results)}
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_rows.sh"), str(tmp_path / "out"), "--stages", "train"],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "out" / "search.log").read_text()
    assert (f"benchmarks/search_multi30k.py --work-dir {work} --quality-work-dir {work} --results {results} --output "
            f"{tmp_path / 'out' / 'search.md'} --device cuda --jobs 12 --allow-dirty --stages train") in log
    unpacked = unpack_rows(tmp_path / "out")
    assert (unpacked / "search_results" / "train" / "softmax_seed1.json").is_file()
    assert (unpacked / "results" / "multi30k_converged").is_dir()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rows.tar.gz", "search.log"]  # a few files


DRIVERS = [  # BENCH, its results variable, the archive's folder, the driver's arguments, the command it runs
    ("quality", "RECORDS", "records", ["--suites", "multi30k_converged"],
     "benchmarks/quality.py --work-dir {work} --records {results} --output {out}/results.md --device cuda --jobs 2 "
     "--allow-dirty --suites multi30k_converged"),
    ("convergence", "CONVERGENCE_RESULTS", "convergence_results", ["--suite", "multi30k", "--rung", "1000", "--rung", "2000"],
     "benchmarks/convergence.py --work-dir {work} --results {results} --output {out}/convergence.md --device cuda "
     "--jobs 2 --allow-dirty --suite multi30k --rung 1000 --rung 2000"),
]


@pytest.mark.parametrize("bench, variable, folder, args, command", DRIVERS, ids=[d[0] for d in DRIVERS])
def test_gpu_rows_sh_runs_its_driver_and_brings_the_results_back(tmp_path, bench, variable, folder, args, command):
    """BENCH=quality (bench-quality's rows, into RECORDS) and BENCH=convergence (a ladder's rungs side by side,
    into CONVERGENCE_RESULTS): the results written on the device's copy of the checkout come back in the
    archive (PYTHON=echo shows the command it runs)."""
    work, results, out = tmp_path / "work", tmp_path / "results", tmp_path / "out"
    (work / "data-bin").mkdir(parents=True)
    (results / "multi30k").mkdir(parents=True)
    (results / "multi30k" / "softmax_seed2.json").write_text("{}")
    clean = {k: v for k, v in os.environ.items() if k not in ("JOBS", "TIME_LIMIT", "BENCH")}
    result = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_rows.sh"), str(out), *args],
                            env={**clean, "WORK_DIR": str(work), "PYTHON": "echo", "BENCH": bench, "JOBS": "2",
                                 variable: str(results)}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert command.format(work=work, results=results, out=out) in (out / f"{bench}.log").read_text()
    assert (unpack_rows(out) / folder / "multi30k" / "softmax_seed2.json").is_file()
