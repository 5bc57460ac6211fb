"""What the search's subcommands ``prune``, ``evolve`` and ``pareto`` run: their fitness functions and
constraints built from the command line, the confirmation of the final candidates by measurement, and the
files they write (``__main__.py`` parses the options)."""
import json
import os
import shlex
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from ..files import atomic_output, write_json
from ..models.architecture import Architecture
from .evolution import Candidate, Constraint, EvolutionSettings, SearchError, evolve, pareto
from .latency import LatencySettings
from .space import SearchSpace


class Costs:
    """FLOPs and parameters as ``search cost`` counts them (``complexity.architecture_cost``; with a supernet
    checkpoint, the dictionary-sized embeddings and output projection at its dictionaries' sizes, else
    without them), and the latency a ``rank --target latency`` regressor predicts."""

    def __init__(self, checkpoint: Optional[str], source_length: int, target_length: int):
        self.source_length, self.target_length = source_length, target_length
        self.model = self.task = None
        if checkpoint:
            from .subnetworks import load_supernet

            self.model, self.task, _ = load_supernet(checkpoint)

    def counted(self, architecture: Architecture) -> Dict[str, float]:
        from ..complexity import architecture_cost

        cost = architecture_cost(architecture, self.source_length, self.target_length)
        if self.model is None:
            return {"gflops": cost.flops / 1e9, "mparams": cost.parameters / 1e6}
        from ..cli.model_costs import model_cost

        counted = model_cost(self.model.subnetwork_args(architecture), self.source_length, self.target_length)
        vocab = len(self.task.target_dictionary)
        extra = 0
        if not self.model.LANGUAGE_MODEL and not getattr(self.model.args, "share_all_embeddings", False):
            extra = (len(self.task.source_dictionary) - vocab) * architecture.encoder_embed_dim
        return {"gflops": counted.total_flops(vocab) / 1e9, "mparams": (counted.total_parameters(vocab) + extra) / 1e6}

    @property
    def what(self) -> str:
        return ("with the embeddings and output projection at the supernet's dictionary sizes" if self.model is not None
                else "without the dictionary-sized embeddings and output projection (no --checkpoint)")


def build_constraints(costs: Costs, latency_ms: Optional[float], gflops: Optional[float], mparams: Optional[float],
                      latency_predictor: Optional[str]) -> List[Constraint]:
    constraints = []
    if latency_ms is not None:
        if not latency_predictor:
            raise SearchError("--latency-ms needs --latency-predictor (the regressor.txt of `rank --target latency`)")
        predictor = latency_model(latency_predictor)
        constraints.append(Constraint("latency_ms", "--latency-ms", latency_ms, predictor.predict))
    if gflops is not None:
        constraints.append(Constraint("gflops", "--flops", gflops, lambda archs: [costs.counted(a)["gflops"] for a in archs]))
    if mparams is not None:
        constraints.append(Constraint("mparams", "--params", mparams, lambda archs: [costs.counted(a)["mparams"] for a in archs]))
    for constraint in constraints:
        if constraint.limit <= 0:
            raise SearchError(f"{constraint.option}: expected a positive bound, got {constraint.limit}")
    return constraints


def latency_model(path: str):
    from .ranking import Predictor, RankingError

    predictor = Predictor(path)
    if predictor.target != "latency" or predictor.is_ranker:
        raise RankingError(f"--latency-predictor {path}: expected the regressor.txt of `rank --target latency` (milliseconds), "
                           f"got a {'ranker' if predictor.is_ranker else 'regressor'} of {predictor.target}")
    return predictor


def build_fitness(kind: str, ranker: Optional[str], checkpoint: Optional[str], subset: str, space: SearchSpace):
    """Lower is better: the loss ranker's negated score, or the inherited loss inside the supernet."""
    if kind == "ranker":
        from .ranking import Predictor, RankingError

        if not ranker:
            raise SearchError("--fitness ranker needs --ranker (the ranker.txt of `rank --target loss`)")
        predictor = Predictor(ranker)
        if predictor.target != "loss" or not predictor.is_ranker:
            raise RankingError(f"--ranker {ranker}: expected the ranker.txt of `rank --target loss`")
        return lambda architectures: [-s for s in predictor.predict(architectures)]
    if kind == "supernet":
        if not checkpoint:
            raise SearchError("--fitness supernet needs --checkpoint (the supernet whose inherited loss is the fitness)")
        from .subnetworks import InheritedLoss, load_supernet

        model, task, state = load_supernet(checkpoint)
        evaluator = InheritedLoss(model, task, state, subset)
        return lambda architectures: [evaluator.evaluate(a)["loss"] for a in architectures]
    raise SearchError(f"--fitness: expected ranker or supernet, got {kind!r}")


def confirm_latency(candidates: Sequence[Candidate], checkpoint: Optional[str], limit: Optional[float],
                    settings: LatencySettings, count: int, device: str) -> Optional[List[dict]]:
    """Measure the latency of the ``count`` fittest candidates (exported from the supernet, as ``collect``
    measures): what the predicted constraint said, confirmed or not."""
    if limit is None:
        return None
    if not checkpoint:
        raise SearchError("--latency-ms: the final candidates are confirmed by measurement: give --checkpoint (the supernet)")
    from .latency import measure_latency
    from .subnetworks import load_supernet

    model, task, _ = load_supernet(checkpoint)
    confirmed = []
    for candidate in list(candidates)[:count]:
        measured = measure_latency(model.subnetwork(candidate.architecture), task.target_dictionary, settings, device=device)
        confirmed.append({"architecture": candidate.architecture.to_dict(), "fitness": candidate.fitness,
                          "predicted_latency_ms": candidate.costs.get("latency_ms"), "latency_ms": measured["latency_ms"],
                          "stdev_ms": measured["stdev_ms"], "within_budget": measured["latency_ms"] <= limit})
    return confirmed


def training_command(checkpoint: Optional[str], architecture_path: str) -> str:
    """The fairseq-train command that trains ``architecture_path`` from scratch with the supernet's data, task,
    criterion and optimisation options (those the supernet was trained with), or a template without one."""
    if not checkpoint:
        return (f"fairseq-train DATA_BIN --user-dir fairseq_plugins --arch mixed_transformer --architecture-file "
                f"{architecture_path} ...   # with your data set's training options (recipes/<dataset>/train.sh)")
    from fairseq import checkpoint_utils

    from .subnetworks import standalone_task_config

    cfg = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"]
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
    optimizer, scheduler, optimization = cfg["optimizer"], cfg["lr_scheduler"], cfg["optimization"]
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
    args += ["--max-tokens", str(cfg["dataset"]["max_tokens"]), "--max-update", str(optimization["max_update"]),
             "--update-freq", str(optimization["update_freq"][0]), "--seed", str(cfg["common"]["seed"])]
    return " ".join(shlex.quote(a) for a in args)


def write_result(output_dir: str, best: Candidate, result: dict, checkpoint: Optional[str]) -> Dict[str, str]:
    """``best.json`` (the architecture, for --architecture-file), ``result.json`` (everything) and
    ``train_command.sh`` (the command that trains it from scratch)."""
    os.makedirs(output_dir, exist_ok=True)
    best_path = os.path.join(output_dir, "best.json")
    with atomic_output(best_path) as f:
        f.write(best.architecture.to_json() + "\n")
    command = training_command(checkpoint, best_path)
    with atomic_output(os.path.join(output_dir, "train_command.sh")) as f:
        f.write("#!/usr/bin/env bash\n# trains the best architecture from scratch with the supernet's training options\n"
                + command + ' "$@"\n')
    result = {**result, "train_command": command}
    write_json(os.path.join(output_dir, "result.json"), result)
    return {"best": best_path, "result": os.path.join(output_dir, "result.json"),
            "train_command": os.path.join(output_dir, "train_command.sh")}


def candidate_dict(candidate: Candidate) -> dict:
    return {"architecture": candidate.architecture.to_dict(), "fitness": candidate.fitness, **candidate.costs}


def evolve_command(args) -> dict:
    space = SearchSpace.from_file(args.space)
    settings = EvolutionSettings(population=args.population, parents=args.parents, mutations=args.mutations,
                                 crossovers=args.crossovers, mutation_probability=args.mutation_probability,
                                 iterations=args.iterations, patience=args.patience, seed=args.seed)
    settings.check()
    costs = Costs(args.checkpoint, args.source_length, args.target_length)
    if costs.model is not None:
        for architecture in (space.extreme(True), space.extreme(False)):
            costs.model.space.check_contains(architecture, f"--space {args.space}: its architectures, in the supernet's space")
    constraints = build_constraints(costs, args.latency_ms, args.flops, args.params, args.latency_predictor)
    fitness = build_fitness(args.fitness, args.ranker, args.checkpoint, args.subset, space)
    found = evolve(space, fitness, constraints, settings,
                   progress=lambda h: print(json.dumps(h), flush=True) if args.verbose else None)
    best = found["best"]
    latency = LatencySettings(source_length=args.source_length, decoder_steps=args.target_length, beam=args.beam,
                              threads=args.threads)
    confirmed = confirm_latency(found["population"], args.checkpoint, args.latency_ms, latency, args.confirm, args.device)
    if confirmed is not None:
        within = [c for c in confirmed if c["within_budget"]]
        if not within:
            measured = ", ".join(format(c["latency_ms"], ".1f") for c in confirmed)
            raise SearchError(f"--latency-ms {args.latency_ms}: none of the {len(confirmed)} fittest candidates measured "
                              f"within the budget (measured: {measured} ms): "
                              "the latency predictor is off on this machine; collect more latency data or loosen the budget")
        chosen = Architecture.from_dict(within[0]["architecture"])
        best = next(c for c in found["population"] if c.architecture == chosen)
    costs_of_best = {**best.costs, **costs.counted(best.architecture)}
    result = {"fitness": args.fitness, "best": {**candidate_dict(best), **costs_of_best},
              "constraints": {c.option: c.limit for c in constraints}, "counted": costs.what,
              "history": found["history"], "stopped_early": found["stopped_early"], "settings": found["settings"],
              "confirmed_latency": confirmed, "latency_settings": asdict(latency) if confirmed is not None else None,
              "population": [candidate_dict(c) for c in found["population"][:10]]}
    files = write_result(args.output, best, result, args.checkpoint)
    return {"best": result["best"], "iterations": len(found["history"]), "files": files}


def pareto_command(args) -> dict:
    space = SearchSpace.from_file(args.space)
    costs = Costs(args.checkpoint, args.source_length, args.target_length)
    constraints = build_constraints(costs, args.latency_ms, args.flops, args.params, args.latency_predictor)
    if args.objective == "latency":
        if not args.latency_predictor:
            raise SearchError("--objective latency needs --latency-predictor (the regressor.txt of `rank --target latency`)")
        objective = Constraint("latency_ms", "--objective latency", float("inf"), latency_model(args.latency_predictor).predict)
    elif args.objective == "flops":
        objective = Constraint("gflops", "--objective flops", float("inf"), lambda archs: [costs.counted(a)["gflops"] for a in archs])
    else:
        objective = Constraint("mparams", "--objective params", float("inf"), lambda archs: [costs.counted(a)["mparams"] for a in archs])
    fitness = build_fitness(args.fitness, args.ranker, args.checkpoint, args.subset, space)
    front = pareto(space, fitness, objective, constraints, trials=args.trials, population=args.population, seed=args.seed)
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
        with open(args.importance, encoding="utf-8") as f:
            importance = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise SearchError(f"--importance {args.importance}: cannot read it ({error})") from None
    for key in ("fields", "best_architecture"):
        if key not in importance:
            raise SearchError(f"--importance {args.importance}: no {key!r} (expected the importance.json `rank` writes)")
    best = Architecture.from_dict(importance["best_architecture"])
    pruned, summary = prune(space, sorted(importance["fields"].items(), key=lambda x: -x[1]), best, args.keep)
    comment = (f"{args.space} pruned by `python -m fairseq_plugins.search prune --keep {args.keep}` with {args.importance}:\n"
               f"free: {', '.join(summary['kept']) or 'none'}; fixed: "
               + ", ".join(f"{k} = {v}" for k, v in summary["fixed"].items()) + "\n"
               f"{summary['size_before']:,} architectures before, {summary['size_after']:,} after")
    with atomic_output(args.output) as f:
        f.write(to_yaml(pruned, comment))
    return {**summary, "output": args.output}
