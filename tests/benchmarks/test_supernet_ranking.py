"""benchmarks/supernet_ranking.py (docs/records/search.md's measured run): the architectures spread over the space's
FLOPs, Kendall's tau on known orders, the supernet's validations read from a train log, and the report
rendered from stage results (the stages themselves run recipes and CLIs tested elsewhere)."""
import json
import os
import re

import pytest

from benchmarks import supernet_ranking as ranking


def test_the_architectures_are_distinct_in_the_space_and_spread_over_its_flops():
    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.complexity import architecture_cost
    from fairseq_plugins.models.architecture import Architecture
    from fairseq_plugins.search.space import SearchSpace

    space = SearchSpace.from_file(ranking.SPACE)
    picks = ranking.spread_architectures(ranking.SPACE, 6, 200, 1)
    assert picks == ranking.spread_architectures(ranking.SPACE, 6, 200, 1)  # seeded
    architectures = [Architecture.from_dict(a) for a in picks]
    assert len(set(architectures)) == 6
    for architecture in architectures:
        space.check_contains(architecture)
    flops = [architecture_cost(a, 30, 30).flops for a in architectures]
    pool = sorted(architecture_cost(a, 30, 30).flops for a in set(space.samples(200, 1)))
    assert flops == sorted(flops) and flops[0] <= pool[len(pool) // 6] and flops[-1] >= pool[-len(pool) // 6 - 1]
    with pytest.raises(SystemExit, match="fewer than 5000"):
        ranking.spread_architectures(ranking.SPACE, 5000, 10, 1)


def test_kendall_tau_on_known_orders():
    assert ranking.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40])[0] == pytest.approx(1.0)
    assert ranking.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10])[0] == pytest.approx(-1.0)
    # one swapped pair of six: (5 - 1) / 6
    assert ranking.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3])[0] == pytest.approx(4 / 6)


LOG = """2026-11-26 | INFO | fairseq_cli.train | {'_name': None}
2026-11-26 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.1 | nll_loss 8.9 | ppl 478 | wps 1 | wpb 2 | bsz 3 | num_updates 121 | smallest_loss 9.5 | smallest_nll_loss 9.3
2026-11-26 | INFO | fairseq_cli.train | {'_name': None}
2026-11-26 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.25 | nll_loss 7.0 | ppl 128 | wps 1 | wpb 2 | bsz 3 | num_updates 242 | smallest_loss 8.125 | smallest_nll_loss 8.0
"""


def test_the_supernet_validations_of_every_run_of_the_log():
    assert ranking.supernet_validations(LOG) == [
        {"update": 121, "largest_loss": 9.1, "smallest_loss": 9.5},
        {"update": 242, "largest_loss": 7.25, "smallest_loss": 8.125}]


def test_the_training_time_is_fairseqs_wall_clock_over_resumed_runs():
    # a run stopped during epoch 3 (its last progress line at 1010 s), then resumed from the checkpoint of
    # epoch 2: fairseq's clock starts again; 'done training' is printed by the last run only
    log = """2026-11-27 | INFO | fairseq_cli.train | task: SupernetTranslationTask
2026-11-27 | INFO | train | epoch 001 | loss 11.1 | num_updates 121 | train_wall 457 | wall 463
2026-11-27 | INFO | train | epoch 002 | loss 7.9 | num_updates 242 | train_wall 508 | wall 976
2026-11-27 | INFO | train_inner | epoch 003:     8 / 121 loss=6.9, num_updates=250, train_wall=30, wall=1010
2026-11-27 | INFO | fairseq_cli.train | task: SupernetTranslationTask
2026-11-27 | INFO | train_inner | epoch 003:     2 / 121 loss=6.9, num_updates=244, train_wall=7, wall=9
2026-11-27 | INFO | train | epoch 003 | loss 6.7 | num_updates 363 | train_wall 400 | wall 410
2026-11-27 | INFO | fairseq_cli.train | done training in 420.0 seconds
"""
    assert ranking.training_time(log) == {"train_seconds": 1420.0, "runs": 2}
    with pytest.raises(SystemExit, match="no training time"):
        ranking.training_time(log.splitlines()[0])


def write_results(results, architectures, inherited, scratch, runs=1):
    machine = {"git": "abc123", "cores": 2, "cpu": "cpu", "threads": "OMP_NUM_THREADS=1", "load_average": "0"}
    (results / "supernet.json").write_text(json.dumps({
        "command": "recipes/multi30k/supernet.sh", "updates": 242, "checkpoint_sha256": "ab", "params": 1234567, "train_seconds": 600.0, "runs": runs,
        "space": "search_spaces/multi30k_cpu.yaml",
        "validations": ranking.supernet_validations(LOG), **machine}))
    lines = [json.dumps({"index": i, "architecture": a}) for i, a in enumerate(architectures)]
    (results / "architectures.jsonl").write_text("\n".join(lines) + "\n")
    (results / "inherited.jsonl").write_text("".join(json.dumps({"architecture": a, "loss": l, "nll_loss": l - 0.5,
                                                                 "supernet_sha256": "ab", **machine}) + "\n"
                                                     for a, l in zip(architectures, inherited)))
    (results / "scratch.jsonl").write_text("".join(json.dumps({"architecture": a, "loss": l, "nll_loss": l - 0.5, "updates": 500,
                                                               "params": 1000 + i, "train_seconds": 60.0,
                                                               "command": "recipes/multi30k/train.sh x", **machine}) + "\n"
                                                   for i, (a, l) in enumerate(zip(architectures, scratch))))


def test_the_report_shows_both_losses_and_the_rank_correlation(tmp_path):
    architectures = ranking.spread_architectures(ranking.SPACE, 4, 100, 1)
    write_results(tmp_path, architectures, [5.0, 4.0, 3.0, 2.0], [6.0, 5.5, 4.5, 4.0])
    report = ranking.render(str(tmp_path), "python benchmarks/supernet_ranking.py")
    assert report.startswith(ranking.REPORT_BEGIN) and report.rstrip().endswith(ranking.REPORT_END)
    assert "| 242 | 7.250 | 8.125 |" in report and "242 updates in 10.0 min (fairseq's wall clock)" in report
    assert "**Kendall's tau** between the inherited and the from-scratch order over 4 architectures: **1.000**" in report
    assert "| 0 | " + ranking.describe(architectures[0]) + " | 1,000 | 5.000 | 6.000 | 4.500 | 5.500 | 60 s |" in report
    # beside the trivial orders: parameters (1000 + i, the scratch losses fall with i) rank perfectly here too
    assert "| inherited loss (the supernet) | 1.000 |" in report and "| parameter count alone | 1.000 | 1.00 to 1.00 |" in report
    assert re.search(r"\| forward FLOPs alone \| -?[01]\.\d{3} \| ", report)
    write_results(tmp_path, architectures, [5.0, 4.0, 3.0, 2.0], [6.0, 5.5, 4.5, 4.0], runs=2)
    assert "242 updates in 10.0 min (fairseq's wall clock, over 2 runs, each resuming the last one's checkpoint)" in \
        ranking.render(str(tmp_path), "python benchmarks/supernet_ranking.py")
    # a stage not finished for every architecture: no tau yet, the missing cells say so
    write_results(tmp_path, architectures, [5.0, 4.0], [6.0])
    report = ranking.render(str(tmp_path), "python benchmarks/supernet_ranking.py")
    assert "Kendall's tau: not yet (1 of 4 architectures have both losses)" in report
    assert "| 3 | " + ranking.describe(architectures[3]) + " | - | - | - | - | - | - |" in report


def test_the_report_shows_at_most_twenty_validations_evenly_spaced_with_the_last():
    rows = [{"update": 25 * (i + 1)} for i in range(320)]  # a supernet validating at every save, 25 updates apart
    shown = ranking.thinned(rows, ranking.SHOWN_VALIDATIONS)
    assert len(shown) == 20 and shown[0] == rows[0] and shown[-1] == rows[-1]
    assert len({r["update"] for r in shown}) == 20 and [r["update"] for r in shown] == sorted(r["update"] for r in shown)
    assert ranking.thinned(rows[:20], 20) == rows[:20] and ranking.thinned(rows[:3], 20) == rows[:3]


def test_stale_stage_results_are_refused(tmp_path):
    architectures = ranking.spread_architectures(ranking.SPACE, 4, 100, 1)
    write_results(tmp_path, architectures, [5.0, 4.0, 3.0, 2.0], [6.0, 5.5, 4.5, 4.0])
    with pytest.raises(SystemExit, match="holds 4 architectures of pool None, seed None, not --architectures 4 --pool 100 --seed 1"):
        ranking.choose_architectures(str(tmp_path), 4, 100, 1)
    (tmp_path / "supernet.json").write_text(json.dumps({**json.loads((tmp_path / "supernet.json").read_text()),
                                                        "checkpoint_sha256": "cd"}))
    with pytest.raises(SystemExit, match="4 losses were measured in another supernet than supernet.json's"):
        ranking.inherited_losses(ranking.Context(str(tmp_path), str(tmp_path / "work"), quick=False), str(tmp_path), architectures)


def test_a_finished_supernet_of_another_length_is_not_silently_reused(tmp_path):
    (tmp_path / "supernet.json").write_text(json.dumps({"updates": 100}))
    with pytest.raises(SystemExit, match="holds a supernet of 100 updates, not --supernet-updates 2000"):
        ranking.train_supernet(ranking.Context(str(tmp_path), str(tmp_path / "work"), quick=False), str(tmp_path), 2000)


def test_a_damaged_line_of_a_stage_result_is_a_one_line_error_naming_it(tmp_path):
    from benchmarks import search_multi30k

    path = tmp_path / "loss.jsonl"
    assert ranking.read_jsonl(str(path)) == []
    path.write_text('{"record": "collection"}\n\n{"loss": 4.2}\n')
    assert ranking.read_jsonl(str(path)) == [{"record": "collection"}, {"loss": 4.2}]
    path.write_text('{"record": "collection"}\n<<<<<<< HEAD\n{"loss": 4.2}\n')  # a merge conflict in the records
    for read in (lambda: ranking.read_jsonl(str(path)), lambda: search_multi30k.collection_lines(str(tmp_path))):
        with pytest.raises(SystemExit, match=r"^error: .*loss.jsonl:2: not valid JSON \(Expecting value\): repair it") as error:
            read()
        assert "\n" not in str(error.value)


def test_a_supernet_resumes_only_with_the_settings_it_started_with(tmp_path):
    save_dir = tmp_path / "supernet"
    data_bin = tmp_path / "a" / "data-bin"
    data_bin.mkdir(parents=True)
    (data_bin / "dict.de.txt").write_text("Hund 5\n")
    env = {"LR": "2e-3", "MAX_UPDATE": "8000", "SEARCH_SPACE": os.path.join(ranking.REPO, "search_spaces", "x.yaml"),
           "NUM_GPUS": "0", "DATA_BIN": str(data_bin), "SAVE_DIR": str(save_dir)}
    command = ["recipes/multi30k/supernet.sh", "--no-epoch-checkpoints"]
    settings = ranking.training_settings(env, command)
    assert settings == {"env": {"LR": "2e-3", "MAX_UPDATE": "8000", "SEARCH_SPACE": "search_spaces/x.yaml"},
                        "data": ranking.data_fingerprint(str(data_bin)), "command": command}
    # a start with other settings, stopped before its first checkpoint: a rerun starts again with its own, and
    # the stopped start's log is set aside (not counted as this training's time)
    ranking.check_resumed_settings(str(save_dir), ranking.training_settings({**env, "LR": "1e-3"}, command))
    (save_dir / "train.log").write_text("the 1e-3 start's log\n")
    ranking.check_resumed_settings(str(save_dir), settings)
    assert json.loads((save_dir / "settings.json").read_text()) == settings
    assert not (save_dir / "train.log").exists()
    assert (save_dir / "train.log.other_settings1").read_text() == "the 1e-3 start's log\n"
    (save_dir / "train.log").write_text("this training's log\n")
    ranking.check_resumed_settings(str(save_dir), settings)  # the same settings again: its log stays
    assert (save_dir / "train.log").read_text() == "this training's log\n"
    (save_dir / "checkpoint_last.pt").write_bytes(b"weights")
    # the same training on another device, from other folders, the same data prepared elsewhere: it resumes
    moved = tmp_path / "b" / "data-bin"
    moved.mkdir(parents=True)
    (moved / "dict.de.txt").write_text("Hund 5\n")
    ranking.check_resumed_settings(str(save_dir), ranking.training_settings(
        {**env, "NUM_GPUS": "1", "FP16": "0", "DATA_BIN": str(moved), "DATA_WORKERS": "0", "LOG_INTERVAL": "100"},
        command))
    other_data = tmp_path / "c" / "data-bin"
    other_data.mkdir(parents=True)
    (other_data / "dict.de.txt").write_text("Katze 5\n")
    others = [({**env, "LR": "5e-3"}, command, "LR"), (env, command[:1], "flags"),
              ({**env, "WARMUP": "800"}, command, "WARMUP"), ({**env, "DATA_BIN": str(other_data)}, command, "data")]
    for other_env, other_command, differ in others:
        with pytest.raises(SystemExit, match=rf"holds a supernet started with other settings \({differ} differ\): "
                                             "remove the folder to train again$"):
            ranking.check_resumed_settings(str(save_dir), ranking.training_settings(other_env, other_command))
    # settings.json of an older form (the command line as one string): a one-line error, not a traceback
    (save_dir / "settings.json").write_text(json.dumps({"command": "LR=2e-3 recipes/multi30k/supernet.sh"}))
    with pytest.raises(SystemExit, match="settings.json: not the settings of a supernet training as this revision"):
        ranking.check_resumed_settings(str(save_dir), settings)
    (save_dir / "settings.json").unlink()  # a checkpoint of a run from before the settings were kept
    with pytest.raises(SystemExit, match="checkpoint_last.pt: a supernet whose settings are not recorded"):
        ranking.check_resumed_settings(str(save_dir), settings)


@pytest.mark.parametrize("script", ["supernet_ranking", "search_multi30k"])
def test_an_unknown_stage_is_a_usage_error_naming_the_stages(script, tmp_path, capsys):
    import importlib

    module = importlib.import_module(f"benchmarks.{script}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--stages", f"{module.STAGES[0]},nope", "--results", str(tmp_path / "results"), "--report-only"])
    assert exit_info.value.code == 2
    assert f"--stages: unknown nope (stages: {', '.join(module.STAGES)})" in capsys.readouterr().err


def test_the_report_gives_the_rank_correlation_inside_each_embedding_width():
    def entry(width, inherited, scratch):
        return ({"encoder_embed_dim": width, "decoder_embed_dim": width}, {"loss": inherited, "nll_loss": inherited},
                {"loss": scratch, "nll_loss": scratch - 1})
    # the wider architectures all train better from scratch (overall tau high), but inside width 128 the
    # supernet's order is reversed: the per-width line shows it
    complete = [entry(96, 5.0, 7.0), entry(96, 4.0, 6.5), entry(96, 3.0, 6.0),
                entry(128, 1.0, 5.0), entry(128, 2.0, 4.5), entry(128, 3.5, 4.0), entry(256, 0.5, 3.0)]
    lines = ranking.width_taus(complete)
    assert lines[0].startswith("Inside one embedding width (the overall tau also counts the pairs of different widths): "
                               "d 96/96 (3 architectures): 1.000 (p = ")
    assert "d 128/128 (3 architectures): -1.000 (p = " in lines[0] and "d 256/256" not in lines[0]
    assert lines[0].index("d 96/96") < lines[0].index("d 128/128") and lines[1] == ""
    # one width only: the overall tau says it all
    assert ranking.width_taus(complete[:3]) == []


def test_bootstrap_tau_of_known_orders():
    assert ranking.bootstrap_tau([1, 2, 3, 4, 5], [2, 3, 4, 5, 6], draws=200) == pytest.approx((1.0, 1.0, 1.0))
    assert ranking.bootstrap_tau([1, 2, 3, 4, 5], [6, 5, 4, 3, 2], draws=200) == pytest.approx((-1.0, -1.0, -1.0))
    tau, low, high = ranking.bootstrap_tau([1, 2, 3, 4, 5, 6, 7, 8], [1, 3, 2, 4, 6, 5, 8, 7], draws=500)
    assert low < tau < high and -1 <= low and high <= 1


FAKE_EVALUATE = """#!{python}
# stands in for `python -m fairseq_plugins.search evaluate`: prints the first {fail_after} results (as the CLI
# does, one flushed JSON line per architecture, the given order), then dies
import json, sys
files = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--architecture"]
for n, path in enumerate(files):
    if n == {fail_after}:
        sys.exit("killed")
    with open(path) as f:
        architecture = json.load(f)
    print(json.dumps({{"architecture": architecture, "loss": 5.0 + n, "nll_loss": 4.0 + n, "tokens": 100}}), flush=True)
"""


def test_inherited_losses_keep_each_result_as_it_comes_and_resume_with_the_rest(tmp_path):
    import hashlib
    import sys

    from benchmarks.quality import CommandFailed

    architectures = ranking.spread_architectures(ranking.SPACE, 4, 100, 1)
    work = tmp_path / "work"
    checkpoint = work / "checkpoints" / "supernet" / "checkpoint_last.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"supernet")
    (tmp_path / "supernet.json").write_text(json.dumps({"checkpoint_sha256": hashlib.sha256(b"supernet").hexdigest()}))

    def context(name, script):
        fake = tmp_path / name
        fake.write_text(script)
        fake.chmod(0o755)
        return ranking.Context(str(tmp_path), str(work), quick=False, python=str(fake))

    def evaluate(fail_after):
        return context(f"python_{fail_after}", FAKE_EVALUATE.format(python=sys.executable, fail_after=fail_after))

    # the process dies after two of four: those two are kept
    with pytest.raises(CommandFailed):
        ranking.inherited_losses(evaluate(2), str(tmp_path), architectures)
    kept = ranking.read_jsonl(str(tmp_path / "inherited.jsonl"))
    assert [r["architecture"] for r in kept] == architectures[:2] and [r["loss"] for r in kept] == [5.0, 6.0]
    # the next run asks for the other two only (the fake numbers its results from 0 again)
    losses = ranking.inherited_losses(evaluate(99), str(tmp_path), architectures)
    assert [r["loss"] for r in losses] == [5.0, 6.0, 5.0, 6.0]
    assert losses[2]["command"].split().count("--architecture") == 2
    assert len(ranking.read_jsonl(str(tmp_path / "inherited.jsonl"))) == 4
    # a process printing fewer results than asked, without failing, is an error too
    (tmp_path / "inherited.jsonl").unlink()
    with pytest.raises(SystemExit, match="printed 0 results for 4 architectures"):
        ranking.inherited_losses(context("python_quiet", f"#!{sys.executable}\nprint('nothing')\n"), str(tmp_path),
                                 architectures)


def test_the_architectures_are_checked_before_the_data_is_prepared_or_the_supernet_trains(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as refused:
        ranking.main(["--architectures", "200", "--pool", "100", "--report-only", "--results", str(tmp_path),
                      "--output", str(tmp_path / "search.md")])
    assert refused.value.code == 2
    assert "--architectures 200: more than the --pool 100 samples they are chosen from" in capsys.readouterr().err
    # a stored choice of other settings: an error before anything long starts
    architectures = ranking.spread_architectures(ranking.SPACE, 4, 100, 1)
    write_results(tmp_path, architectures, [5.0, 4.0, 3.0, 2.0], [6.0, 5.5, 4.5, 4.0])
    monkeypatch.setattr(ranking, "prepare", lambda *a, **k: pytest.fail("prepared before the architectures were chosen"))
    with pytest.raises(SystemExit, match="holds 4 architectures of pool None, seed None"):
        ranking.main(["--architectures", "4", "--allow-dirty", "--results", str(tmp_path), "--work-dir", str(tmp_path / "w"),
                      "--output", str(tmp_path / "search.md")])
