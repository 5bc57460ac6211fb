"""benchmarks/latency_agreement.py (issue 33): the agreement arithmetic on known values, then the script on a
tiny supernet: two runs of the same architectures, the second beside a busy process, a report that
continues where it stopped and refuses other settings."""
import json

import pytest

import fairseq_plugins  # noqa: F401
from benchmarks import latency_agreement
from fairseq_plugins.cli.pipeline import PLUGIN_DIR, fairseq_command, run
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

SPACE = """
shared_embed_dim: true
encoder: {embed_dim: [8, 16], layers: [1, 2], ffn_embed_dim: [8], attention_heads: [2], attention_kinds: [softmax, cosformer]}
decoder: {embed_dim: [8, 16], layers: [1], ffn_embed_dim: [8], attention_heads: [2], attention_kinds: [softmax, cosformer],
          cross_attention_heads: [2], cross_attention_kinds: [softmax], encoder_decoder_connect: [1]}
"""


def test_agreement_on_known_values():
    result = latency_agreement.agreement([1.0, 2.0, 4.0], [1.02, 1.92, 4.0], 0.05)
    assert result["differences"] == pytest.approx([0.02, -0.04, 0.0])
    assert result["largest"] == pytest.approx(0.04) and result["median"] == pytest.approx(0.02) and result["within"]
    assert not latency_agreement.agreement([1.0], [1.06], 0.05)["within"]


def test_two_runs_one_under_load_are_reported_and_resumed(tmp_path, capsys):
    write_translation_task(str(tmp_path / "raw"), splits={"train": 40, "valid": 5, "test": 5})
    data = binarize_translation(str(tmp_path / "raw"), str(tmp_path / "bin"))
    (tmp_path / "space.yaml").write_text(SPACE)
    run(fairseq_command("train") + [
        data, "--user-dir", PLUGIN_DIR, "--task", "supernet_translation", "--arch", "mixed_supertransformer",
        "--search-space", str(tmp_path / "space.yaml"), "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3",
        "--max-tokens", "1000", "--max-update", "1", "--cpu", "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints",
        "--num-workers", "0", "--max-source-positions", "32", "--max-target-positions", "32", "--disable-validation"])
    report = str(tmp_path / "agreement.json")
    argv = ["--checkpoint", str(tmp_path / "ck" / "checkpoint_last.pt"), "-n", "3", "--load", "1", "--tolerance", "100",
            "--source-length", "5", "--target-length", "4", "--beam", "2", "--warmup", "0", "--repeats", "1", "--rounds", "4",
            "--processes", "2",
            "--output", report]
    assert latency_agreement.main(argv) == 0
    stored = json.loads(open(report).read())
    first, second = stored["runs"]
    assert [r["architecture"] for r in first] == [r["architecture"] for r in second] and len(first) == 3
    assert [r["load_processes"] for r in first + second] == [0] * 3 + [1] * 3
    assert all(r["reference"] == stored["inputs"]["reference"] and r["relative_latency"] > 0 for r in first + second)
    # every architecture in two measuring processes of two rounds each, the median of theirs
    assert all(len(set(r["pids"])) == 2 and [p["rounds"] for p in r["per_process"]] == [2, 2] for r in first + second)
    assert stored["inputs"]["latency"]["processes"] == 2 and stored["inputs"]["latency"]["in_turn"] == 10
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["architectures"] == 3 and summary["relative_latency"]["within"]
    assert summary["process_range"]["run1_max"] == max(r["process_range"] for r in first)
    assert summary["relative_latency"]["differences"] == pytest.approx(
        [(b["relative_latency"] - a["relative_latency"]) / a["relative_latency"] for a, b in zip(first, second)])
    # a finished report is not measured again; other settings are refused
    assert latency_agreement.main(argv) == 0 and json.loads(open(report).read())["runs"] == stored["runs"]
    assert latency_agreement.main([a if a != "3" else "4" for a in argv]) == 2
    assert "measured with other settings (n)" in capsys.readouterr().err
    assert latency_agreement.main(argv[:-2] + ["--processes", "0", "--output", report]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: --processes: expected at least 1, got 0"
    # more architectures than the space has (SPACE: 2 widths x (2 + 4) encoders x 2 decoder layers = 24) are refused,
    # never fewer measured without a word
    fresh = str(tmp_path / "too_many.json")
    assert latency_agreement.main([a if a != "3" else "25" for a in argv[:-1]] + [fresh]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: -n 25: the space of {tmp_path / 'ck' / 'checkpoint_last.pt'} has 24 distinct architectures; expected -n "
        "at most 24")
    assert not (tmp_path / "too_many.json").exists()
    # --in-turn 1: one architecture after another, the same report
    one_by_one = str(tmp_path / "one_by_one.json")
    assert latency_agreement.main(argv[:-2] + ["--in-turn", "1", "--output", one_by_one]) == 0
    stored = json.loads(open(one_by_one).read())
    assert stored["inputs"]["latency"]["in_turn"] == 1 and [len(r) for r in stored["runs"]] == [3, 3]
    assert [r["architecture"] for r in stored["runs"][0]] == [r["architecture"] for r in first]
    assert all(len(set(r["pids"])) == 2 for r in stored["runs"][0] + stored["runs"][1])


@pytest.mark.parametrize("extra, message", [
    (["--load", "0", "--load-on-core"], "--load-on-core: pins the busy processes of --load, which is 0 (it would be "
                                        "ignored)"),
], ids=["load-on-core-without-load"])
def test_an_option_that_would_be_ignored_is_refused(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_:
        latency_agreement.main(["--checkpoint", str(tmp_path / "none.pt"), "--output", str(tmp_path / "a.json"), *extra])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("error: " + message)


def test_a_damaged_report_is_a_one_line_error_naming_it(tmp_path):
    """benchmarks.common.read_json: before the checkpoint is even loaded (none here), and the file is kept."""
    report = tmp_path / "agreement.json"
    report.write_text('{"inputs": {"n": 3}, "runs": [[')  # cut short (a full disk, a killed write elsewhere)
    with pytest.raises(SystemExit) as exit_:
        latency_agreement.main(["--checkpoint", str(tmp_path / "none.pt"), "--output", str(report)])
    message = str(exit_.value.code)
    assert message.startswith(f"error: {report}: not valid JSON (") and "\n" not in message
    assert report.read_text() == '{"inputs": {"n": 3}, "runs": [['
