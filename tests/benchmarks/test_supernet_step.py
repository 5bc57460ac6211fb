"""benchmarks/supernet_step.py (docs/records/search.md's step-cost table): one cell's worker measures a real training
step in-process, the table and its section are written from the cells' results, and bad spaces are refused
before any process starts."""
import pytest

from benchmarks import supernet_step as step


def test_a_cell_runs_a_training_step_of_the_supernet_and_of_the_standalone_model():
    spec = dict(space=step.os.path.join(step.REPO, "search_spaces", "multi30k_cpu.yaml"), tokens=64, length=8, vocab=50,
                steps=3, warmup=1, threads=1, device="cpu", size="smallest", measure="time")
    timed = step.worker(spec)  # both models, their steps alternated
    supernet, standalone = timed["supernet"], timed["standalone"]
    assert len(supernet["times_s"]) == len(standalone["times_s"]) == 3
    assert supernet["median_s"] > 0 and standalone["median_s"] > 0
    assert supernet["parameters"] > standalone["parameters"]  # the supernet holds every container
    memory = step.worker(dict(spec, measure="memory", model="supernet"))
    assert memory["peak_bytes"] >= 0


def test_the_section_has_the_table_command_and_machine(monkeypatch, tmp_path):
    def run_cell(spec):
        if spec["measure"] == "time":
            return {model: {"median_s": 0.1 if model == "standalone" else 0.11, "times_s": [0.1], "parameters": 1000}
                    for model in step.MODELS}
        return {"peak_bytes": 2 ** 20}

    monkeypatch.setattr(step, "run_cell", run_cell)
    monkeypatch.setattr(step, "require_committed", lambda allow, what: "abc123")
    (tmp_path / "search.md").write_text("# intro\n")
    assert step.main(["--output", str(tmp_path / "search.md"), "--tokens", "64", "--steps", "2"]) == 0
    text = (tmp_path / "search.md").read_text()
    assert text.startswith("# intro\n") and step.REPORT_BEGIN in text and "at git abc123" in text
    assert "| smallest (0.00M of 0.00M parameters) | 100.0 ms | 110.0 ms | 1.10 | 1.0 MiB | 1.0 MiB | 1.00 |" in text
    assert "`python benchmarks/supernet_step.py --output" in text


def test_the_shown_command_names_no_json_path():
    assert step.shown_arguments(["--steps", "30", "--json", "/work/x.json", "--output", "docs/records/search.md", "--json=/y"]) == [
        "--steps", "30", "--output", "docs/records/search.md"]


def test_bad_spaces_are_refused(tmp_path):
    (tmp_path / "lm.yaml").write_text("decoder: {embed_dim: [8], layers: [1], ffn_embed_dim: [8], attention_heads: [2], "
                                      "attention_kinds: [softmax]}\n")
    with pytest.raises(SystemExit):
        step.main(["--space", str(tmp_path / "lm.yaml")])
    with pytest.raises(SystemExit):
        step.main(["--space", str(tmp_path / "missing.yaml")])
