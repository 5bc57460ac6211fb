"""benchmarks/search_multi30k.py (issue 33's real run): the layouts are bench-quality's converged rows, the
scaled baselines and budgets are picked from measured latencies, the plan of trainings (rows, seeds) follows
the finished stages, training resumes per (row, seed) through bench-quality's run_row, the target is decided
on known numbers, and the report and its plot are rendered from stage results (the stages run the search's
CLIs and recipes, tested elsewhere)."""
import dataclasses
import json
import os
import re

import pytest

import fairseq_plugins  # noqa: F401
from benchmarks import quality
from benchmarks import search_multi30k as run
from fairseq_plugins.search.latency import LatencySettings
from fairseq_plugins.search.space import SearchSpace

B = 4000


@pytest.fixture
def budget(monkeypatch):
    """B measured (the committed records may not have it yet)."""
    monkeypatch.setattr(quality, "convergence_budget", lambda ladder: B)


def test_the_layouts_are_bench_qualitys_converged_rows_and_everything_is_in_the_space():
    from fairseq import options

    from fairseq_plugins.models.architecture import Architecture

    space = SearchSpace.from_file(run.SPACE)
    for name in run.LAYOUTS:
        row = run.CONVERGED_ROWS[name]
        args = options.parse_args_and_arch(options.get_training_parser(), [
            "data-bin", "--task", "translation", "--arch", row.arch, *run.CONVERGED.model_args, *row.args])
        assert Architecture.from_args(args) == run.layout_architecture(name), name
        space.check_contains(run.layout_architecture(name), name)
    family = run.scaled_family()
    assert len(family) == len(run.SCALED_WIDTHS) * len(run.SCALED_DEPTHS) - 1  # (the softmax layout is the reference)
    for name, architecture in family.items():
        space.check_contains(architecture, name)
        assert {layer.attention_kind for layer in architecture.encoder_layers + architecture.decoder_layers} == {"softmax"}
    # the bracket: widths and depths below and above the layouts'
    assert min(space.encoder.embed_dim) < 128 < max(space.encoder.embed_dim)


def test_the_baselines_are_the_scaled_ones_nearest_each_target_on_a_log_scale():
    relative = {"a": 0.5, "b": 0.7, "c": 1.2, "d": 1.45, "e": 2.6, "f": 3.5}
    # 0.6: a (log 0.182) and b (0.154) -> b; 1.3: c (0.08) beats d (0.109); 2.0: e (0.262) beats f (0.56)
    assert run.select_baselines(relative, (0.6, 1.3, 2.0)) == ["b", "c", "e"]
    # each picked once: both targets near "c" take c, then the next nearest
    assert run.select_baselines({"c": 1.0, "d": 1.5, "x": 0.2}, (1.0, 1.0)) == ["c", "d"]
    with pytest.raises(SystemExit, match="2 scaled baselines measured, fewer than the 3 targets"):
        run.select_baselines({"a": 1.0, "b": 2.0}, (0.5, 1.0, 2.0))


P = run.Point


def test_the_front_verdict_on_known_numbers():
    baselines = [P("small", 0.6, 30.0, 0.2), P("mid", 1.3, 33.0, 0.3), P("big", 2.0, 34.0, 0.2),
                 P("dominated", 1.5, 32.0, 0.3)]  # slower and worse than mid: not on the front
    assert [p.name for p in run.pareto_front(baselines)] == ["small", "mid", "big"]
    # met: as good at every front baseline, better by more than the spread at one (mid: +0.5 > 0.3)
    found = [P("f1", 0.55, 30.1, 0.2), P("f2", 1.2, 33.5, 0.2), P("f3", 1.9, 34.0, 0.1)]
    verdict = run.front_verdict(found, baselines)
    assert verdict["met"] and [(c["baseline"], c["found"]) for c in verdict["comparisons"]] == [
        ("small", "f1"), ("mid", "f2"), ("big", "f3")]
    assert verdict["comparisons"][1]["margin"] == pytest.approx(0.5) and verdict["comparisons"][1]["spread"] == 0.3
    assert run.verdict_text(verdict).startswith("**met**: the found front dominates")
    # without f3, the best found row as fast as big is f2 (a faster one counts at a slower baseline): 0.5 short
    verdict = run.front_verdict(found[:2], baselines)
    assert not verdict["met"] and verdict["shortfall"]["deficit"] == pytest.approx(0.5)
    assert "lack up to 0.50 BLEU" in run.verdict_text(verdict) and "big: f2 -0.50 BLEU (spread 0.20)" in run.verdict_text(verdict)
    # as good everywhere, beyond the spread nowhere: missed by the smallest gap (mid: 0.3 - 0.1)
    verdict = run.front_verdict([P("f1", 0.6, 30.0, 0.1), P("f2", 1.3, 33.1, 0.1), P("f3", 2.0, 34.0, 0.1)], baselines)
    assert not verdict["met"] and verdict["shortfall"] == {"unreached": [], "deficit": None, "spread_gap": pytest.approx(0.2)}
    # nothing as fast as the smallest baseline
    verdict = run.front_verdict([P("f2", 1.2, 40.0, 0.1)], baselines)
    assert not verdict["met"] and verdict["shortfall"]["unreached"] == ["small"]
    assert "no found architecture is as fast as small" in run.verdict_text(verdict)
    assert run.verdict_text(run.front_verdict([], [])).startswith("not decided yet")


def tiny_architecture(width: int, encoder: int, decoder: int, kind: str = "softmax") -> dict:
    return run.uniform_architecture(width, 256, ((kind,) * encoder, (kind,) * decoder, (kind,) * decoder)).to_dict()


def fake_budgets(results, baselines=("scaled_d96_2+1", "scaled_d192_2+1", "scaled_d256_3+3")):
    (results / "budgets.json").write_text(json.dumps({
        "targets": [0.6, 1.3, 2.0], "baselines": list(baselines),
        "relative_latency": dict(zip(baselines, (0.55, 1.25, 2.1))), "gflops": {"of": baselines[1], "limit": 0.2},
        "family": {name: {"relative_latency": 1.0, "latency_ms": 10.0, "gflops": 0.1} for name in baselines}}))


def fake_evolve(results, names, architectures):
    """Finished searches as ``search evolve`` leaves them: best.json, then result.json holding ``best``."""
    for name, architecture in zip(names, architectures):
        folder = results / f"evolve_{name}"
        folder.mkdir()
        (folder / "best.json").write_text(json.dumps(architecture))
        (folder / "result.json").write_text(json.dumps({"best": {"architecture": architecture}, "confirmed_latency": None}))


def test_the_plan_follows_the_finished_stages(tmp_path, monkeypatch):
    """A tiny config (the CPU space, 12 ranked architectures, a pool of 60): the layouts first, the baselines
    after budgets, the found rows after evolve, then the spread ones up to RANKED distinct architectures."""
    monkeypatch.setattr(run, "SPACE", os.path.join(os.path.dirname(run.SPACE), "multi30k_cpu.yaml"))
    scale = dataclasses.replace(run.REAL, ranked=12, spread_pool=60)
    results = tmp_path
    plan = run.plan(str(results))
    assert [(r.name, r.group, r.seeds) for r in plan] == [
        ("softmax", "layout", (1, 2, 3)), ("cosformer_encoder", "layout", (1, 2, 3)), ("mformer", "layout", (1, 2, 3)),
        ("cosformer_everywhere", "layout", (1,))]
    fake_budgets(results)
    assert [r.name for r in run.plan(str(results))][4:] == ["scaled_d96_2+1", "scaled_d192_2+1", "scaled_d256_3+3"]
    # the spread architectures wait for every budget's search
    fake_evolve(results, ["latency_scaled_d96_2+1", "latency_scaled_d192_2+1"],
                [tiny_architecture(96, 2, 1, "cosformer"), tiny_architecture(96, 2, 2, "cosformer")])
    assert run.choose_spread(str(results), scale) == [] and not (results / "spread.jsonl").exists()
    fake_evolve(results, ["latency_scaled_d256_3+3", "flops_scaled_d192_2+1"],
                [tiny_architecture(128, 3, 2, "cosformer"), tiny_architecture(96, 3, 1, "cosformer")])
    spread = run.choose_spread(str(results), scale)
    plan = run.plan(str(results))
    assert len(run.distinct(plan)) >= 12 and len(spread) == 12 - 11
    assert [(r.name, r.group, r.seeds) for r in plan[7:]] == [
        ("found_latency_scaled_d96_2+1", "found", (1, 2, 3)), ("found_latency_scaled_d192_2+1", "found", (1, 2, 3)),
        ("found_latency_scaled_d256_3+3", "found", (1, 2, 3)), ("found_flops_scaled_d192_2+1", "found_flops", (1,)),
        ("spread_00", "spread", (1,))]
    # 3 layouts x 3 + cosFormer everywhere + 3 baselines x 3 + 3 found x 3 + FLOPs found + spread
    assert run.training_count(plan) == 9 + 1 + 9 + 9 + 1 + 1
    assert run.choose_spread(str(results), dataclasses.replace(scale, ranked=20)) == spread  # chosen once


def test_a_budget_searched_without_an_architecture_gets_no_row_and_the_run_goes_on(tmp_path, monkeypatch):
    """evolve at a latency budget whose fittest final candidates all measured above it, or that no architecture
    drawn met (the CLI's one-line error, its result.json without ``best``): logged, the next budgets searched,
    no found row for it, the spread rows chosen (the budget counts as searched), and the report says so; any
    other failure stops the run."""
    monkeypatch.setattr(run, "SPACE", os.path.join(os.path.dirname(run.SPACE), "multi30k_cpu.yaml"))
    scale = dataclasses.replace(run.REAL, ranked=12, spread_pool=60)
    results = tmp_path
    fake_budgets(results)
    names = [name for name, _ in run.searches(str(results), run.read_budgets(str(results)))]
    assert names == ["latency_scaled_d96_2+1", "latency_scaled_d192_2+1", "latency_scaled_d256_3+3", "flops_scaled_d192_2+1"]
    # a latency budget is the latency of its baseline (--latency-of its architecture file, in the results)
    for name, options in run.searches(str(results), run.read_budgets(str(results)))[:3]:
        assert options[0] == "--latency-of" and options[2] == "--latency-predictor"
        baseline = name[len("latency_"):]
        assert json.loads(open(options[1]).read()) == run.scaled_family()[baseline].to_dict()
        assert options[1] == str(results / "architectures" / f"{baseline}.json")
    candidate = {"architecture": tiny_architecture(96, 2, 1), "latency_ms": 9.0, "relative_latency": 0.61,
                 "within_budget": False}
    unsatisfiable = ("--latency-of architectures/scaled_d192_2+1.json (predicted relative_latency 1.3): only 0 of 6000 "
                     "random architectures satisfy the constraints; loosen them")
    searched, done = [], []

    def fake_search_cli(ctx, command, *argv):
        output = argv[argv.index("--output") + 1]
        name = os.path.basename(output)[len("evolve_"):]
        finished = os.path.join(output, "result.json")
        if os.path.isfile(finished) and json.load(open(finished))["best"]:  # (as evolve_command finds it: same inputs)
            done.append(name)
            return {"best": json.load(open(finished))["best"], "done_before": True}
        searched.append(name)
        os.makedirs(output, exist_ok=True)
        result = {"settings": {"population": 6, "parents": 2, "mutations": 2, "mutation_probability": 0.3, "crossovers": 2,
                               "iterations": 2, "patience": None},
                  "constraints": {"--latency-of": 0.55}, "stopped_early": False, "history": [{"evaluated": 6}],
                  "latency_of": {"architecture": tiny_architecture(96, 2, 1), "predicted_relative_latency": 0.55}}
        if name == "latency_scaled_d96_2+1":  # (as evolve_command leaves it, then its one-line error)
            with open(os.path.join(output, "result.json"), "w") as f:
                json.dump({**result, "best": None, "confirmed_latency": [candidate],
                           "latency_of": {**result["latency_of"], "relative_latency": 0.6}}, f)
            raise quality.CommandFailed("`python -m fairseq_plugins.search evolve ...`", 2, "INFO | searching\nerror: "
                                        "--latency-of architectures/scaled_d96_2+1.json (predicted relative_latency 0.55): "
                                        "none of the 1 fittest candidates measured within the budget (measured: 0.61; "
                                        "architectures/scaled_d96_2+1.json measured 0.6 beside them)")
        if name == "latency_scaled_d192_2+1":
            with open(os.path.join(output, "result.json"), "w") as f:
                json.dump({**result, "history": [], "best": None, "confirmed_latency": None, "unsatisfiable": unsatisfiable}, f)
            raise quality.CommandFailed("`python -m fairseq_plugins.search evolve ...`", 2, f"error: {unsatisfiable}")
        architecture = tiny_architecture(96, 2, 1 + names.index(name) % 3, "cosformer")
        with open(os.path.join(output, "best.json"), "w") as f:
            json.dump(architecture, f)
        with open(os.path.join(output, "result.json"), "w") as f:
            json.dump({**result, "best": {"architecture": architecture, "fitness": 1.0, "gflops": 0.01, "mparams": 1.0},
                       "confirmed_latency": None}, f)
        return {"best": {"architecture": architecture}}

    monkeypatch.setattr(run, "search_cli", fake_search_cli)
    checkpoint = finished_supernet(results, tmp_path / "supernet.pt")
    run.evolve(None, str(results), str(checkpoint), run.read_budgets(str(results)))
    assert searched == names
    assert run.missed(str(results), "latency_scaled_d96_2+1")["confirmed_latency"] == [candidate]
    assert run.missed(str(results), "latency_scaled_d192_2+1")["unsatisfiable"] == unsatisfiable
    assert run.missed(str(results), "latency_scaled_d256_3+3") is None
    found = run.evolved(str(results), run.read_budgets(str(results)))
    assert found["found_latency_scaled_d96_2+1"] is None and found["found_latency_scaled_d192_2+1"] is None
    assert run.choose_spread(str(results), scale)  # (the budgets were searched: the spread rows do not wait for them)
    planned = [row.name for row in run.plan(str(results))]
    assert "found_latency_scaled_d96_2+1" not in planned and "found_latency_scaled_d192_2+1" not in planned
    assert "found_latency_scaled_d256_3+3" in planned
    lines = run.evolution_lines(str(results))
    (line,) = [line for line in lines if line.startswith("  * latency_scaled_d96_2+1")]
    assert line.startswith("  * latency_scaled_d96_2+1 (as fast as the baseline: predicted 0.550x the reference, "
                           "measured 0.600x beside the final candidates): 1 iteration")
    assert ("**no architecture**: none of the 1 fittest final candidates measured within the budget (measured: 0.61; the "
            "baseline beside them: 0.6)") in line
    (line,) = [line for line in lines if line.startswith("  * latency_scaled_d192_2+1")]
    assert line.endswith(f": predicted 0.550x the reference): **no architecture**: {unsatisfiable} (the same at "
                         "every search of these inputs: loosen it); no found row at this budget.")
    # searched again by the next run; the others the command finds done (it compares their inputs)
    searched.clear()
    run.evolve(None, str(results), str(checkpoint), run.read_budgets(str(results)))
    assert searched == ["latency_scaled_d96_2+1", "latency_scaled_d192_2+1"]
    assert done == ["latency_scaled_d256_3+3", "flops_scaled_d192_2+1"]

    # another failure (no fresh result.json without best) stops the run
    def broken(ctx, command, *argv):
        raise quality.CommandFailed("`python -m fairseq_plugins.search evolve ...`", 2, "error: --ranker ranker.txt: no such model")

    monkeypatch.setattr(run, "search_cli", broken)
    with pytest.raises(SystemExit, match="no such model"):
        run.evolve(None, str(results), str(checkpoint), run.read_budgets(str(results)))

    # nor is anything but the command's one-line error taken for a missed budget, even right after it wrote a
    # fresh result.json without best: a crash (a traceback, exit 1) or this process's SIGTERM (an int code)
    def stopped(code):
        def search(ctx, command, *argv):
            output = argv[argv.index("--output") + 1]
            with open(os.path.join(output, "result.json"), "w") as f:
                json.dump({"best": None, "confirmed_latency": [candidate], "stamp": repr(code)}, f)
            raise code
        return search

    crash = quality.CommandFailed("`python -m fairseq_plugins.search evolve ...`", 1, "Traceback (most recent call last):\n"
                                  "  File \"x.py\", line 1\nTypeError: unsupported format string passed to NoneType.__format__")
    for code in (crash, SystemExit(128 + 15)):
        monkeypatch.setattr(run, "search_cli", stopped(code))
        with pytest.raises(SystemExit) as stop:
            run.evolve(None, str(results), str(checkpoint), run.read_budgets(str(results)))
        assert stop.value is code


def test_evolve_names_the_checkouts_files_relative_to_it_and_the_report_every_baseline_measurement(tmp_path, monkeypatch):
    """The evolve stage's search runs in the checkout with paths relative to it (result.json's train_command
    and latency_of.path are committed with the results: they must not name this machine's folders); the report
    gives a --latency-of budget's baseline as predicted and as measured in each group beside the candidates,
    in the unit its predictor predicts."""
    checkout = tmp_path / "checkout"
    results = checkout / "docs" / "records" / "data" / "search"
    results.mkdir(parents=True)
    monkeypatch.setattr(quality, "REPO", str(checkout))
    monkeypatch.setattr(run, "SPACE", str(checkout / "search_spaces" / "space.yaml"))
    fake_budgets(results)
    (checkout / "work_dirs").mkdir()
    checkpoint = finished_supernet(results, checkout / "work_dirs" / "supernet.pt")
    argvs = []

    def fake_search_cli(ctx, command, *argv):
        argvs.append(argv)
        output = checkout / argv[argv.index("--output") + 1]  # (the CLI runs in the checkout)
        output.mkdir()
        (output / "best.json").write_text(json.dumps(tiny_architecture(96, 2, 1)))
        (output / "result.json").write_text(json.dumps({"best": {"architecture": tiny_architecture(96, 2, 1)}}))
        return {"best": {"architecture": tiny_architecture(96, 2, 1)}}

    monkeypatch.setattr(run, "search_cli", fake_search_cli)
    run.evolve(None, str(results), str(checkpoint), run.read_budgets(str(results)))
    assert len(argvs) == 4 and all(run.finished_best(str(results), name) for name, _ in run.searches(str(results), run.read_budgets(str(results))))
    assert not [a for argv in argvs for a in argv if str(tmp_path) in a]
    assert argvs[0][argvs[0].index("--latency-of") + 1] == "docs/records/data/search/architectures/scaled_d96_2+1.json"
    assert argvs[0][argvs[0].index("--output") + 1] == "docs/records/data/search/evolve_latency_scaled_d96_2+1"

    result = {"constraints": {"--latency-of": 0.55},
              "latency_of": {"predicted_relative_latency": 0.55, "relative_latency": 0.6,
                             "measurements": [{"relative_latency": 0.6}, {"relative_latency": 0.625}]}}
    assert run.budget_text(result, "--latency-of", 0.55) == ("as fast as the baseline: predicted 0.550x the reference, "
                                                             "measured 0.600x, 0.625x beside "
                                                             "the final candidates")
    in_ms = {"constraints": {"--latency-of": 12.0}, "latency_of": {"predicted_latency_ms": 12.0, "latency_ms": 13.31}}
    assert run.latency_key(in_ms) == "latency_ms"
    assert run.budget_text(in_ms, "--latency-of", 12.0) == ("as fast as the baseline: predicted 12.0 ms, measured 13.3 ms "
                                                            "beside the final candidates")
    assert run.budget_text({"constraints": {"--flops": 0.2}}, "--flops", 0.2) == "0.2 GFLOPs"


def test_the_one_line_error_of_a_command_is_told_from_any_other_failure():
    def failed(status, tail):
        return quality.CommandFailed("`python -m fairseq_plugins.search evolve --output x`", status, tail)

    assert failed(2, "INFO | loaded\nerror: --flops 0.1: too small\n").one_line_error() == "--flops 0.1: too small"
    assert failed(1, "Traceback (most recent call last):\nerror: x").one_line_error() is None
    assert failed(2, "error: x\nKeyError: 'best'").one_line_error() is None
    assert failed(-15, "").one_line_error() is None and failed(2, "").one_line_error() is None
    # what stops a run prints the command, its status and its last lines, as a SystemExit
    assert failed(2, "error: x").code == "error: `python -m fairseq_plugins.search evolve --output x` failed (exit 2):\nerror: x"


def finished_supernet(results, checkpoint):
    """A stand-in supernet checkpoint and the supernet.json of the stage that finished it."""
    from fairseq_plugins.search.collect import file_sha256

    checkpoint.write_text("weights")
    (results / "supernet.json").write_text(json.dumps({"updates": 8, "checkpoint_sha256": file_sha256(str(checkpoint))}))
    return checkpoint


def test_the_later_stages_read_only_the_supernet_that_finished(tmp_path):
    checkpoint = tmp_path / "checkpoint_last.pt"
    checkpoint.write_text("weights of update 25")  # a supernet still training (or stopped by a session's end)
    with pytest.raises(SystemExit, match=r"checkpoint_last.pt: no finished supernet \(.*supernet.json is written when "
                                         r"it finishes\): run the supernet stage$"):
        run.require_finished_supernet(str(checkpoint), str(tmp_path))
    finished_supernet(tmp_path, checkpoint)
    assert run.require_finished_supernet(str(checkpoint), str(tmp_path)) == str(checkpoint)
    checkpoint.write_text("weights of a later update")  # trained on after supernet.json was written
    with pytest.raises(SystemExit, match=r"checkpoint_last.pt is not the supernet .*supernet.json records"):
        run.require_finished_supernet(str(checkpoint), str(tmp_path))


def test_a_search_stopped_between_best_json_and_result_json_is_searched_again(tmp_path, monkeypatch):
    """``search evolve`` writes best.json, then result.json: a best.json beside no result.json, or beside the
    result.json of an earlier search that found none within the budget, is no finished search: no found row,
    and the next run of the stage searches the budget again."""
    fake_budgets(tmp_path)
    budgets = run.read_budgets(str(tmp_path))
    names = [name for name, _ in run.searches(str(tmp_path), budgets)]
    fake_evolve(tmp_path, names[1:], [tiny_architecture(96, 2, 1 + i, "cosformer") for i in range(3)])
    folder = tmp_path / f"evolve_{names[0]}"
    folder.mkdir()
    (folder / "best.json").write_text(json.dumps(tiny_architecture(96, 2, 1, "cosformer")))
    searched = []
    monkeypatch.setattr(run, "search_cli", lambda ctx, command, *argv: searched.append(argv[argv.index("--output") + 1]) or {})
    checkpoint = finished_supernet(tmp_path, tmp_path / "supernet.pt")
    for stale in (None, {"best": None, "confirmed_latency": [{"relative_latency": 0.61, "within_budget": False}]}):
        if stale is not None:
            (folder / "result.json").write_text(json.dumps(stale))
        assert run.evolved(str(tmp_path), budgets)[f"found_{names[0]}"] is None
        assert f"found_{names[0]}" not in [row.name for row in run.plan(str(tmp_path))]
        searched.clear()
        run.evolve(None, str(tmp_path), str(checkpoint), budgets)
        # (every budget goes to the command, which finds the finished ones done; the stopped one it searches)
        assert searched == [str(tmp_path / f"evolve_{name}") for name in names]


def test_quick_changes_only_sizes_and_needs_no_convergence_budget(tmp_path, monkeypatch):
    """--quick: one seed for every row, the latency protocol's options at its minimum, B from bench-quality's quick
    settings even where the convergence budget is not measured."""
    from benchmarks import convergence

    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "convergence"))
    assert run.convergence_budget(quick=True) == int(quality.SUITES["multi30k_converged"].quick_env["MAX_UPDATE"])
    fake_budgets(tmp_path)
    assert {row.seeds for row in run.plan(str(tmp_path), run.QUICK)} == {(1,)}
    assert {row.seeds for row in run.plan(str(tmp_path))} == {(1,), (1, 2, 3)}
    options = run.QUICK.latency_options()
    assert options[:6] == ["--source-length", "8", "--target-length", "8", "--beam", "2"] and "--processes" in options
    assert run.REAL.latency_options() == ["--source-length", "30", "--target-length", "30", "--beam", "5", "--threads", "1"]
    LatencySettings(**run.QUICK.latency).check()


def test_the_full_plan_counts_about_forty_trainings(tmp_path, monkeypatch):
    fake_budgets(tmp_path)
    fake_evolve(tmp_path, ["latency_scaled_d96_2+1", "latency_scaled_d192_2+1", "latency_scaled_d256_3+3",
                           "flops_scaled_d192_2+1"],
                [tiny_architecture(96, 2, 1, "cosformer"), tiny_architecture(96, 2, 2, "cosformer"),
                 tiny_architecture(128, 3, 2, "cosformer"), tiny_architecture(96, 3, 1, "cosformer")])
    run.choose_spread(str(tmp_path), dataclasses.replace(run.REAL, spread_pool=200))
    plan = run.plan(str(tmp_path))
    assert len(run.distinct(plan)) == run.RANKED == 20
    assert run.training_count(plan) == 10 + 9 + 9 + 1 + 9  # 38


def test_training_resumes_per_row_and_seed_through_bench_qualitys_run_row(tmp_path, monkeypatch, budget):
    """Seed by seed; a (row, seed) with its record at the current settings is not trained again, one of other
    settings (another B) is; the layouts train as bench-quality's multi30k_converged rows (shared), the others
    from their committed architecture file with the same settings."""
    results = tmp_path / "results"
    results.mkdir()
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "quality"), quick=False)
    rows = [run.Planned("softmax", "layout", run.layout_architecture("softmax").to_dict(), (1, 2)),
            run.Planned("spread_00", "spread", tiny_architecture(96, 2, 1), (1,))]
    ran = []

    def fake_run_row(ctx, suite, row, force=False, seed=1):
        ran.append((suite.name, row.name, seed))
        settings = quality.row_settings(ctx, suite, row, seed)
        return {"fingerprint": quality.fingerprint(settings), "score": {"sacrebleu": 30.0 + seed}, "params": 100,
                "valid": {"loss": 4.0}, "hypotheses": ["a"], "train_command": " ".join(row.args), "updates": B}

    monkeypatch.setattr(quality, "run_row", fake_run_row)
    run.train(ctx, str(results), rows, jobs=1)
    assert ran == [("multi30k_converged", "softmax", 1), ("search_multi30k", "spread_00", 1),
                   ("multi30k_converged", "softmax", 2)]
    record = json.loads((results / "train" / "spread_00_seed1.json").read_text())
    assert record["bleu"] == 31.0 and record["group"] == "spread" and record["suite"] == "search_multi30k"
    architecture_file = results / "architectures" / "spread_00.json"
    assert json.loads(architecture_file.read_text()) == rows[1].architecture
    assert record["train_command"] == f"--architecture-file {architecture_file}"  # (relative inside the checkout)
    assert json.loads((results / "train" / "softmax_seed2.json").read_text())["bleu"] == 32.0
    ran.clear()
    run.train(ctx, str(results), rows, jobs=2)
    assert ran == []
    # another budget B: every record is stale
    monkeypatch.setattr(quality, "convergence_budget", lambda ladder: 2 * B)
    assert [(r.name, s) for r, s in run.pending(ctx, str(results), rows)] == [("softmax", 1), ("spread_00", 1), ("softmax", 2)]


def test_a_found_architecture_planned_before_shares_that_rows_trainings(tmp_path, monkeypatch, budget):
    """A search that finds its own baseline (or the softmax layout) plans no second training of the same
    architecture: the found row is trained as the earlier row (its suite, name and fingerprint), after every
    other training, and records which row it shares; the counts and the report say so."""
    results = tmp_path / "results"
    results.mkdir()
    fake_budgets(results)
    family = run.scaled_family()
    fake_evolve(results, ["latency_scaled_d96_2+1", "latency_scaled_d192_2+1"],
                [family["scaled_d96_2+1"].to_dict(), run.layout_architecture("softmax").to_dict()])
    plan = run.plan(str(results))
    by_name = {row.name: row for row in plan}
    assert by_name["found_latency_scaled_d96_2+1"].trained_as.name == "scaled_d96_2+1"
    assert by_name["found_latency_scaled_d192_2+1"].trained_as.name == "softmax"
    assert [row.name for row in plan if row.trained_as] == ["found_latency_scaled_d96_2+1", "found_latency_scaled_d192_2+1"]
    # 3 layouts x 3 + cosFormer everywhere + 3 baselines x 3; the two found rows add nothing
    assert run.training_count(plan) == 9 + 1 + 9 == len(run.distinct(plan)) * 3 - 2
    rows = [by_name[name] for name in ("softmax", "found_latency_scaled_d192_2+1", "scaled_d96_2+1",
                                       "found_latency_scaled_d96_2+1")]
    rows = [dataclasses.replace(row, seeds=(1,)) for row in rows]
    rows = run.shared(rows)
    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "quality"), quick=False)
    assert [row.name for row, _ in run.pending(ctx, str(results), rows)] == [
        "softmax", "scaled_d96_2+1", "found_latency_scaled_d192_2+1", "found_latency_scaled_d96_2+1"]
    ran = []

    def fake_run_row(ctx, suite, row, force=False, seed=1):
        ran.append((suite.name, row.name))
        return {"fingerprint": quality.fingerprint(quality.row_settings(ctx, suite, row, seed)),
                "score": {"sacrebleu": 30.0 + len(row.name)}, "params": 100, "valid": {"loss": 4.0},
                "hypotheses": ["a"], "train_command": " ".join(row.args), "updates": B}

    monkeypatch.setattr(quality, "run_row", fake_run_row)
    run.train(ctx, str(results), rows, jobs=1)
    assert ran == [("multi30k_converged", "softmax"), ("search_multi30k", "scaled_d96_2+1"),
                   ("multi30k_converged", "softmax"), ("search_multi30k", "scaled_d96_2+1")]
    assert not (results / "architectures" / "found_latency_scaled_d96_2+1.json").exists()
    found = json.loads((results / "train" / "found_latency_scaled_d96_2+1_seed1.json").read_text())
    assert (found["trained_as"], found["group"], found["bleu"]) == ("scaled_d96_2+1", "found", 30.0 + len("scaled_d96_2+1"))
    assert run.pending(ctx, str(results), rows) == []
    runs = run.load_runs(str(results))
    assert run.trainings_done(runs) == 2
    table = "\n".join(run.table_lines(None, runs, run.summary(runs, {})))
    assert "| found_latency_scaled_d96_2+1 | found (= scaled_d96_2+1) |" in table


def test_the_budget_B_must_be_measured_before_anything_runs(tmp_path, monkeypatch, capsys):
    from benchmarks import convergence

    monkeypatch.setattr(convergence, "DEFAULT_RESULTS", str(tmp_path / "convergence"))
    with pytest.raises(SystemExit, match=r"^error: the convergence budget of 'multi30k' is not measured yet .*"
                                         r"convergence.py --suite multi30k` first$"):
        run.main(["--stages", "train", "--results", str(tmp_path / "results"), "--data-root", str(tmp_path / "none")])
    with pytest.raises(SystemExit):
        run.main(["--jobs", "0"])
    assert "--jobs: expected at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--stages", "collect", "--supernet-updates", "8000"],
     "--supernet-updates: an option of the supernet stage, which --stages collect leaves out (it would be ignored)"),
    (["--stages", "train", "--loss-samples", "5"], "--loss-samples: an option of the collect stage, which --stages train leaves out"),
    (["--report-only", "--latency-samples", "5"], "--latency-samples: an option of the collect stage, which --report-only does not run"),
    (["--report-only", "--jobs", "3"], "--jobs: an option of the train stage, which --report-only does not run"),
    (["--report-only", "--device", "cuda"], "--device: an option of the supernet and train stages, which --report-only does not run"),
], ids=["supernet-updates", "loss-samples", "latency-samples-report-only", "jobs-report-only", "device-report-only"])
def test_an_option_of_a_stage_that_does_not_run_is_refused(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        run.main([*argv, "--results", str(tmp_path / "results"), "--output", str(tmp_path / "search.md")])
    assert refused.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_budgets_come_from_the_stored_measurements(tmp_path):
    """budgets.json from the protocol's records (no supernet needed once measured); the FLOPs budget is the
    middle baseline's."""
    family = run.scaled_family()
    named = {**{n: run.layout_architecture(n).to_dict() for n in run.LAYOUTS}, **{n: a.to_dict() for n, a in family.items()}}
    settings = dataclasses.asdict(LatencySettings(**run.LATENCY))  # (every record holds the protocol's settings)
    lines = [{"architecture": a, "name": n, "relative_latency": 0.4 + 0.2 * i, "latency_ms": 10.0 * (1 + i),
              "gflops": 0.1 * (1 + i), **settings} for i, (n, a) in enumerate(named.items())]
    (tmp_path / run.MEASURED).write_text("".join(json.dumps(r) + "\n" for r in lines))
    budgets = run.measure_budgets(str(tmp_path), str(tmp_path / "missing.pt"))
    relative = {r["name"]: r["relative_latency"] for r in lines}
    expected = run.select_baselines({n: relative[n] for n in family})
    assert budgets["baselines"] == expected and len(expected) == 3
    assert budgets["relative_latency"] == {n: round(relative[n], 4) for n in expected}
    assert budgets["gflops"]["of"] == expected[1]
    assert json.loads((tmp_path / "budgets.json").read_text()) == budgets
    # a new architecture needs the supernet: a one-line error naming it
    with pytest.raises(SystemExit, match="missing.pt: no finished supernet"):
        run.measured_latency(str(tmp_path), str(tmp_path / "missing.pt"), {"x": tiny_architecture(96, 2, 1)})
    # latencies of another protocol are never compared with these: a record measured in one process (before
    # --processes existed: no such key) is refused, naming the file and the setting
    old = dict(lines[0])
    del old["processes"]
    (tmp_path / run.MEASURED).write_text("".join(json.dumps(r) + "\n" for r in [old] + lines[1:]))
    with pytest.raises(SystemExit, match=f"measured_latency.jsonl: {old['name']} was measured with other latency settings "
                                         r"\(processes 1 \(now 3\)\): move the file away"):
        run.measure_budgets(str(tmp_path), str(tmp_path / "missing.pt"))


def test_architectures_not_measured_yet_are_measured_in_turn_ten_at_a_time(tmp_path, monkeypatch):
    """measured_latency: the missing architectures go to the protocol in groups of --in-turn (10), each group's
    lines appended when it is measured; the measured ones are not measured again (their settings, the
    measurement's, compare equal: the process's thread count does not replace the setting)."""
    import types

    from fairseq_plugins.search import latency, subnetworks

    checkpoint = finished_supernet(tmp_path, tmp_path / "supernet.pt")
    space = types.SimpleNamespace(check_contains=lambda architecture, name: None)
    monkeypatch.setattr(subnetworks, "load_supernet", lambda path: (types.SimpleNamespace(space=space),
                                                                    types.SimpleNamespace(target_dictionary=None), None))
    monkeypatch.setattr(subnetworks, "counted_cost", lambda *args: {"forward_flops": 2e8, "parameters": 3e6})
    groups = []

    def measure(model, dictionary, architectures, reference, settings, device="cpu"):
        groups.append(len(architectures))
        return [{"latency_ms": 10.0, "relative_latency": 0.5, "ratio_range": 0.01, **dataclasses.asdict(settings)}
                for _ in architectures]

    monkeypatch.setattr(latency, "measure_subnetworks", measure)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # (the provenance's thread count: torch's default)
    named = {f"scaled_{i}": tiny_architecture(64 + 8 * (i % 8), 1 + i % 3, 1 + i // 8) for i in range(23)}
    assert len({json.dumps(a, sort_keys=True) for a in named.values()}) == 23
    measured = run.measured_latency(str(tmp_path), str(checkpoint), named)
    assert groups == [10, 10, 3] and set(measured) == set(named)
    assert all(r["gflops"] == 0.2 and r["mparams"] == 3.0 and r["in_turn"] == 10 for r in measured.values())
    assert len((tmp_path / run.MEASURED).read_text().splitlines()) == 23
    run.measured_latency(str(tmp_path), str(checkpoint), {**named, "softmax": run.layout_architecture("softmax").to_dict()})
    assert groups == [10, 10, 3, 1]  # only the new one


def test_the_report_summarises_seeds_fronts_ranking_and_plots(tmp_path):
    results = tmp_path / "results"
    (results / "train").mkdir(parents=True)
    rows = {"softmax": ("layout", run.layout_architecture("softmax").to_dict(), [33.0, 33.4, 33.2], 1.0),
            "scaled_d96_2+1": ("scaled", tiny_architecture(96, 2, 1), [28.0, 28.2, 28.1], 0.5),
            "found_latency_scaled_d96_2+1": ("found", tiny_architecture(96, 2, 1, "cosformer"), [29.0, 29.2, 29.1], 0.45),
            "found_latency_softmax": ("found", run.layout_architecture("mformer").to_dict(), [33.6, 33.8, 33.7], 0.95)}
    measured = []
    for index, (name, (group, architecture, bleus, latency)) in enumerate(rows.items()):
        for seed, bleu in zip((1, 2, 3), bleus):
            (results / "train" / f"{name}_seed{seed}.json").write_text(json.dumps(
                {"name": name, "group": group, "seed": seed, "architecture": architecture, "bleu": bleu,
                 "params": 1000 * (index + 1), "valid": {"loss": 5.0 - index / 10}, "hypotheses": ["a"], "updates": B,
                 "train_command": "recipes/multi30k/train.sh x"}))
        measured.append({"architecture": architecture, "name": name, "relative_latency": latency,
                         "latency_ms": 100 * latency, "gflops": latency / 10})
    (results / run.MEASURED).write_text("".join(json.dumps(r) + "\n" for r in measured))
    (results / "inherited.jsonl").write_text("".join(
        json.dumps({"architecture": r["architecture"], "loss": 6.0 - i / 10}) + "\n" for i, r in enumerate(measured)))
    (results / "ranker_loss").mkdir()
    (results / "ranker_loss" / "report.json").write_text(json.dumps({"held_out_splits": {
        "splits": 10, "pairwise_better": 3, "pairwise": {"mean": 0.41, "std": 0.12}, "pointwise": {"mean": 0.45, "std": 0.1}}}))
    (results / "ranker_relative_latency").mkdir()
    (results / "ranker_relative_latency" / "report.json").write_text(json.dumps(
        {"held_out": 60, "pointwise": {"within_10_percent": 0.85, "mean_relative_error": 0.061}}))
    report = run.render(None, str(results), "python benchmarks/search_multi30k.py", str(tmp_path / "pareto.png"))
    assert "| softmax | layout | sss / sss / sss | 1,000 | 0.100 | 100.0 | 1.000 | 33.00, 33.40, 33.20 | 33.20 ± 0.20 | - |" in report
    assert "* Every from-scratch row: 4000 updates" in report and "the average of the last ten checkpoints where" in report
    # the found rows dominate: 29.1 vs 28.1 (spread 0.1) at 0.45 <= 0.5; 33.7 vs 33.2 at 0.95 <= 1.0
    assert "**Target**" in report and "**met**" in report
    assert "scaled_d96_2+1: found_latency_scaled_d96_2+1 +1.00 BLEU (spread 0.10)" in report
    assert "**Ranking** (4 distinct architectures" in report and "| parameter count alone |" in report
    assert "pairwise Kendall tau 0.410 ± 0.120, pointwise 0.450 ± 0.100 (mean ± std); the pairwise one better in 3 of 10" in report
    assert "85% of 60 held-out architectures within 10 % (one split; target 90 %: missed)" in report
    # judged over every split where the report has them
    (results / "ranker_relative_latency" / "report.json").write_text(json.dumps(
        {"held_out": 60, "pointwise": {"within_10_percent": 0.85, "mean_relative_error": 0.061},
         "held_out_splits": {"splits": 10, "pointwise": {"within_10_percent": 0.92, "mean_relative_error": 0.041,
                                                         "within_10_percent_per_split": {"mean": 0.92, "std": 0.05},
                                                         "held_out_predictions": 600}}}))
    report = run.render(None, str(results), "python benchmarks/search_multi30k.py", str(tmp_path / "pareto.png"))
    assert ("over 10 random held-out splits: 92% of 600 held-out predictions within 10 % (per split 92% ± 5%; "
            "target 90 %: met), mean relative error 4.1%.") in report
    assert (tmp_path / "pareto.png").stat().st_size > 5000


def test_a_stage_records_its_time_also_when_stopped(tmp_path):
    """The search spans sessions: a stage cut off (Ctrl-C, SIGTERM at the end of a session) keeps its time."""
    import functools
    import signal
    import subprocess
    import sys

    stages = run.Stages(str(tmp_path))
    assert run.timed(stages, "rank", lambda x: x + 1, 1) == 2
    # CPU time counts the stage's commands: one that spins until it has used 0.5 s of CPU (a real child process:
    # the test suite's sys.executable hands commands to its fork server, whose children are not this process's)
    python = os.environ.get("FAIRSEQ_PLUGINS_TEST_FRESH_PYTHON", sys.executable)
    spin = "import time\nwhile time.process_time() < 0.5: pass"
    run.timed(stages, "budgets", functools.partial(subprocess.run, [python, "-c", spin], check=True))

    def stopped():
        raise KeyboardInterrupt

    try:
        run.timed(stages, "collect", stopped)
    except KeyboardInterrupt:
        pass
    times = json.loads((tmp_path / "stages.json").read_text())
    assert [r.get("interrupted", False) for r in times["rank"]["runs"]] == [False]
    budgets = times["budgets"]["runs"][0]
    assert budgets["cpu_seconds"] >= 0.5 and times["budgets"]["cpu_seconds"] >= 0.5 and budgets["seconds"] > 0
    assert [r.get("interrupted", False) for r in times["collect"]["runs"]] == [True]
    # SIGTERM, as main() handles it
    script = ("import signal, sys, time; from benchmarks import search_multi30k as run; "
              "signal.signal(signal.SIGTERM, run.quality.stop_on_sigterm); stages = run.Stages(sys.argv[1]); "
              "run.timed(stages, 'train', lambda: (print('started', flush=True), time.sleep(60)))")
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert process.stdout.readline().strip() == "started"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert json.loads((tmp_path / "stages.json").read_text())["train"]["runs"][0]["interrupted"] is True


def test_the_report_gives_each_budget_its_best_measured_architecture(tmp_path):
    best = run.layout_architecture("mformer").to_dict()
    other = run.layout_architecture("softmax").to_dict()
    folder = tmp_path / "evolve_latency_scaled_d96_2+1"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps({
        "settings": {"population": 125, "parents": 25, "mutations": 50, "mutation_probability": 0.3, "crossovers": 50,
                     "iterations": 30, "patience": None},
        "constraints": {"--relative-latency": 0.55}, "stopped_early": False,
        "history": [{"evaluated": 125}, {"evaluated": 195}],
        "best": {"architecture": best, "fitness": 2.4, "relative_latency": 0.54, "gflops": 0.079, "mparams": 2.213},
        "confirmed_latency": [
            {"architecture": other, "latency_ms": 169.9, "stdev_ms": 15.0, "relative_latency": 1.0, "within_budget": False},
            {"architecture": best, "latency_ms": 130.3, "stdev_ms": 1.9, "relative_latency": 0.53, "within_budget": True}]}))
    (line,) = [line for line in run.evolution_lines(str(tmp_path)) if line.startswith("  * ")]
    assert line.startswith("  * latency_scaled_d96_2+1 (0.55x the reference): 2 iterations, 195 architectures evaluated")
    assert "relative latency predicted 0.540, measured 130.3 ± 1.9 ms, 0.530x the reference; 1 of 2 measured" in line
    # a FLOPs budget: counted, nothing measured
    flops = tmp_path / "evolve_flops_scaled_d192_2+1"
    flops.mkdir()
    stored = json.loads((folder / "result.json").read_text())
    (flops / "result.json").write_text(json.dumps({**stored, "constraints": {"--flops": 0.2}, "confirmed_latency": None}))
    line = [line for line in run.evolution_lines(str(tmp_path)) if line.startswith("  * flops")][0]
    assert line.startswith("  * flops_scaled_d192_2+1 (0.2 GFLOPs): ") and line.endswith("0.079 GFLOPs; FLOPs counted, not measured.")


def test_stage_durations_read_in_their_unit():
    assert [run.duration(s) for s in (11.9, 162.1, 2266.3, 8604.0)] == ["12 s", "2.7 min", "37.8 min", "2.39 h"]
    entry = {"seconds": 7300.0, "runs": [{"seconds": 100.0, "interrupted": True},
                                         {"seconds": 7200.0, "cpu_seconds": 12600.0}]}
    assert run.stage_time("train", entry) == "train 2.03 h (CPU 3.50 h in 1 of 2 runs; 1 run interrupted)"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_supernet_trains_over_the_bracket_space_with_the_converged_settings(tmp_path, budget, device, monkeypatch):
    import types

    from benchmarks import convergence

    # the rows average their checkpoints here; the supernet does not (its stages read its last checkpoint)
    averaging = {"SAVE_INTERVAL_UPDATES": "100", "KEEP_INTERVAL_UPDATES": "10", "AVERAGE_LAST": "10"}
    monkeypatch.setattr(convergence, "averaging_env", lambda results, name, budget: averaging)
    assert quality.suite_env(quality.Context(data_root="", work_dir="", quick=False), run.CONVERGED).items() >= averaging.items()

    commands = []

    class Started(Exception):
        pass

    def first_command(suite, env, command, record):
        commands.append((env, command))
        raise Started

    ctx = quality.Context(data_root=str(tmp_path), work_dir=str(tmp_path / "work"), quick=False, device=device)
    ctx = types.SimpleNamespace(**{**vars(ctx), "run": first_command})
    with pytest.raises(Started):
        run.train_supernet(ctx, str(tmp_path), run.SUPERNET_FACTOR * B)
    ((env, command),) = commands
    assert command == ["recipes/multi30k/supernet.sh", "--no-epoch-checkpoints"] and env["SEARCH_SPACE"] == run.SPACE
    assert env["MAX_UPDATE"] == str(2 * B) and env["DROPOUT"] == quality.CONVERGED_MULTI30K_ENV["DROPOUT"] == "0.3"
    assert "GEN_EXTRA_ARGS" not in env and env["NUM_GPUS"] == ("1" if device == "cuda" else "0")
    # the converged settings but the peak learning rate (the supernet's own), and a checkpoint every few updates
    assert env["LR"] == run.SUPERNET_LR == "2e-3" != quality.CONVERGED_MULTI30K_ENV["LR"]
    assert env["WARMUP"] == quality.CONVERGED_MULTI30K_ENV["WARMUP"]
    assert (env["SAVE_INTERVAL_UPDATES"], env["KEEP_INTERVAL_UPDATES"]) == ("25", "1") and "AVERAGE_LAST" not in env
    # fairseq's cosine schedule divides by the updates after the warm-up: none is a one-line error, not a crash
    with pytest.raises(SystemExit, match="^error: --supernet-updates 400: expected more than the 400 warm-up updates"):
        run.train_supernet(ctx, str(tmp_path), 400)
    # the started run's settings are kept beside its checkpoints: a rerun with others is refused, not resumed
    (tmp_path / "work" / "checkpoints" / "supernet" / "checkpoint_last.pt").write_bytes(b"weights")
    with pytest.raises(SystemExit, match=r"holds a supernet started with other settings \(MAX_UPDATE differ\)"):
        run.train_supernet(ctx, str(tmp_path), 4 * B)
    with pytest.raises(Started):  # the same settings resume
        run.train_supernet(ctx, str(tmp_path), run.SUPERNET_FACTOR * B)
    # ... and from the command line, before any long work (the data, the committed-revision check)
    def long_work(*args):
        raise AssertionError("started long work")

    monkeypatch.setattr(run, "prepare", long_work)
    monkeypatch.setattr(run, "require_committed", long_work)
    with pytest.raises(SystemExit, match="^error: --supernet-updates 400: expected more than the 400 warm-up updates"):
        run.main(["--stages", "supernet", "--supernet-updates", "400", "--device", device, "--results", str(tmp_path / "r"),
                  "--work-dir", str(tmp_path / "work")])


def _tiny_multi30k(root):
    """Generated stand-ins for Multi30k's raw files (train, val, test_2016_flickr): a word-for-word code between
    German-like and English-like words, which a few updates begin to learn."""
    import random

    words = {"Hund": "dog", "Katze": "cat", "Kind": "child", "Frau": "woman", "Mann": "man", "Vogel": "bird",
             "sieht": "sees", "mag": "likes", "ruft": "calls", "den": "the", "einen": "a", "heute": "today",
             "Garten": "garden", "Straße": "street"}
    rng = random.Random(0)
    raw = root / "multi30k"
    raw.mkdir(parents=True)
    for name, size in (("train", 800), ("val", 40), ("test_2016_flickr", 40)):
        pairs = [[rng.choice(list(words)) for _ in range(rng.randint(3, 8))] for _ in range(size)]
        (raw / f"{name}.de").write_text("".join(" ".join(p) + " .\n" for p in pairs))
        (raw / f"{name}.en").write_text("".join(" ".join(words[w] for w in p) + " .\n" for p in pairs))


def test_quick_run_runs_every_stage_for_real_and_resumes(tmp_path):
    """``--quick`` end to end on generated data, every stage for real (recipes, search CLIs, latency protocol,
    bench-quality's rows): a supernet checkpoint, both collections, the rankers, the budgets, an evolution per
    budget, the inherited losses, every planned row trained once (one seed) and scored, every planned
    architecture measured, and the report with its tables and Pareto plot; nothing written into docs/records/
    (the records lie under the work folder); a second run trains nothing again (but a found row that a latency
    budget left without an architecture may confirm when searched again); without --output the report is
    printed. The stage times of the run (records/stages.json, supernet.json) are printed (pytest -s)."""
    import subprocess
    import sys
    import time

    _tiny_multi30k(tmp_path / "data")
    work, report = tmp_path / "work", tmp_path / "docs" / "search.md"
    records = work / "records"
    command = [sys.executable, os.path.join(run.REPO, "benchmarks", "search_multi30k.py"), "--quick", "--jobs", "2",
               "--data-root", str(tmp_path / "data"), "--work-dir", str(work), "--output", str(report)]
    started = time.time()

    def written_into_docs_records() -> list:
        return [os.path.join(folder, name) for folder, _, names in os.walk(os.path.join(run.REPO, "docs", "records"))
                for name in names if os.path.getmtime(os.path.join(folder, name)) >= started]

    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-5000:]
    assert "convergence budget B: 6 updates (--quick" in first.stderr

    supernet = json.loads((records / "supernet.json").read_text())
    assert supernet["updates"] == run.QUICK.supernet_updates and supernet["space"] == "search_spaces/multi30k_bracket.yaml"
    assert (work / "checkpoints" / "supernet" / "checkpoint_last.pt").is_file()
    for what, samples in (("loss", run.QUICK.loss_samples), ("latency", run.QUICK.latency_samples)):
        collected = [json.loads(line) for line in (records / f"{what}.jsonl").read_text().splitlines()]
        assert collected[0]["record"] == "collection" and len(collected) == 1 + samples
    assert collected[0]["latency"]["rounds"] == 2 and collected[0]["latency"]["source_length"] == 8
    for target in run.RANKED_FROM:
        ranker = json.loads((records / f"ranker_{target}" / "report.json").read_text())
        assert ranker["target"] == target and ranker["held_out_splits"]["splits"] > 1
    budgets = run.read_budgets(str(records))
    assert len(budgets["baselines"]) == 3 and budgets["gflops"]["of"] == budgets["baselines"][1]
    for name, _ in run.searches(str(records), budgets):  # (a latency budget may end without an architecture)
        result = json.loads((records / f"evolve_{name}" / "result.json").read_text())
        assert (result["best"] is None) == (run.missed(str(records), name) is not None)
        assert (records / f"evolve_{name}" / "best.json").is_file() == (result["best"] is not None)
    confirmed = {name for name, _ in run.searches(str(records), budgets) if (records / f"evolve_{name}" / "best.json").is_file()}
    assert f"flops_{budgets['gflops']['of']}" in confirmed  # (counted, not measured, and the middle baseline's: met)

    plan = run.plan(str(records), run.QUICK)
    distinct = run.distinct(plan)
    assert {row.group for row in plan} >= {"layout", "scaled", "found_flops", "spread"}
    assert len(distinct) >= run.QUICK.ranked and all(row.seeds == (1,) for row in plan)
    inherited = {run.architecture_key(r["architecture"]) for r in run.read_jsonl(str(records / "inherited.jsonl"))}
    measured = {run.architecture_key(r["architecture"]) for r in run.read_jsonl(str(records / run.MEASURED))}
    assert {run.architecture_key(row.architecture) for row in distinct} <= inherited & measured
    trained = sorted(path.name for path in (records / "train").iterdir())
    assert trained == sorted(f"{row.name}_seed1.json" for row in plan)
    for row in plan:
        record = json.loads((records / "train" / f"{row.name}_seed1.json").read_text())
        assert record["updates"] == 6 and record["architecture"] == row.architecture and 0 <= record["bleu"] <= 100
        assert record["result"].startswith(str(work))  # (bench-quality's row result, in the work folder)

    text = report.read_text()
    assert run.QUICK_NOTE in text and "**Target**" in text and "**Ranking**" in text and "* Evolution (population 6" in text
    for row in plan:  # (a found architecture may be one planned before: the seeded baseline)
        assert f"| {row.name} | {row.group}{f' (= {row.trained_as.name})' if row.trained_as else ''} |" in text
    assert (tmp_path / "docs" / "search_pareto.png").stat().st_size > 5000
    # nothing of the run in the checkout's records (its results, bench-quality's rows) or default work folders
    assert not written_into_docs_records()
    assert not os.path.exists(os.path.join(run.REPO, "work_dirs", "search_multi30k_quick"))

    times = json.loads((records / "stages.json").read_text())
    print("stage times of the quick run (wall s): supernet", supernet["process_seconds"],
          {stage: round(entry["seconds"], 1) for stage, entry in times.items()},
          "; budgets without an architecture:", sorted({name for name, _ in run.searches(str(records), budgets)} - confirmed))

    # the second run trains nothing again and reads every stage back; only a latency budget that ended without an
    # architecture is searched again, and a found row it may confirm now is the one thing trained, evaluated
    # inside the supernet and measured
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-5000:]
    assert "supernet: done before" in second.stderr
    for name, _ in run.searches(str(records), budgets):
        assert (f"evolve {name}: done before" in second.stderr) == (name in confirmed), name
    new = [row for row in run.plan(str(records), run.QUICK) if row.name not in {r.name for r in plan}]
    assert all(row.group == "found" for row in new)
    assert f"train: {len(new)} trainings to go" in second.stderr
    assert re.findall(r"\] train: (\S+) seed", second.stderr) == [row.name for row in new]
    assert second.stderr.count(": training (") == len(new)
    known = {run.architecture_key(row.architecture) for row in distinct}
    added = {run.architecture_key(row.architecture) for row in new} - known
    assert second.stderr.count("inherited: architecture") == len(added)
    assert len(re.findall(r"\] latency: ", second.stderr)) == len(added)
    assert sorted(path.name for path in (records / "train").iterdir()) == sorted(trained + [f"{row.name}_seed1.json" for row in new])

    # without --output the report is printed, nothing written beside the checkout's records (and without --jobs,
    # which --report-only, training nothing, refuses)
    rendering = command[:command.index("--output")]
    del rendering[rendering.index("--jobs"):rendering.index("--jobs") + 2]
    printed = subprocess.run(rendering + ["--report-only"], cwd=tmp_path, capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr[-5000:]
    assert printed.stdout.startswith(run.REPORT_BEGIN) and run.QUICK_NOTE in printed.stdout
    assert not written_into_docs_records()
