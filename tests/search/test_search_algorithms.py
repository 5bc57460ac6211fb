"""The search's algorithms on synthetic data with known answers (issue 15): the rankers recover a known order
(Kendall's tau near 1 for the pairwise model), prune keeps the important fields and fixes the rest at the
best architecture's values, the evolution finds the optimum of a synthetic fitness under a constraint and
never returns an architecture that violates it, the Pareto set is feasible and non-dominated. Every
subcommand runs through ``python -m fairseq_plugins.search``'s ``main`` (what the command line runs)."""
import contextlib
import functools
import io
import itertools
import json
import logging
import random

import pytest

import fairseq_plugins  # noqa: F401
from fairseq_plugins.complexity import architecture_cost
from fairseq_plugins.search.__main__ import main
from fairseq_plugins.search.collect import HEADER, read_collection, write_collection
from fairseq_plugins.search.evolution import Constraint, EvolutionSettings, SearchError, Unsatisfiable, evolve, pareto
from fairseq_plugins.search.features import FeatureEncoder
from fairseq_plugins.search.genome import GenomeCodec
from fairseq_plugins.search.ranking import kendall_tau, pair_accuracy, ranking_groups
from fairseq_plugins.search.space import SearchSpace

SPACE = """
shared_embed_dim: true
encoder:
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 16]
  attention_heads: [2, 4]
  attention_kinds: [softmax, cosformer]
decoder:
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 16]
  attention_heads: [2, 4]
  attention_kinds: [softmax, cosformer]
  cross_attention_heads: [2]
  cross_attention_kinds: [softmax, cosformer]
  encoder_decoder_connect: [1, 2]
"""


@pytest.fixture(scope="module")
def space_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(SPACE)
    return str(path)


def run(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


def synthetic_loss(architecture):
    """A known order: cosFormer in decoder self-attention costs 1 per layer, width 16 gains 0.5, each FFN of
    16 gains 0.1 (lower is better)."""
    cosformer = sum(layer.attention_kind == "cosformer" for layer in architecture.decoder_layers)
    wide = architecture.decoder_embed_dim == 16
    ffn = sum(layer.ffn_embed_dim == 16 for layer in architecture.encoder_layers + architecture.decoder_layers)
    return 5.0 + cosformer - 0.5 * wide - 0.1 * ffn


def write_synthetic_collection(path, space, n, seed=3):
    from fairseq_plugins.search.collect import distinct_samples

    header = {"record": HEADER, "what": "loss", "space": space.to_dict(), "seed": seed, "checkpoint": "synthetic"}
    records = [{"architecture": a.to_dict(), "loss": synthetic_loss(a)} for a in distinct_samples(space, n, seed)]
    write_collection(str(path), header, records)
    return records


def test_metrics_and_groups_on_known_orders():
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == pytest.approx(1) and kendall_tau([3, 2, 1], [1, 2, 3]) == pytest.approx(-1)
    from fairseq_plugins.search.ranking import relative_errors
    errors = relative_errors([1.05, 2.5, 3.0, 3.7], [1.0, 2.0, 3.0, 4.0])  # 5 %, 25 %, 0 %, 7.5 %
    assert errors["mean_relative_error"] == pytest.approx(0.375 / 4) and errors["within_10_percent"] == pytest.approx(0.75)
    assert pair_accuracy([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(5 / 6)
    assert pair_accuracy([1, 1, 3], [1, 2, 3]) == pytest.approx(2.5 / 3)  # a predicted tie counts half
    rows, labels, sizes = ranking_groups([3.0, 1.0, 2.0, 1.0, 5.0], seed=1)
    assert sum(sizes) == len(rows) == len(labels)
    start = 0
    for size in sizes:  # inside a group, the lowest target has the highest label; equal targets, equal labels
        group = rows[start:start + size]
        for i, j in itertools.combinations(range(size), 2):
            a, b = [3.0, 1.0, 2.0, 1.0, 5.0][group[i]], [3.0, 1.0, 2.0, 1.0, 5.0][group[j]]
            assert (labels[start + i] > labels[start + j]) == (a < b) and (labels[start + i] == labels[start + j]) == (a == b)
        start += size


def test_a_line_on_one_feature_is_fitted_and_scored_on_the_same_held_out_splits():
    from fairseq_plugins.search.ranking import fit_line, held_out_comparison

    assert fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((2.0, 1.0))
    assert fit_line([4, 4, 4], [1, 2, 6]) == (0.0, 3.0)  # a constant feature predicts the mean
    rng = random.Random(0)
    features = [[float(rng.randint(1, 6)), rng.random()] for _ in range(60)]
    targets = [2 * layers + 1 for layers, _ in features]  # exactly a line on the layer count
    lines = held_out_comparison(features, targets, 0.25, 1, splits=3, names=["decoder.layers", "noise"])["lines"]
    assert set(lines) == {"decoder.layers"}  # (only the features a line is drawn on, where the space has them)
    assert lines["decoder.layers"]["within_10_percent"] == 1.0 and lines["decoder.layers"]["mean_relative_error"] < 1e-9
    assert lines["decoder.layers"]["kendall_tau"] == pytest.approx(1.0)


def test_features_have_a_fixed_length_and_name_their_space_fields(space_path):
    space = SearchSpace.from_file(space_path)
    encoder = FeatureEncoder(space)
    vectors = encoder.matrix(space.samples(20, 1))
    assert {len(v) for v in vectors} == {len(encoder.names)}
    fields = dict(encoder.field_importance({name: 1.0 for name in encoder.names}))
    assert fields["decoder.attention_kinds"] == 2 + 2  # two layer slots and two per-kind counts
    assert set(fields) == {f"{side}.{name}" for side, names in space.to_dict().items() if isinstance(names, dict)
                           for name in names}


def test_the_pairwise_ranker_recovers_a_known_order(space_path, tmp_path):
    space = SearchSpace.from_file(space_path)
    write_synthetic_collection(tmp_path / "loss.jsonl", space, 160)
    status, out = run("rank", "--data", str(tmp_path / "loss.jsonl"), "--target", "loss", "--output", str(tmp_path / "r"))
    assert status == 0
    result = json.loads(out)
    assert result["held_out"] == 32 and result["pairwise"]["kendall_tau"] > 0.85 and result["pairwise"]["pair_accuracy"] > 0.9
    assert result["pointwise"]["kendall_tau"] > 0.5  # the baseline is reported beside it
    # and both over 10 held-out splits: mean, spread, and how often the pairwise ranker wins
    splits = result["over_splits"]
    assert splits["splits"] == 10 and 0 <= splits["pairwise_better"] <= 10
    assert splits["pairwise"]["mean"] > 0.8 and splits["pairwise"]["std"] > 0 and splits["pointwise"]["mean"] > 0.5
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    taus = report["held_out_splits"]["pairwise"]["kendall_taus"]
    assert len(taus) == 10 and len(set(taus)) > 1 and report["held_out_splits"]["pairwise"]["mean"] == pytest.approx(sum(taus) / 10)
    # the regressor as a predictor, judged on every held-out prediction of every split (equal test sets:
    # the pooled share is the mean of the splits' shares)
    pointwise = splits["pointwise"]
    assert pointwise["held_out_predictions"] == 10 * 32
    assert pointwise["within_10_percent"] == pytest.approx(pointwise["within_10_percent_per_split"]["mean"])
    assert 0 < pointwise["mean_relative_error"] and pointwise["within_10_percent_per_split"]["std"] >= 0
    # beside them, the trivial predictors on the same splits: a line on each of the counted sizes and layer counts
    assert set(splits["lines"]) == {"parameters", "flops", "encoder.layers", "decoder.layers"}
    assert all(set(line) == {"mean_relative_error", "within_10_percent", "kendall_tau"} for line in splits["lines"].values())
    importance = json.loads((tmp_path / "r" / "importance.json").read_text())
    # the fields the synthetic loss depends on are the most important
    top = sorted(importance["fields"], key=lambda f: -importance["fields"][f])[:2]
    assert "decoder.attention_kinds" in top
    best = min(read_collection(str(tmp_path / "loss.jsonl"))[1], key=lambda r: r["loss"])
    assert importance["best_target"] == best["loss"]
    for name in ("ranker.txt", "regressor.txt", "report.json"):
        assert (tmp_path / "r" / name).stat().st_size > 0
    # the model says what it predicts (its objective), whatever its file is called
    import shutil

    from fairseq_plugins.search.ranking import Predictor
    from fairseq_plugins.search.space import SearchSpaceError
    shutil.copy(tmp_path / "r" / "ranker.txt", tmp_path / "r" / "model.txt")
    assert Predictor(str(tmp_path / "r" / "model.txt")).is_ranker and not Predictor(str(tmp_path / "r" / "regressor.txt")).is_ranker
    # a space with a choice the ranker never saw is refused, naming the option and the field
    wider = SearchSpace.from_yaml(SPACE.replace("attention_kinds: [softmax, cosformer]\n  cross", "attention_kinds: [softmax, cosformer, bet]\n  cross"))
    with pytest.raises(SearchSpaceError, match="--space S: decoder.attention_kinds: bet not among the choices of the space --ranker"):
        Predictor(str(tmp_path / "r" / "ranker.txt")).check_space(wider, "--space S")
    # too little data, and a file of the other target, are refused naming the file
    write_synthetic_collection(tmp_path / "few.jsonl", space, 5)
    status, _ = run("rank", "--data", str(tmp_path / "few.jsonl"), "--target", "loss")
    assert status == 2
    with pytest.raises(Exception, match="collected loss, not latency"):
        from fairseq_plugins.search.ranking import read_collected
        read_collected(str(tmp_path / "loss.jsonl"), "latency")


def test_prune_keeps_the_important_fields_and_fixes_the_rest_at_the_best_values(space_path, tmp_path):
    space = SearchSpace.from_file(space_path)
    best = space.samples(1, 7)[0]
    fields = {f: 0.0 for f, _ in FeatureEncoder(space).field_importance({})}
    fields.update({"decoder.attention_kinds": 10.0, "encoder.layers": 5.0, "decoder.ffn_embed_dim": 1.0})
    (tmp_path / "importance.json").write_text(json.dumps({"target": "loss", "fields": fields, "best_architecture": best.to_dict()}))
    status, out = run("prune", "--space", space_path, "--importance", str(tmp_path / "importance.json"), "--keep", "2",
                      "--output", str(tmp_path / "pruned.yaml"))
    assert status == 0
    summary = json.loads(out)
    assert summary["kept"] == ["decoder.attention_kinds", "encoder.layers"]
    pruned = SearchSpace.from_file(str(tmp_path / "pruned.yaml"))
    assert pruned.decoder.attention_kinds == ("softmax", "cosformer") and pruned.encoder.layers == (1, 2)
    assert pruned.encoder.embed_dim == pruned.decoder.embed_dim == (best.encoder_embed_dim,)  # shared: fixed together
    assert pruned.decoder.layers == (len(best.decoder_layers),)
    assert summary["size_before"] == space.size() > summary["size_after"] == pruned.size()
    pruned.check_contains(best)
    assert "architectures before" in (tmp_path / "pruned.yaml").read_text()
    (tmp_path / "bad.json").write_text(json.dumps({"target": "loss", "fields": {"decoder.wings": 1.0}, "best_architecture": best.to_dict()}))
    status, _ = run("prune", "--space", space_path, "--importance", str(tmp_path / "bad.json"), "--keep", "1",
                    "--output", str(tmp_path / "x.yaml"))
    assert status == 2


def test_prune_keeps_a_fixed_connect_within_every_free_encoder_depth(tmp_path):
    deep = SearchSpace.from_yaml(SPACE.replace("layers: [1, 2]\n  ffn_embed_dim: [8, 16]\n  attention_heads: [2, 4]\n  attention_kinds: [softmax, cosformer]\ndecoder",
                                               "layers: [1, 2, 3]\n  ffn_embed_dim: [8, 16]\n  attention_heads: [2, 4]\n  attention_kinds: [softmax, cosformer]\ndecoder")
                                 .replace("encoder_decoder_connect: [1, 2]", "encoder_decoder_connect: [1, 2, 3]"))
    best = next(a for a in deep.samples(200, 1) if a.decoder_layers[0].encoder_decoder_connect == 3
                and all(l.encoder_decoder_connect == 3 for l in a.decoder_layers))
    fields = {f: 0.0 for f, _ in FeatureEncoder(deep).field_importance({})}
    fields["encoder.layers"] = 1.0
    from fairseq_plugins.search.prune import prune

    pruned, summary = prune(deep, sorted(fields.items(), key=lambda x: -x[1]), best, keep=1)
    # encoder depth 1 stays possible: connect is fixed at the deepest that depth allows
    assert pruned.encoder.layers == (1, 2, 3) and summary["fixed"]["decoder.encoder_decoder_connect"] == 1


def test_prune_refuses_the_importances_of_a_latency_ranker(space_path, tmp_path):
    space = SearchSpace.from_file(space_path)
    (tmp_path / "latency.json").write_text(json.dumps({"target": "latency", "fields": {}, "best_architecture":
                                                       space.samples(1, 1)[0].to_dict()}))
    status, _ = run("prune", "--space", space_path, "--importance", str(tmp_path / "latency.json"), "--keep", "1",
                    "--output", str(tmp_path / "x.yaml"))
    assert status == 2 and not (tmp_path / "x.yaml").exists()


def all_architectures(space):
    codec = GenomeCodec(space)
    return {codec.decode(genome) for genome in itertools.product(*(gene.choices for gene in codec.genes))}


@functools.lru_cache(maxsize=None)
def gflops_of(architecture):
    return architecture_cost(architecture, 30, 30).flops / 1e9


def gflops(architectures):
    return [gflops_of(a) for a in architectures]


# A space small enough to enumerate (2,880 architectures) for the known optimum.
EVOLUTION_SPACE = SPACE.replace("attention_heads: [2, 4]", "attention_heads: [2]").replace(
    "encoder_decoder_connect: [1, 2]", "encoder_decoder_connect: [1]")


def test_evolution_finds_the_optimum_under_the_constraint_and_never_returns_a_violation(tmp_path):
    space = SearchSpace.from_yaml(EVOLUTION_SPACE)
    every = all_architectures(space)
    assert len(every) == space.size()  # the genomes decode to exactly the space
    limit = sorted(gflops(every))[len(every) // 3]  # a third of the space fits
    feasible = [a for a in every if gflops([a])[0] <= limit]
    optimum = min(synthetic_loss(a) for a in feasible)
    constraint = Constraint("gflops", "--flops", limit, gflops)
    settings = EvolutionSettings(population=50, parents=10, mutations=20, crossovers=20, iterations=15, patience=6, seed=2)
    found = evolve(space, lambda archs: [synthetic_loss(a) for a in archs], [constraint], settings)
    assert found["best"].fitness == pytest.approx(optimum)
    assert found["best"].costs["gflops"] <= limit and all(c.costs["gflops"] <= limit for c in found["population"])
    assert [h["best_fitness"] for h in found["history"]] == sorted((h["best_fitness"] for h in found["history"]), reverse=True)
    # the population keeps its size: parents and children must add up to it
    with pytest.raises(SearchError, match="--population 10 must be --parents \\+ --mutations \\+ --crossovers \\(2 \\+ 3 \\+ 3 = 8\\)"):
        EvolutionSettings(population=10, parents=2, mutations=3, crossovers=3).check()
    # a budget nothing meets is an error naming it (Unsatisfiable: no search could start under it)
    with pytest.raises(Unsatisfiable, match="--flops 1e-09: only 0 of .* random architectures satisfy the constraints"):
        evolve(space, lambda archs: [0.0] * len(archs), [Constraint("gflops", "--flops", 1e-9, gflops)],
               EvolutionSettings(population=4, parents=2, mutations=1, crossovers=1, iterations=2, seed=1))
    # (a bound that is an architecture's predicted value is named as its option names it, with the value)
    with pytest.raises(Unsatisfiable, match=r"^--latency-of b.json \(predicted gflops 1e-09\): only 0 of "):
        evolve(space, lambda archs: [0.0] * len(archs),
               [Constraint("gflops", "--latency-of", 1e-9, gflops, "--latency-of b.json (predicted gflops 1e-09)")],
               EvolutionSettings(population=4, parents=2, mutations=1, crossovers=1, iterations=2, seed=1))



def test_a_seed_that_meets_a_budget_few_draws_meet_starts_the_search(caplog):
    """--latency-of's baseline meets its own budget: it starts in the first population, and when too few random
    draws meet the budget (the space's corner), mutations of the feasible ones fill the population (HAT's
    random start alone is refused: Unsatisfiable)."""
    space = SearchSpace.from_yaml(EVOLUTION_SPACE)
    every = all_architectures(space)
    # (the deepest, widest one: every gene of its genome is used, so random draws seldom give it)
    seed_architecture = max(every, key=lambda a: (gflops([a])[0], a.to_json()))
    only_the_seed = Constraint("distance", "--latency-of", 0.0, lambda archs: [float(a != seed_architecture) for a in archs])
    # (mutation probability 0: children are copies, so the seed's budget stays satisfiable in every iteration)
    settings = EvolutionSettings(population=4, parents=2, mutations=1, crossovers=1, mutation_probability=0.0,
                                 iterations=2, seed=1)
    with pytest.raises(Unsatisfiable, match="random architectures satisfy the constraints"):
        evolve(space, lambda archs: [synthetic_loss(a) for a in archs], [only_the_seed], settings)
    found = evolve(space, lambda archs: [synthetic_loss(a) for a in archs], [only_the_seed], settings, seeds=[seed_architecture])
    assert found["best"].architecture == seed_architecture and found["best"].fitness == synthetic_loss(seed_architecture)
    assert [c.architecture for c in found["population"]] == [seed_architecture]
    # pareto: a seed is the first trial (without it, nothing is feasible)
    objective = Constraint("gflops", "--objective flops", float("inf"), gflops)
    assert pareto(space, lambda archs: [synthetic_loss(a) for a in archs], objective, [only_the_seed], trials=12,
                  population=4, seed=1) == []
    (seeded,) = pareto(space, lambda archs: [synthetic_loss(a) for a in archs], objective, [only_the_seed], trials=12,
                       population=4, seed=1, seeds=[seed_architecture])
    assert seeded.architecture == seed_architecture
    # a seed outside the budget is not put in, and the log says which bound it is over: the search starts as
    # HAT's would (here refused)
    with caplog.at_level(logging.WARNING, logger="fairseq_plugins.search.evolution"), \
            pytest.raises(Unsatisfiable, match="random architectures satisfy the constraints"):
        evolve(space, lambda archs: [0.0] * len(archs), [only_the_seed], settings,
               seeds=[min(every, key=lambda a: gflops([a])[0])])
    assert [r.getMessage() for r in caplog.records] == [
        "seed architecture 1 of 1 is not in the first population: it is over --latency-of 0 (it has 1)"]
    # under a budget many architectures meet, the seed is one of the first population, the rest drawn as HAT draws
    limit = sorted(gflops(every))[len(every) // 3]
    rare = max((a for a in every if gflops([a])[0] <= limit), key=lambda a: (len(a.decoder_layers) + len(a.encoder_layers),
                                                                            gflops([a])[0], a.to_json()))

    def first_population(seeds):
        first = []
        evolve(space, lambda archs: first.extend(archs) or [synthetic_loss(a) for a in archs],
               [Constraint("gflops", "--flops", limit, gflops)],
               EvolutionSettings(population=8, parents=2, mutations=3, crossovers=3, iterations=1, seed=3), seeds=seeds)
        return first

    assert rare not in first_population(()) and len(set(first_population(()))) == 8
    seeded = first_population([rare])
    assert rare in seeded and len(set(seeded)) == 8 and all(gflops([a])[0] <= limit for a in seeded)


def test_the_pareto_set_is_feasible_and_not_dominated(space_path):
    space = SearchSpace.from_file(space_path)
    objective = Constraint("gflops", "--objective flops", float("inf"), gflops)
    params = Constraint("mparams", "--params", 0.003, lambda archs: [architecture_cost(a, 30, 30).parameters / 1e6 for a in archs])
    front = pareto(space, lambda archs: [synthetic_loss(a) for a in archs], objective, [params], trials=120, population=20, seed=1)
    assert front and all(c.costs["mparams"] <= 0.003 for c in front)
    for a, b in itertools.permutations(front, 2):
        assert not (b.fitness <= a.fitness and b.costs["gflops"] <= a.costs["gflops"]
                    and (b.fitness, b.costs["gflops"]) != (a.fitness, a.costs["gflops"]))
    assert [c.costs["gflops"] for c in front] == sorted(c.costs["gflops"] for c in front)


class Interrupted(KeyboardInterrupt):
    """What stops a search in the tests (as Ctrl-C or the end of a session would)."""


def interrupt_after(iterations):
    def progress(entry):
        if entry["iteration"] == iterations - 1:
            raise Interrupted()
    return progress


def same_evolution(a, b):
    assert (a["best"].architecture, a["best"].fitness, a["best"].costs) == (b["best"].architecture, b["best"].fitness, b["best"].costs)
    assert [(c.architecture, c.fitness, c.costs) for c in a["population"]] == [(c.architecture, c.fitness, c.costs) for c in b["population"]]
    assert a["history"] == b["history"] and a["stopped_early"] == b["stopped_early"]


def test_an_interrupted_evolution_resumes_to_the_uninterrupted_result(tmp_path):
    space = SearchSpace.from_yaml(EVOLUTION_SPACE)
    evaluated = []

    def fitness(architectures):
        evaluated.extend(architectures)
        return [synthetic_loss(a) + 0.01 * gflops_of(a) for a in architectures]

    constraint = Constraint("gflops", "--flops", 1e9, gflops)
    settings = EvolutionSettings(population=12, parents=4, mutations=4, crossovers=4, iterations=6, seed=3)
    whole = evolve(space, fitness, [constraint], settings)
    assert len(whole["history"]) == 6 and not whole["stopped_early"]  # no early stop unless asked (HAT)
    state = str(tmp_path / "state.json")
    with pytest.raises(Interrupted):
        evolve(space, fitness, [constraint], settings, progress=interrupt_after(3), state=state, inputs={"run": 1})
    assert json.loads(open(state).read())["iteration"] == 2
    evaluated.clear()
    resumed = evolve(space, fitness, [constraint], settings, state=state, inputs={"run": 1})
    same_evolution(resumed, whole)
    # the fitness of what was evaluated before the interruption is read back, not computed again
    assert len(evaluated) == len(set(evaluated)) and len(evaluated) < whole["history"][-1]["evaluated"]
    assert resumed["history"][-1]["evaluated"] == whole["history"][-1]["evaluated"]
    # another search's state is refused, naming what differs
    with pytest.raises(SearchError, match="state.json: the state of a search with other inputs \\(evolution, run\\)"):
        evolve(space, fitness, [constraint], EvolutionSettings(population=12, parents=4, mutations=4, crossovers=4,
                                                               iterations=7, seed=3), state=state, inputs={"run": 2})
    # early stop only when asked
    flat = EvolutionSettings(population=12, parents=4, mutations=4, crossovers=4, iterations=6, seed=3, patience=2)
    stopped = evolve(space, lambda archs: [1.0] * len(archs), [constraint], flat)
    assert stopped["stopped_early"] and len(stopped["history"]) == 3
    with pytest.raises(SearchError, match="--patience: expected at least 1"):
        EvolutionSettings(patience=0).check()


def test_the_evolve_command_resumes_an_interrupted_search(space_path, tmp_path, monkeypatch):
    import fairseq_plugins.search.commands as commands

    write_synthetic_collection(tmp_path / "loss.jsonl", SearchSpace.from_file(space_path), 60)
    status, out = run("rank", "--data", str(tmp_path / "loss.jsonl"), "--target", "loss", "--output", str(tmp_path / "r"))
    assert status == 0
    search = ["evolve", "--space", space_path, "--ranker", str(tmp_path / "r" / "ranker.txt"), "--params", "0.003",
              "--population", "8", "--parents", "2", "--mutations", "3", "--crossovers", "3", "--iterations", "5"]
    status, whole = run(*search, "--output", str(tmp_path / "whole"))
    assert status == 0
    with monkeypatch.context() as patched:
        patched.setattr(commands, "evolution_progress", lambda verbose: interrupt_after(2))
        with pytest.raises(Interrupted):
            run(*search, "--output", str(tmp_path / "cut"))
    assert (tmp_path / "cut" / "state.json").is_file() and not (tmp_path / "cut" / "result.json").exists()
    status, resumed = run(*search, "--output", str(tmp_path / "cut"))
    assert status == 0 and json.loads(resumed)["best"] == json.loads(whole)["best"]
    results = [json.loads((tmp_path / name / "result.json").read_text()) for name in ("whole", "cut")]
    assert results[0]["history"] == results[1]["history"] and results[0]["population"] == results[1]["population"]
    assert not (tmp_path / "cut" / "state.json").exists()  # finished: result.json holds the search
    # the measurement's settings are not inputs of a search without a latency budget (nothing is measured, and
    # the command refuses them): a finished one whose result.json recorded them (as before --processes existed,
    # and --confirm, --device and --reference while they were still accepted there) is done
    stored = json.loads((tmp_path / "whole" / "result.json").read_text())
    assert "latency" not in stored["inputs"]
    assert [stored["inputs"][k] for k in ("confirm", "device", "reference_sha256")] == [None, None, None]
    stored["inputs"].update(latency={"rounds": 6, "repeats": 5}, confirm=1, device="cuda:0", reference_sha256="ab")
    (tmp_path / "whole" / "result.json").write_text(json.dumps(stored))
    status, again = run(*search, "--output", str(tmp_path / "whole"))
    assert status == 0 and json.loads(again)["done_before"]
    with pytest.raises(SystemExit) as refused:
        run(*search, "--output", str(tmp_path / "whole"), "--processes", "1")
    assert refused.value.code == 2
    # a latency budget's search compares its latency settings, older ones read as measured (one process, one after another)
    from fairseq_plugins.search.commands import stored_inputs
    assert stored_inputs(stored)["latency"] == {"rounds": 6, "repeats": 5, "processes": 1, "in_turn": 1}


def test_an_interrupted_pareto_study_resumes_to_the_uninterrupted_front(space_path, tmp_path):
    space = SearchSpace.from_file(space_path)
    objective = Constraint("gflops", "--objective flops", float("inf"), gflops)
    params = Constraint("mparams", "--params", 0.003, lambda archs: [architecture_cost(a, 30, 30).parameters / 1e6 for a in archs])
    calls = []

    def fitness(architectures):
        calls.extend(architectures)
        if len(calls) == 14:
            raise Interrupted()
        return [synthetic_loss(a) for a in architectures]

    def front_of(front):
        return [(c.architecture, c.fitness, c.costs) for c in front]

    whole = pareto(space, lambda archs: [synthetic_loss(a) for a in archs], objective, [params], trials=40, population=8,
                   seed=1, storage=str(tmp_path / "whole.sqlite"))
    with pytest.raises(Interrupted):
        pareto(space, fitness, objective, [params], trials=40, population=8, seed=1, storage=str(tmp_path / "cut.sqlite"))
    resumed = pareto(space, fitness, objective, [params], trials=40, population=8, seed=1, storage=str(tmp_path / "cut.sqlite"))
    assert front_of(resumed) == front_of(whole)

    import optuna
    from optuna.trial import TrialState

    def drawn(path):
        study = optuna.load_study(study_name="pareto", storage=f"sqlite:///{path}")
        return [t.params for t in study.get_trials(states=(TrialState.COMPLETE,))]

    assert drawn(tmp_path / "cut.sqlite") == drawn(tmp_path / "whole.sqlite") and len(drawn(tmp_path / "whole.sqlite")) == 40
    with pytest.raises(SearchError, match="cut.sqlite: the study of a search with other inputs \\(trials\\)"):
        pareto(space, fitness, objective, [params], trials=50, population=8, seed=1, storage=str(tmp_path / "cut.sqlite"))


def test_latency_of_measures_its_architecture_in_every_group_and_not_again_as_a_candidate(space_path, monkeypatch):
    """``evolve --latency-of``'s confirmation: the baseline is measured first in every group of ``--in-turn``
    (beside ``in_turn - 1`` candidates), each candidate is within the budget when measured no slower than the
    baseline of its own group, and a candidate that is the baseline is not measured again (within: it is the
    budget)."""
    from types import SimpleNamespace

    from fairseq_plugins.search import commands, latency, subnetworks
    from fairseq_plugins.search.evolution import Candidate
    from fairseq_plugins.search.latency import LatencySettings

    space = SearchSpace.from_file(space_path)
    architectures = space.samples(7, seed=5)
    assert len(set(architectures)) == 7
    baseline = architectures[2]  # (among the fittest)
    candidates = [Candidate(a, (), float(i), {"relative_latency": 0.5}) for i, a in enumerate(architectures)]
    # the baseline measures 1.0 in the first group and 2.0 in the second; candidate i measures 0.5 * i
    speed = {a: 0.5 * i for i, a in enumerate(architectures)}
    groups = []

    def measure(model, dictionary, measured, reference, settings, device="cpu"):
        groups.append(list(measured))
        of = float(len(groups))
        return [{"latency_ms": 1.0, "reference_ms": 1.0, "ratio_range": 0.0, "process_range": 0.0, "stdev_ms": 0.0,
                 "relative_latency": of if a == baseline else speed[a]} for a in measured]

    monkeypatch.setattr(latency, "measure_subnetworks", measure)
    monkeypatch.setattr(subnetworks, "reference_architecture", lambda path, model: "reference")
    supernet = SimpleNamespace(model=object(), task=SimpleNamespace(target_dictionary=None))
    budget = commands.LatencyBudget("--latency-of", "relative_latency", 0.5, lambda a: [0.5] * len(a), baseline, "b.json")
    confirmed, beside = commands.confirm_latency(candidates, supernet, budget, LatencySettings(in_turn=3), 6, "cpu", None)
    others = [a for a in architectures[:6] if a != baseline]
    assert groups == [[baseline, *others[:2]], [baseline, *others[2:4]], [baseline, others[4]]]
    assert [m["relative_latency"] for m in beside] == [1.0, 2.0, 3.0]
    assert [c["architecture"] for c in confirmed] == [a.to_dict() for a in architectures[:6]]
    # 0 and 0.5 beside 1.0; the baseline itself (its first measurement, 1.0); 1.5 and 2.0 beside 2.0; 2.5 beside 3.0
    assert [c["baseline_relative_latency"] for c in confirmed] == [1.0, 1.0, 1.0, 2.0, 2.0, 3.0]
    assert [c["relative_latency"] for c in confirmed] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert [c["within_budget"] for c in confirmed] == [True] * 6
    # without --latency-of: groups of --in-turn, the bound the predicted one
    groups.clear()
    plain = commands.LatencyBudget("--relative-latency", "relative_latency", 0.75, lambda a: [0.5] * len(a))
    confirmed, beside = commands.confirm_latency(candidates, supernet, plain, LatencySettings(in_turn=3), 4, "cpu", None)
    assert groups == [architectures[:3], architectures[3:4]] and beside == []
    assert [c["within_budget"] for c in confirmed] == [True, True, False, False]
