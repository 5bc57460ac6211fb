"""What the search's subcommands ``prune``, ``evolve`` and ``pareto`` run: their fitness functions and
constraints built from the command line, the confirmation of the final candidates by measurement, and the
files they write (``__main__.py`` parses the options)."""
import json
import logging
import os
import shlex
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..files import TextFileError, atomic_output, read_text, write_json
from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .evolution import Candidate, Constraint, EvolutionSettings, SearchError, Unsatisfiable, evolve, pareto
from .latency import LatencySettings, recorded_settings
from .space import SearchSpace

logger = logging.getLogger(__name__)


class Supernet:
    """A supernet checkpoint, loaded once for everything a search asks of it (costs at its dictionary sizes,
    the inherited loss, latency measurements), or none."""

    def __init__(self, checkpoint: Optional[str]):
        self.checkpoint = checkpoint
        self.model = self.task = self.state = None
        if checkpoint:
            from .subnetworks import load_supernet

            self.model, self.task, self.state = load_supernet(checkpoint)

    def require(self, option: str):
        if self.model is None:
            raise SearchError(f"{option} needs --checkpoint (the supernet)")
        return self


class Costs:
    """FLOPs and parameters as ``search cost`` counts them (with a supernet: ``subnetworks.counted_cost``, the
    dictionary-sized embeddings and output projection at its dictionaries' sizes; without one, without them)."""

    def __init__(self, supernet: Supernet, source_length: int, target_length: int):
        self.supernet, self.source_length, self.target_length = supernet, source_length, target_length

    def counted(self, architecture: Architecture) -> Dict[str, float]:
        from ..complexity import architecture_cost
        from .subnetworks import counted_cost

        if self.supernet.model is None:
            cost = architecture_cost(architecture, self.source_length, self.target_length)
            return {"gflops": cost.flops / 1e9, "mparams": cost.parameters / 1e6}
        cost = counted_cost(self.supernet.model, self.supernet.task, architecture, self.source_length, self.target_length)
        return {"gflops": cost["forward_flops"] / 1e9, "mparams": cost["parameters"] / 1e6}

    def constraint(self, name: str, option: str, limit: float) -> Constraint:
        """A bound on the counted ``gflops`` or ``mparams``."""
        return Constraint(name, option, limit, lambda architectures: [self.counted(a)[name] for a in architectures])

    @property
    def what(self) -> str:
        return ("with the embeddings and output projection at the supernet's dictionary sizes" if self.supernet.model is not None
                else "without the dictionary-sized embeddings and output projection (no --checkpoint)")


# latency budget option -> (the constraint's name, the predictor's `rank --target`)
LATENCY_BUDGETS = {"--latency-ms": ("latency_ms", "latency"), "--relative-latency": ("relative_latency", "relative_latency")}
LATENCY_OF = "--latency-of"  # the budget is an architecture's latency: its predicted value, then its measured one


@dataclass(frozen=True)
class LatencyBudget:
    """A latency budget: the constraint's name (``latency_ms`` or ``relative_latency``: what the predictor
    predicts), its bound on the predicted value and the predictor. ``of`` (``--latency-of``): the architecture
    whose latency is the budget. The bound is then the predictor's value for it: a candidate is compared with
    it through one predictor, so that the regressor's bias where the space's samples thin out (at its corners,
    where the smallest baselines sit) cancels, and the architecture itself is feasible. The final candidates
    are then measured beside it, in the same measurement, and are within the budget when no slower than it."""
    option: str
    name: str
    limit: float
    predict: Callable[[Sequence[Architecture]], Sequence[float]] = field(repr=False, compare=False)
    of: Optional[Architecture] = None
    of_path: Optional[str] = None

    def describe(self) -> str:
        """The budget as messages name it."""
        if self.of is None:
            return f"{self.option} {self.limit}"
        return f"{self.option} {self.of_path} (predicted {self.name} {self.limit:.4g})"

    def constraint(self) -> Constraint:
        return Constraint(self.name, self.option, self.limit, self.predict, None if self.of is None else self.describe())


def latency_model(path: str, space: SearchSpace, space_option: str, target: Optional[str] = None):
    """The latency regressor of ``rank --target latency`` or ``relative_latency`` (``target``: that one),
    checked to have seen every choice of ``space``."""
    from .ranking import Predictor, RankingError

    predictor = Predictor(path, "--latency-predictor")
    wanted = (target,) if target else ("latency", "relative_latency")
    if predictor.target not in wanted or predictor.is_ranker:
        raise RankingError(f"--latency-predictor {path}: expected the regressor.txt of `rank --target {' or '.join(wanted)}`, "
                           f"got a {'ranker' if predictor.is_ranker else 'regressor'} of {predictor.target}")
    predictor.check_space(space, space_option)
    return predictor


def latency_option(args) -> Optional[str]:
    """The latency budget option given (``--latency-ms``, ``--relative-latency`` or ``--latency-of``), or
    None; two are refused."""
    given = [option for option, (name, _) in LATENCY_BUDGETS.items() if getattr(args, name) is not None]
    given += [LATENCY_OF] if getattr(args, "latency_of", None) is not None else []
    if len(given) > 1:
        raise SearchError(f"{' and '.join(given)}: give one latency budget (the predictor predicts one latency)")
    return given[0] if given else None


def latency_of_architecture(args, space: SearchSpace) -> Optional[Architecture]:
    """``--latency-of``'s architecture, read and checked to be of ``space`` (one-line errors naming the file;
    read before the supernet is loaded), or None without it."""
    path = getattr(args, "latency_of", None)
    if path is None:
        return None
    try:
        of = Architecture.from_json(read_text(path))
    except (TextFileError, AttentionConfigError) as error:
        raise SearchError(f"{LATENCY_OF} {path}: {error} (expected an architecture of --space in JSON, as "
                          "best.json or --architecture-file hold it)") from None
    space.check_contains(of, f"{LATENCY_OF} {path}")
    return of


def latency_budget(args, space: SearchSpace, of: Optional[Architecture] = None) -> Optional[LatencyBudget]:
    """The latency budget of ``args``, its predictor loaded, or None (``of``: ``latency_of_architecture``'s)."""
    option = latency_option(args)
    if option is None:
        return None
    target = LATENCY_BUDGETS[option][1] if option in LATENCY_BUDGETS else None  # (--latency-of: either)
    if not args.latency_predictor:
        raise SearchError(f"{option} needs --latency-predictor (the regressor.txt of `rank --target "
                          f"{target or 'latency or relative_latency'}`)")
    predictor = latency_model(args.latency_predictor, space, f"--space {args.space}", target)
    name = "latency_ms" if predictor.target == "latency" else "relative_latency"
    if option != LATENCY_OF:
        return LatencyBudget(option, name, getattr(args, name), predictor.predict)
    of = of if of is not None else latency_of_architecture(args, space)
    return LatencyBudget(option, name, float(predictor.predict([of])[0]), predictor.predict, of, args.latency_of)


def build_constraints(costs: Costs, args, space: SearchSpace,
                      of: Optional[Architecture] = None) -> Tuple[List[Constraint], Optional[LatencyBudget]]:
    """The constraints of ``args``' budgets, and the latency budget among them (None: none); ``of``:
    ``--latency-of``'s architecture, read already."""
    budget = latency_budget(args, space, of)
    constraints = [budget.constraint()] if budget is not None else []
    if args.flops is not None:
        constraints.append(costs.constraint("gflops", "--flops", args.flops))
    if args.params is not None:
        constraints.append(costs.constraint("mparams", "--params", args.params))
    fraction = getattr(args, "flops_fraction", None)
    if fraction is not None:  # a budget that needs no measurement: a share of the space's own cost
        if not 0 < fraction <= 1:
            raise SearchError(f"--flops-fraction: expected a fraction in (0, 1] of the largest architecture's FLOPs, "
                              f"got {fraction}")
        largest = costs.counted(space.extreme(largest=True))["gflops"]
        constraints.append(costs.constraint("gflops", "--flops-fraction", fraction * largest))
    for constraint in constraints:
        if constraint.limit <= 0:
            raise SearchError(f"{constraint.option}: expected a positive bound, got {constraint.limit}")
    return constraints, budget


def build_fitness(args, supernet: Supernet, space: SearchSpace):
    """Lower is better: the loss ranker's negated score, or the inherited loss inside the supernet."""
    if args.fitness == "ranker":
        from .ranking import Predictor, RankingError

        if not args.ranker:
            raise SearchError("--fitness ranker needs --ranker (the ranker.txt of `rank --target loss`)")
        predictor = Predictor(args.ranker, "--ranker")
        if predictor.target != "loss" or not predictor.is_ranker:
            raise RankingError(f"--ranker {args.ranker}: expected the ranker.txt of `rank --target loss`")
        predictor.check_space(space, f"--space {args.space}")
        return lambda architectures: [-s for s in predictor.predict(architectures)]
    from .subnetworks import InheritedLoss

    supernet.require("--fitness supernet")
    evaluator = InheritedLoss(supernet.model, supernet.task, supernet.state, args.subset)
    return lambda architectures: [evaluator.evaluate(a)["loss"] for a in architectures]


def checked_space(args, supernet: Supernet) -> SearchSpace:
    space = SearchSpace.from_file(args.space)
    if supernet.model is not None:
        space.check_within(supernet.model.space, f"--space {args.space}", f"the supernet {supernet.checkpoint}")
    return space


def confirm_latency(candidates: Sequence[Candidate], supernet: Supernet, budget: LatencyBudget,
                    settings: LatencySettings, count: int, device: str, reference: Optional[str]) -> Tuple[List[dict], List[dict]]:
    """Measure the latency of the ``count`` fittest candidates (exported from the supernet, beside the
    reference, as ``collect`` measures, ``--in-turn`` at a time): what the predicted constraint said, confirmed
    or not. With ``--latency-of``, its architecture is measured in every group, first, beside ``--in-turn`` - 1
    candidates (at least one), and a candidate is within the budget when measured no slower than it in that
    group (a candidate that is that architecture is not measured again: its measurement, within); returns also
    those measurements of the ``--latency-of`` architecture, one per group (none without it)."""
    from .latency import batches, groups, measure_subnetworks
    from .subnetworks import reference_architecture

    model, task = supernet.model, supernet.task
    reference_model = reference_architecture(reference, model)
    fittest = list(candidates)[:count]
    fields = ("latency_ms", "relative_latency", "reference_ms", "ratio_range", "process_range", "stdev_ms")

    def measure(architectures: List[Architecture]) -> List[dict]:
        return [{k: measured[k] for k in fields} for measured in measure_subnetworks(
            model, task.target_dictionary, architectures, reference_model, settings, device)]

    def confirmed(candidate: Candidate, measured: dict, bound: float) -> dict:
        return {"architecture": candidate.architecture.to_dict(), "fitness": candidate.fitness,
                f"predicted_{budget.name}": candidate.costs.get(budget.name), **measured,
                "within_budget": measured[budget.name] <= bound}

    if budget.of is None:
        measured = [m for group in groups(fittest, settings) for m in measure([c.architecture for c in group])]
        return [confirmed(c, m, budget.limit) for c, m in zip(fittest, measured)], []
    others = [c for c in fittest if c.architecture != budget.of]
    beside, measured_in = [], {}
    for group in list(batches(others, max(1, settings.in_turn - 1))) or [[]]:
        of_measured, *measured = measure([budget.of] + [c.architecture for c in group])
        beside.append(of_measured)
        measured_in.update({c.architecture: (m, of_measured) for c, m in zip(group, measured)})
    results = []
    for candidate in fittest:
        measured, of_measured = measured_in.get(candidate.architecture, (beside[0], beside[0]))
        results.append({**confirmed(candidate, measured, of_measured[budget.name]),
                        f"baseline_{budget.name}": of_measured[budget.name]})
    return results, beside


def training_command(supernet: Supernet, architecture_path: str, max_update: Optional[int] = None) -> str:
    """The fairseq-train command that trains ``architecture_path`` from scratch with the supernet's data, task,
    criterion and optimisation options (those the supernet was trained with), for ``max_update`` updates
    (None: the supernet's), or a template without one."""
    if supernet.model is None:
        return (f"fairseq-train DATA_BIN --user-dir fairseq_plugins --arch mixed_transformer --architecture-file "
                f"{architecture_path} ...   # with your data set's training options (recipes/<dataset>/train.sh)")
    from .subnetworks import standalone_task_config

    cfg = supernet.state["cfg"]
    task = standalone_task_config(cfg["task"])
    model = cfg["model"]
    language_model = task["_name"] == "language_modeling"
    args = ["fairseq-train", task["data"], "--user-dir", "fairseq_plugins", "--task", task["_name"],
            "--arch", "mixed_transformer_lm" if language_model else "mixed_transformer", "--architecture-file", architecture_path]
    if not language_model:
        args += ["--source-lang", task["source_lang"], "--target-lang", task["target_lang"]]
    else:
        args += ["--tokens-per-sample", str(task["tokens_per_sample"])]
    for flag in ("share_all_embeddings", "share_decoder_input_output_embed"):
        if getattr(model, flag, False):
            args.append("--" + flag.replace("_", "-"))
    args += ["--dropout", str(getattr(model, "dropout", 0.1))]
    criterion = cfg["criterion"]
    args += ["--criterion", criterion["_name"]]
    if "label_smoothing" in criterion:
        args += ["--label-smoothing", str(criterion["label_smoothing"])]
    optimizer, scheduler, optimization, dataset = cfg["optimizer"], cfg["lr_scheduler"], cfg["optimization"], cfg["dataset"]
    args += ["--optimizer", optimizer["_name"]]
    if "adam_betas" in optimizer:
        args += ["--adam-betas", str(optimizer["adam_betas"])]
    if optimizer.get("weight_decay"):
        args += ["--weight-decay", str(optimizer["weight_decay"])]
    args += ["--lr", str(optimization["lr"][0]), "--lr-scheduler", scheduler["_name"]]
    if scheduler.get("warmup_updates"):
        args += ["--warmup-updates", str(scheduler["warmup_updates"])]
    if optimization.get("clip_norm"):
        args += ["--clip-norm", str(optimization["clip_norm"])]
    for option, value in (("--max-tokens", dataset.get("max_tokens")), ("--batch-size", dataset.get("batch_size"))):
        if value is not None:
            args += [option, str(value)]
    args += ["--max-update", str(max_update if max_update is not None else optimization["max_update"]),
             "--update-freq", str(optimization["update_freq"][0]),
             "--seed", str(cfg["common"]["seed"])]
    return " ".join(shlex.quote(a) for a in args)


def candidate_dict(candidate: Candidate) -> dict:
    return {"architecture": candidate.architecture.to_dict(), "fitness": candidate.fitness, **candidate.costs}


def file_digest(path: Optional[str], option: str) -> Optional[str]:
    """The SHA-256 of ``option``'s file (None: not given); an unreadable one is a one-line error naming it."""
    from .collect import file_sha256

    try:
        return file_sha256(path) if path else None
    except OSError as error:
        raise SearchError(f"{option} {path}: cannot read it ({error.strerror or error})") from None


def search_inputs(args, space: SearchSpace, settings: EvolutionSettings, latency: LatencySettings,
                  of: Optional[Architecture] = None) -> dict:
    """Everything a search's result depends on (an output folder holding a result of other inputs is refused);
    the measurement's settings (latency, --confirm, --device, --reference) only with a latency budget (the
    confirming measurement's: nothing else measures); ``of``: ``--latency-of``'s architecture (itself, not its
    file's path or bytes)."""
    measured = latency_option(args) is not None
    inputs = {"space": space.to_dict(), "fitness": args.fitness,
              "ranker_sha256": file_digest(args.ranker if args.fitness == "ranker" else None, "--ranker"),
              "latency_predictor_sha256": file_digest(args.latency_predictor if latency_option(args) else None,
                                                      "--latency-predictor"),
              "latency_of": of.to_dict() if of is not None else None,
              "checkpoint_sha256": file_digest(args.checkpoint, "--checkpoint"), "latency_ms": args.latency_ms, "flops": args.flops,
              "flops_fraction": getattr(args, "flops_fraction", None),
              "relative_latency": args.relative_latency,
              "reference_sha256": file_digest(args.reference if measured else None, "--reference"),
              "params": args.params, "settings": asdict(settings), "confirm": args.confirm if measured else None,
              "device": args.device if measured else None, "subset": args.subset if args.fitness == "supernet" else None}
    if measured:
        inputs["latency"] = asdict(latency)
    return inputs


def stored_inputs(done: dict) -> dict:
    """The inputs of a finished search's result.json as this version writes them (older latency settings: the
    settings added since at the values they were measured with; a search without a latency budget, which
    measured nothing, written when its measurement's options were still accepted and recorded: without them)."""
    inputs = dict(done.get("inputs", {}))
    if "latency" in inputs:
        inputs["latency"] = recorded_settings(inputs["latency"])
    if all(inputs.get(budget) is None for budget in ("latency_ms", "relative_latency", "latency_of")):
        inputs.update(confirm=None, device=None, reference_sha256=None)
    return inputs


def evolution_progress(verbose: bool):
    """What ``evolve`` reports after every iteration (``--verbose``: the history entry, logged)."""
    return (lambda entry: logger.info("evolve: %s", json.dumps(entry))) if verbose else None


def evolve_command(args) -> dict:
    """Run (or find done) the evolution of ``args`` (``evolve``'s options); the files: best.json and
    train_command.sh, then result.json, written last (a folder whose result.json holds ``best`` is a finished
    search; one without ``best`` ended without an architecture, and is searched again)."""
    settings = EvolutionSettings(population=args.population, parents=args.parents, mutations=args.mutations,
                                 crossovers=args.crossovers, mutation_probability=args.mutation_probability,
                                 iterations=args.iterations, patience=args.patience, seed=args.seed)
    settings.check()
    train_max_update = getattr(args, "train_max_update", None)
    if train_max_update is not None and train_max_update < 1:
        raise SearchError(f"--train-max-update: expected a positive number of updates, got {train_max_update}")
    latency = LatencySettings.from_args(args)
    latency.check()
    option = latency_option(args)
    if option is not None:
        if not args.checkpoint:
            raise SearchError(f"{option}: the final candidates are confirmed by measurement: give --checkpoint (the supernet)")
        if args.confirm < 1:
            raise SearchError(f"--confirm: expected at least 1 candidate to measure, got {args.confirm}")
    space = SearchSpace.from_file(args.space)
    of = latency_of_architecture(args, space)
    inputs = search_inputs(args, space, settings, latency, of)
    result_path = os.path.join(args.output, "result.json")
    if os.path.isfile(result_path):
        with open(result_path, encoding="utf-8") as f:
            done = json.load(f)
        stored = stored_inputs(done)
        differing = sorted(k for k in inputs if stored.get(k) != inputs[k])
        if done.get("best") and not differing:
            return {"best": done["best"], "iterations": len(done["history"]), "done_before": True,
                    "files": {name: os.path.join(args.output, name) for name in ("best.json", "result.json", "train_command.sh")}}
        if done.get("best"):
            raise SearchError(f"--output {args.output} holds a search with other inputs ({', '.join(differing)}): give "
                              "another --output, or remove it to search again")
        logger.warning("%s: an earlier search here found no architecture within the budget%s; searching again "
                       "(its result is replaced)", result_path, f" (with other inputs: {', '.join(differing)})" if differing else "")
    supernet = Supernet(args.checkpoint)
    space = checked_space(args, supernet)
    costs = Costs(supernet, args.source_length, args.target_length)
    constraints, budget = build_constraints(costs, args, space, of)
    fitness = build_fitness(args, supernet, space)
    state_path = os.path.join(args.output, "state.json")
    searched = {"inputs": inputs, "fitness": args.fitness, "constraints": {c.option: c.limit for c in constraints},
                "counted": costs.what, "confirmed_latency": None,
                "latency_settings": asdict(latency) if budget is not None else None,
                # (--latency-of: the architecture, its predicted latency (the constraint's bound) and, once the
                # final candidates are measured beside it, its measurement)
                "latency_of": None if budget is None or budget.of is None else
                {"architecture": budget.of.to_dict(), "path": budget.of_path, f"predicted_{budget.name}": budget.limit}}
    try:
        # (--latency-of: the baseline meets its own budget, so it starts in the first population, and a budget at
        # the space's corner, which few random draws meet, is searched from it)
        found = evolve(space, fitness, constraints, settings, progress=evolution_progress(args.verbose),
                       state=state_path, inputs=inputs, seeds=[of] if of is not None else ())
    except Unsatisfiable as error:
        # (the initial draw: recorded as a search without an architecture, as one whose candidates all measured
        # above the budget: a pipeline of many budgets reads why, and a run with the same output searches again)
        os.makedirs(args.output, exist_ok=True)
        write_json(result_path, {**searched, "history": [], "stopped_early": False, "settings": asdict(settings),
                                 "population": [], "best": None, "unsatisfiable": str(error)})
        raise
    result = {**searched, "history": found["history"], "stopped_early": found["stopped_early"],
              "settings": found["settings"], "population": [candidate_dict(c) for c in found["population"][:10]]}
    best = found["best"]
    os.makedirs(args.output, exist_ok=True)
    if budget is not None:
        confirmed, beside = confirm_latency(found["population"], supernet, budget, latency, args.confirm, args.device,
                                            args.reference)
        result["confirmed_latency"] = confirmed
        if beside:  # (its first measurement; every one, one per group of candidates measured beside it)
            result["latency_of"] = {**result["latency_of"], **beside[0], "measurements": beside}
        within = [c for c in confirmed if c["within_budget"]]
        if not within:
            write_json(result_path, {**result, "best": None})  # (what was found and measured: kept, not a finished search)
            if os.path.isfile(state_path):
                os.remove(state_path)
            measured = ", ".join(format(c[budget.name], ".3g") for c in confirmed)
            bound = "" if not beside else (f"; {budget.of_path} measured "
                                           f"{', '.join(format(m[budget.name], '.3g') for m in beside)} beside them")
            raise SearchError(f"{budget.describe()}: none of the {len(confirmed)} fittest candidates measured within the "
                              f"budget (measured: {measured}{bound}; see {result_path}): the latency predictor is off on "
                              "this machine; collect more latency data, loosen the budget or raise --confirm")
        chosen = Architecture.from_dict(within[0]["architecture"])
        best = next(c for c in found["population"] if c.architecture == chosen)
    result["best"] = {**candidate_dict(best), **costs.counted(best.architecture)}
    best_path = os.path.join(args.output, "best.json")
    with atomic_output(best_path) as f:
        f.write(best.architecture.to_json() + "\n")
    result["train_command"] = command = training_command(supernet, best_path, train_max_update)
    budget = (f"--max-update {train_max_update} (--train-max-update)" if train_max_update is not None
              else "the supernet's --max-update (evolve --train-max-update sets the training budget)")
    with atomic_output(os.path.join(args.output, "train_command.sh")) as f:
        f.write("#!/usr/bin/env bash\n# trains the best architecture from scratch with the supernet's training options "
                f"and {budget}\n" + command + ' "$@"\n')
    write_json(result_path, result)
    if os.path.isfile(state_path):  # (finished: result.json holds the search)
        os.remove(state_path)
    return {"best": result["best"], "iterations": len(found["history"]),
            "files": {name: os.path.join(args.output, name) for name in ("best.json", "result.json", "train_command.sh")}}


def pareto_command(args) -> dict:
    of = latency_of_architecture(args, SearchSpace.from_file(args.space))
    supernet = Supernet(args.checkpoint)
    space = checked_space(args, supernet)
    costs = Costs(supernet, args.source_length, args.target_length)
    constraints, _ = build_constraints(costs, args, space, of)
    if args.objective == "latency":
        if not args.latency_predictor:
            raise SearchError("--objective latency needs --latency-predictor (the regressor.txt of `rank --target latency` "
                              "or `relative_latency`)")
        predictor = latency_model(args.latency_predictor, space, f"--space {args.space}")
        name = LATENCY_BUDGETS["--latency-ms" if predictor.target == "latency" else "--relative-latency"][0]
        objective = Constraint(name, "--objective latency", float("inf"), predictor.predict)
    else:
        objective = costs.constraint({"flops": "gflops", "params": "mparams"}[args.objective], f"--objective {args.objective}",
                                     float("inf"))
    fitness = build_fitness(args, supernet, space)
    inputs = {"fitness": args.fitness, "ranker_sha256": file_digest(args.ranker if args.fitness == "ranker" else None, "--ranker"),
              "latency_predictor_sha256": file_digest(args.latency_predictor, "--latency-predictor"),
              "checkpoint_sha256": file_digest(args.checkpoint, "--checkpoint"),
              "subset": args.subset if args.fitness == "supernet" else None, "lengths": [args.source_length, args.target_length]}
    front = pareto(space, fitness, objective, constraints, trials=args.trials, population=args.population, seed=args.seed,
                   storage=args.output + ".optuna.sqlite", inputs=inputs, seeds=[of] if of is not None else ())
    if not front:
        raise SearchError("no feasible architecture was found: loosen the constraints or run more --trials")
    records = [candidate_dict(c) for c in front]
    with atomic_output(args.output) as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
    return {"pareto_set": len(records), "objective": objective.name, "output": args.output,
            "counted": costs.what, "points": [{"fitness": r["fitness"], objective.name: r[objective.name]} for r in records]}


def prune_command(args) -> dict:
    from .prune import prune, to_yaml

    space = SearchSpace.from_file(args.space)
    try:
        importance = json.loads(read_text(args.importance))
    except (TextFileError, json.JSONDecodeError) as error:
        raise SearchError(f"--importance {args.importance}: cannot read it ({error})") from None
    for key in ("fields", "best_architecture", "target"):
        if key not in importance:
            raise SearchError(f"--importance {args.importance}: no {key!r} (expected the importance.json `rank` writes)")
    if importance["target"] != "loss":
        raise SearchError(f"--importance {args.importance}: the importances of a {importance['target']} ranker; prune with the "
                          "loss ranker's (`rank --target loss`), whose best architecture is the best by quality")
    best = Architecture.from_dict(importance["best_architecture"])
    pruned, summary = prune(space, sorted(importance["fields"].items(), key=lambda x: -x[1]), best, args.keep)
    comment = (f"{args.space} pruned by `python -m fairseq_plugins.search prune --keep {args.keep}` with {args.importance}:\n"
               f"free: {', '.join(summary['kept']) or 'none'}; fixed: "
               + ", ".join(f"{k} = {v}" for k, v in summary["fixed"].items()) + "\n"
               f"{summary['size_before']:,} architectures before, {summary['size_after']:,} after")
    with atomic_output(args.output) as f:
        f.write(to_yaml(pruned, comment))
    return {**summary, "output": args.output}
