"""`make demo` as a newcomer runs it, in its quick mode: the preset rows, a
parsed BLEU, the closing lines that say what the numbers mean and what to run
next, no hand-drawn progress bar in the output, and fairseq's logs without the
warnings a user can do nothing about. The rows the quick mode does not train
are built through fairseq's command line, so that none of them can rot."""
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest
import torch
from fairseq import options, tasks

from fairseq_plugins.cli import demo
from fairseq_plugins.cli.pipeline import PLUGIN_DIR, TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING
from fairseq_plugins.known_warnings import KNOWN_WARNINGS

# configure_logging's format (fairseq's): time | level | logger | message
LOG_PREFIX = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| fairseq_plugins\.cli\.demo \| "
TABLE_ROW = re.compile(r"^\| (?P<label>.+?) +\| (?P<arch>\w+) +\| (?P<bleu>[0-9.]+) +\| (?P<params>[0-9,]+) +\|")


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("demo")
    # one thread: OpenMP threads spin when other processes hold the cores
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "fairseq_plugins.cli.demo", "--quick", "--work-dir", str(work_dir)],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return work_dir, result


def test_quick_demo_prints_every_row_a_bleu_and_what_it_means(quick_demo):
    work_dir, result = quick_demo
    lines = result.stdout.splitlines()
    rows = [m.groupdict() for m in map(TABLE_ROW.match, lines) if m and m.group("label") != "preset"]
    assert [(r["label"], r["arch"]) for r in rows] == [(label, arch) for label, arch, _ in demo.QUICK_ROWS]
    for row in rows:
        assert 0.0 <= float(row["bleu"]) <= 100.0
        assert int(row["params"].replace(",", "")) > 0
        # progress and status: logged on stderr (fairseq's format), the table alone on stdout
        assert re.search(rf"^{LOG_PREFIX}{re.escape(row['label'])}: BLEU {row['bleu']} \(train \d+ s, decode [0-9.]+ s\)$",
                         result.stderr, re.M), row
    assert lines[0].startswith("| preset ")
    # the closing lines: what the BLEU means for this toy task, and what to run next
    assert "about 100 BLEU means a preset has solved it" in result.stdout
    assert f"--quick trains {len(demo.QUICK_ROWS)} presets for {demo.QUICK_MAX_UPDATE} updates" in result.stdout
    assert lines[-1].startswith("Next: `make test`") and "recipes/README.md" in lines[-1]
    assert f"the {demo.QUICK_SPLITS['test']} generated test sentences" in result.stdout
    # no carriage-return bar in a log: tqdm draws only on a terminal
    assert "\r" not in result.stdout and "\r" not in result.stderr
    assert (work_dir / "data-bin-quick" / "dict.src.txt").exists() and not (work_dir / "data-bin").exists()


def test_quick_demo_logs_have_no_known_fairseq_noise(quick_demo):
    work_dir, _ = quick_demo
    logs = sorted((work_dir / "checkpoints-quick").glob("*/train.log"))
    assert len(logs) == len(demo.QUICK_ROWS)
    for log in logs:
        text = log.read_text()
        assert "num_updates 10" in text  # a real training log, up to the last update
        assert "Please install tensorboardX" not in text  # fairseq's hint, gone with tensorboardX installed
        for message, category, _ in KNOWN_WARNINGS:
            assert not re.search(message, text), (log, message)
        assert "UserWarning" not in text and "FutureWarning" not in text, log


@pytest.mark.parametrize("label, arch, extra", demo.DEMO_ROWS, ids=[row[0] for row in demo.DEMO_ROWS])
def test_every_demo_row_builds_through_fairseqs_command_line(quick_demo, label, arch, extra):
    """The full demo's rows, including those --quick does not train, on the quick run's dictionaries; the
    parameter count equals the demo table's where the quick run trained the row."""
    work_dir, result = quick_demo
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[
        str(work_dir / "data-bin-quick"), "--user-dir", PLUGIN_DIR, "--arch", arch, "--cpu",
        *TRANSLATION_TRAINING, *TINY_TRANSLATION_SIZES, *extra])
    torch.manual_seed(0)
    model = tasks.setup_task(args).build_model(args)
    parameters = sum(p.numel() for p in model.parameters())
    printed = {m["label"]: int(m["params"].replace(",", ""))
               for m in map(TABLE_ROW.match, result.stdout.splitlines()) if m and m["label"] != "preset"}
    if label in printed:
        assert parameters == printed[label]
    cosformer_layers = [m for m in model.modules() if type(m).__name__ == "CosformerAttention"]
    assert bool(cosformer_layers) == ("cosFormer" in label), label


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_drawn_on_a_terminal_only():
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        with demo.update_progress("softmax baseline", 400, file=stream) as bar:
            bar.update(50)
    assert "softmax baseline" in terminal.getvalue() and "/400" in terminal.getvalue()
    assert log.getvalue() == ""


def test_a_line_at_least_every_30_seconds_when_not_on_a_terminal(caplog):
    assert demo.PROGRESS_LINE_SECONDS <= 30
    log = io.StringIO()

    def lines():
        return [record.getMessage() for record in caplog.records if record.name == demo.logger.name]

    with caplog.at_level(logging.INFO, logger=demo.logger.name):
        with demo.update_progress("softmax baseline", 400, file=log, interval=0.01, start=20) as progress:
            progress.update(30)
            for _ in range(1000):  # the timer thread's next line (waits on an event, not on a clock)
                if any("update 50/400" in line for line in lines()):
                    break
                threading.Event().wait(0.01)
        assert any(re.fullmatch(r"softmax baseline: update 50/400, \d+ s", line) for line in lines()), lines()
        assert log.getvalue() == ""
        count = len(lines())
        threading.Event().wait(0.05)
        assert len(lines()) == count  # closed: no more lines


def test_the_demo_resumes_each_preset_instead_of_starting_again(quick_demo, tmp_path):
    """A rerun with more updates continues every preset from its checkpoint; a rerun of a finished demo
    trains nothing; a preset whose settings changed starts afresh. (On a copy of the quick demo's folder.)"""
    work_dir, _ = quick_demo
    copy = tmp_path / "demo"
    shutil.copytree(work_dir, copy)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "fairseq_plugins.cli.demo", "--quick", "--work-dir", str(copy), "--max-update", "12"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    for label, arch, _ in demo.QUICK_ROWS:
        assert f"{label} ({arch}): training 12 updates, resuming after update {demo.QUICK_MAX_UPDATE}, then" in result.stderr
    for log in sorted((copy / "checkpoints-quick").glob("*/train.log")):
        text = log.read_text()
        assert f"@ {demo.QUICK_MAX_UPDATE} updates)" in text and "num_updates 12" in text, log  # fairseq's resume
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for label, arch, _ in demo.QUICK_ROWS:
        assert f"{label} ({arch}): trained before (12 updates, " in result.stderr
    # another architecture or options in a preset's folder: its checkpoints are another model's
    save_dir = next((copy / "checkpoints-quick").iterdir())
    settings = demo.row_settings("mixed_transformer_iwslt_de_en", ["--dropout", "0.2"], str(copy / "data-bin-quick"), 12)
    assert demo.prepare_row(str(save_dir), settings) == (None, 0)
    assert sorted(os.listdir(save_dir)) == ["row.json"]


def test_bad_settings_are_refused():
    with pytest.raises(SystemExit):
        demo.main(["--max-update", "0"])
    with pytest.raises(SystemExit):
        demo.main(["--beam", "0"])
    full = demo.closing_lines(False, 5, 100, 400)
    assert "--beam 5 on the 100 generated test sentences" in full[0] and "--quick" not in full[0]
    assert "--quick trains 2 presets for 30 updates" in demo.closing_lines(True, 5, 20, 30)[0]
