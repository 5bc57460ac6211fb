"""benchmarks/search_multi30k.py (issue 15's measured run): the hand-written layouts are in the space, the
seeds are summarised, the target is decided on known numbers, and the report and its plot are rendered from
stage results (the stages run the search's CLIs and recipes, tested elsewhere)."""
import json

import fairseq_plugins  # noqa: F401
from benchmarks import search_multi30k as run
from fairseq_plugins.search.space import SearchSpace


def test_the_hand_written_layouts_are_in_the_space_at_its_size_class():
    space = SearchSpace.from_file(run.SPACE)
    for name in run.LAYOUTS:
        architecture = run.layout_architecture(name)
        space.check_contains(architecture, name)
        assert len(architecture.encoder_layers) == len(architecture.decoder_layers) == 3
    kinds = {name: [l.attention_kind for l in run.layout_architecture(name).encoder_layers] for name in run.LAYOUTS}
    assert kinds["mformer"] == ["softmax", "cosformer", "softmax"] and set(kinds["softmax"]) == {"softmax"}


def rows(found_bleu, found_latency, found_std=0.2):
    def row(bleu, std, latency):
        return {"bleu_mean": bleu, "bleu_std": std, "latency_ms": latency}
    return {"softmax": row(28.0, 0.3, 100.0), "cosformer_everywhere": row(25.0, 0.3, 50.0),
            "found_softmax_x0.5": row(found_bleu, found_std, found_latency)}


def test_the_target_on_known_numbers():
    # within softmax's spread at 0.6x its latency: holds
    assert "found_softmax_x0.5 matches softmax" in run.target_verdict(rows(27.8, 60.0))
    # within the spread but at 0.8x: not by the first rule; it beats cosFormer (cheaper) by more than the spread
    verdict = run.target_verdict(rows(27.8, 80.0))
    assert "matches" not in verdict and "beats every hand-written layout of equal or lower latency (cosformer_everywhere)" in verdict
    # far below softmax and not better than the cheaper layout: missed
    assert "**missed**" in run.target_verdict(rows(25.1, 60.0))


def test_the_report_summarises_seeds_and_plots_every_point(tmp_path):
    results = tmp_path / "results"
    (results / "train").mkdir(parents=True)
    for name, bleus, latency in (("softmax", [28.0, 28.4, 28.2], 100.0), ("found_softmax_x0.5", [27.9, 28.1, 28.0], 55.0)):
        architecture = run.layout_architecture("softmax" if name == "softmax" else "mformer").to_dict()
        for seed, bleu in zip((1, 2, 3), bleus):
            record = {"name": name, "seed": seed, "architecture": architecture, "bleu": bleu, "params": 1000,
                      "hypotheses": ["a"], "command": "recipes/multi30k/train.sh x"}
            if seed == 1:
                record["latency"] = {"latency_ms": latency, "stdev_ms": 1.0, "gflops": 0.5}
            (results / "train" / f"{name}_seed{seed}.json").write_text(json.dumps(record))
    (results / "stages.json").write_text(json.dumps({"collect": {"seconds": 7200.0, "runs": []}}))
    report = run.render(None, str(results), "python benchmarks/search_multi30k.py", str(tmp_path / "pareto.png"))
    assert "| softmax | sss / sss / sss | 1,000 | 0.500 | 100.0 ± 1.0 | 28.00, 28.40, 28.20 | 28.20 ± 0.20 | - |" in report
    assert "found_softmax_x0.5 matches softmax (28.00 vs 28.20 BLEU, spread 0.20) at 0.55x its latency" in report
    assert "collect 2.00 h" in report and (tmp_path / "pareto.png").stat().st_size > 5000
