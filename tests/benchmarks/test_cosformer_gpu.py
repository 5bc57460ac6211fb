"""benchmarks/cosformer_gpu.py on the CPU: its whole run (parity, training and decoding parts, one worker
process per kind) at tiny sizes, the Triton kernels under the interpreter (the script sets TRITON_INTERPRET
itself on --device cpu). Timings on the CPU mean nothing and are not checked; what is checked is that every
path runs, agrees with the naive reference, and lands in the report."""
import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "cosformer_gpu.py")


def test_cpu_smoke_run_reports_every_path(tmp_path):
    out = tmp_path / "report.md"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, SCRIPT, "--device", "cpu", "--lengths", "16", "--dtypes", "fp32", "--prefixes", "4",
         "--beams", "1,2x2", "--heads", "1", "--head-dim", "8", "--repeats", "1", "--steps", "1", "--output", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = out.read_text()
    for path in ("chunked", "fused", "recurrent", "fused_recurrent"):
        for dtype in ("fp32", "bf16", "fp16"):
            assert f"| {path} | {dtype} | o " in report and f"| {path} | {dtype} |" in report
    parity = [line for line in report.splitlines() if line.startswith("| ") and line.rstrip().endswith(("| yes |", "| NO |"))]
    assert len(parity) == 12 and all(line.endswith("| yes |") for line in parity), parity
    train = next(line for line in report.splitlines() if line.startswith("| fp32 | 16 |"))
    cells = [cell.strip() for cell in train.strip("|").split("|")][2:]
    assert all(cell.endswith(("ms", "µs")) for cell in cells[:3]), train  # fused, chunked, SDPA measured
    assert cells[3].endswith(" ms") or cells[3].endswith("µs") or cells[3].startswith("not measured"), train
    for config in ("1", "2x2"):
        line = next(line for line in report.splitlines() if line.startswith(f"| {config} | 4 |"))
        assert all(cell.strip().endswith(("ms", "µs")) for cell in line.strip("|").split("|")[2:]), line


def test_refuses_bad_options():
    result = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--parts", "speed"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "--parts must be a subset of parity,train,decode" in result.stderr
    result = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--beams", "5y3"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "--beams" in result.stderr
    result = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--paths", "fused,flash"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "--paths must be a non-empty subset of chunked,fused" in result.stderr


def test_a_worker_cut_short_keeps_the_cells_it_finished(monkeypatch):
    """A worker past its time limit: the cells it printed come back, the rest say "not measured" in the report."""
    spec = importlib.util.spec_from_file_location("cosformer_gpu_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    done = [{"dtype": "bf16", "length": 256, "result": 0.001}, {"dtype": "bf16", "length": 512, "result": 0.002}]

    def cut_short(cmd, **kwargs):
        printed = "".join(script.ROW + json.dumps(row) + "\n" for row in done) + "log line\n"
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], output=printed.encode())

    monkeypatch.setattr(script.subprocess, "run", cut_short)
    assert script.launch({"part": "train"}, 5) == done
    monkeypatch.setattr(script.subprocess, "run", lambda cmd, **kw: (_ for _ in ()).throw(subprocess.TimeoutExpired(cmd, 5, output=b"")))
    assert script.launch({"part": "train"}, 5) == "timed out after 5 s"
