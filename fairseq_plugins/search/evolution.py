"""Hardware-aware evolutionary search (``evolve``) and the multi-objective search (``pareto``).

``evolve``: the evolution of Hardware-Aware Transformers (Wang et al. 2020, its ``evo_search``): a population
of ``population`` architectures that satisfy the constraints; each iteration keeps the ``parents`` fittest,
adds ``mutations`` children of random parents (every gene redrawn with ``mutation_probability``) and
``crossovers`` children of two random parents (every gene from either), each child kept only when it satisfies
the constraints (it is drawn again otherwise). It stops after ``iterations`` iterations (HAT's 30; only when
asked, with ``patience``, earlier: when the best fitness has not improved for ``patience`` iterations). Where
HAT departs: ``seeds`` (``--latency-of``'s baseline, which meets its own budget) start in the first
population, and when fewer random draws than the population meet a budget that a seed meets (a budget at the
space's corner), mutations of the feasible ones fill it, as an iteration's children would, instead of the
search being refused. An interrupted evolution resumes: with a ``state`` file, the search is checkpointed
atomically after every iteration (the next population, the random generator, the history and every fitness
evaluated, keyed on the search's inputs), and a rerun continues from it to the result an uninterrupted run
gives. Fitness is lower-is-better: the loss ranker's negated score (``--fitness ranker``) or the inherited
validation loss inside the supernet (``--fitness supernet``). Constraints: the predicted latency (a ``rank
--target latency`` regressor) and the counted FLOPs and parameters (``search cost``'s counts).

``pareto``: Optuna's NSGA-II over the same genomes, two objectives (the fitness and the latency, FLOPs or
parameters), the constraints as Optuna constraints (``seeds`` the first trials); the Pareto set of the
feasible trials. With a ``storage`` file (SQLite, Optuna's RDB storage) every finished trial is stored, and a
rerun continues the study to ``trials`` trials; each trial is drawn by a sampler seeded with (seed, trial
number), so that a resumed study draws what the uninterrupted one draws.
"""
import json
import logging
import os
import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .genome import Genome, GenomeCodec
from .space import SearchSpace

logger = logging.getLogger(__name__)


class SearchError(AttentionConfigError):
    """Settings the search cannot run with; the message names the option."""


class Unsatisfiable(SearchError):
    """The constraints admit none (or too few) of the architectures drawn: no search can run under them."""


@dataclass(frozen=True)
class EvolutionSettings:
    """HAT's defaults (its ``configs/*/supertransformer/space0.yml`` evolution settings), plus the stop."""

    population: int = 125
    parents: int = 25
    mutations: int = 50
    crossovers: int = 50
    mutation_probability: float = 0.3
    iterations: int = 30
    patience: Optional[int] = None  # iterations without a better best fitness before stopping early (None: never)
    seed: int = 1

    def check(self):
        for name in ("population", "parents", "iterations"):
            if getattr(self, name) < 1:
                raise SearchError(f"--{name.replace('_', '-')}: expected at least 1, got {getattr(self, name)}")
        if self.patience is not None and self.patience < 1:
            raise SearchError(f"--patience: expected at least 1 (or none: no early stop), got {self.patience}")
        for name in ("mutations", "crossovers"):
            if getattr(self, name) < 0:
                raise SearchError(f"--{name}: expected 0 or more, got {getattr(self, name)}")
        if self.parents > self.population:
            raise SearchError(f"--parents {self.parents} is more than --population {self.population}")
        if self.parents + self.mutations + self.crossovers != self.population:
            # (each generation is the parents and their children: the population would change size otherwise)
            raise SearchError(f"--population {self.population} must be --parents + --mutations + --crossovers "
                              f"({self.parents} + {self.mutations} + {self.crossovers} = "
                              f"{self.parents + self.mutations + self.crossovers})")
        if not 0 <= self.mutation_probability <= 1:
            raise SearchError(f"--mutation-probability: expected a probability, got {self.mutation_probability}")


# A cost: a name, the option that bounds it and how to compute it for architectures.
@dataclass
class Constraint:
    name: str          # "latency_ms", "gflops", "mparams"
    option: str        # the command-line option, for messages
    limit: float
    measure: Callable[[Sequence[Architecture]], List[float]]
    text: Optional[str] = None  # the bound as messages name it (None: "OPTION LIMIT")

    def describe(self) -> str:
        return self.text or f"{self.option} {self.limit:g}"

    def values(self, architectures: Sequence[Architecture]) -> List[float]:
        return self.measure(architectures)


@dataclass
class Candidate:
    architecture: Architecture
    genome: Genome
    fitness: float
    costs: Dict[str, float] = field(default_factory=dict)


class Evaluator:
    """Fitness and costs of architectures, cached (an architecture is evaluated once per search)."""

    def __init__(self, fitness: Callable[[Sequence[Architecture]], List[float]], constraints: Sequence[Constraint]):
        self.fitness_function, self.constraints = fitness, list(constraints)
        self.cache: Dict[Architecture, Tuple[float, Dict[str, float]]] = {}

    def costs(self, architectures: Sequence[Architecture]) -> List[Dict[str, float]]:
        columns = {c.name: c.values(architectures) for c in self.constraints}
        return [{name: values[i] for name, values in columns.items()} for i in range(len(architectures))]

    def exceeded(self, costs: Dict[str, float]) -> List[Constraint]:
        """The constraints ``costs`` are over."""
        return [c for c in self.constraints if costs[c.name] > c.limit]

    def feasible(self, costs: Dict[str, float]) -> bool:
        return not self.exceeded(costs)

    def evaluate(self, architectures: Sequence[Architecture]) -> List[Tuple[float, Dict[str, float]]]:
        missing = [a for a in dict.fromkeys(architectures) if a not in self.cache]
        if missing:
            for a, f, c in zip(missing, self.fitness_function(missing), self.costs(missing)):
                self.cache[a] = (float(f), c)
        return [self.cache[a] for a in architectures]


def feasible_children(make: Callable[[], Genome], count: int, codec: GenomeCodec, evaluator: Evaluator,
                      what: str, max_attempts: int, error: Optional[type] = SearchError) -> List[Genome]:
    """``count`` genomes from ``make`` whose architectures satisfy the constraints (HAT redraws until it has
    them); after ``max_attempts`` draws without enough, the constraints are too tight: ``error`` (None: the
    fewer found are returned)."""
    children, attempts = [], 0
    while len(children) < count:
        batch = [make() for _ in range(max(1, min(64, count - len(children))))]
        attempts += len(batch)
        costs = evaluator.costs([codec.decode(g) for g in batch])
        children += [g for g, c in zip(batch, costs) if evaluator.feasible(c)][:count - len(children)]
        if len(children) < count and attempts >= max_attempts:
            if error is None:
                return children
            bounds = ", ".join(c.describe() for c in evaluator.constraints)
            raise error(f"{bounds}: only {len(children)} of {attempts} {what} satisfy the constraints; loosen them")
    return children


class EvolutionState:
    """The checkpoint of an evolution after an iteration (JSON, written atomically): what the next iteration
    starts from, and the inputs it belongs to (another search's state is refused, not continued)."""

    def __init__(self, path: Optional[str], inputs: dict):
        self.path, self.inputs = path, json.loads(json.dumps(inputs))  # (as read back: tuples are lists)

    def load(self, codec: GenomeCodec, evaluator: Evaluator) -> Optional[dict]:
        if not self.path or not os.path.isfile(self.path):
            return None
        with open(self.path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("inputs") != self.inputs:
            differing = sorted(k for k in set(self.inputs) | set(stored.get("inputs", {}))
                               if stored.get("inputs", {}).get(k) != self.inputs.get(k))
            raise SearchError(f"{self.path}: the state of a search with other inputs ({', '.join(differing)}): give another "
                              "--output, or remove it to search again")
        for key, (fitness, costs) in stored["evaluated"].items():
            evaluator.cache[Architecture.from_json(key)] = (fitness, costs)
        version, internal, gauss = stored["random_state"]
        best = stored["best"]
        return {"iteration": stored["iteration"], "population": [tuple(g) for g in stored["population"]],
                "random_state": (version, tuple(internal), gauss), "history": stored["history"], "stale": stored["stale"],
                "best": Candidate(codec.decode(tuple(best["genome"])), tuple(best["genome"]), best["fitness"], best["costs"])}

    def save(self, iteration: int, population: List[Genome], rng: random.Random, history: List[dict], best: Candidate,
             stale: int, evaluator: Evaluator):
        if not self.path:
            return
        from ..files import write_json

        write_json(self.path, {"inputs": self.inputs, "iteration": iteration, "population": [list(g) for g in population],
                               "random_state": rng.getstate(), "history": history, "stale": stale,
                               "best": {"genome": list(best.genome), "fitness": best.fitness, "costs": best.costs},
                               "evaluated": {a.to_json(): [f, c] for a, (f, c) in evaluator.cache.items()}}, indent=None)


def first_population(codec: GenomeCodec, evaluator: Evaluator, settings: EvolutionSettings, rng: random.Random,
                     seeds: Sequence[Architecture], max_attempts: int) -> List[Genome]:
    """HAT's: ``population`` random architectures that satisfy the constraints; here after the ``seeds`` that
    do, and, when too few random draws do but some architecture does, filled with mutations of those that do
    (Unsatisfiable: none does)."""
    seeded = [codec.encode(a, rng) for a in dict.fromkeys(seeds)]
    costs = evaluator.costs([codec.decode(g) for g in seeded])
    for number, c in enumerate(costs, 1):
        over = [f"{k.describe()} (it has {c[k.name]:.4g})" for k in evaluator.exceeded(c)]
        if over:  # (the search goes on from random draws, as HAT's does)
            logger.warning("seed architecture %d of %d is not in the first population: it is over %s", number,
                           len(costs), ", ".join(over))
    seeded = [g for g, c in zip(seeded, costs) if evaluator.feasible(c)]
    seeded = seeded[:settings.population]
    drawn = feasible_children(lambda: codec.draw(rng), settings.population - len(seeded), codec, evaluator,
                              "random architectures", max_attempts, None if seeded else Unsatisfiable)
    population = seeded + drawn
    if len(population) < settings.population:
        feasible = list(population)
        population += feasible_children(lambda: codec.mutate(rng.choice(feasible), settings.mutation_probability, rng),
                                        settings.population - len(population), codec, evaluator,
                                        "mutations of the feasible architectures", max_attempts, Unsatisfiable)
    return population


def evolve(space: SearchSpace, fitness: Callable[[Sequence[Architecture]], List[float]], constraints: Sequence[Constraint],
           settings: EvolutionSettings = EvolutionSettings(), progress: Optional[Callable[[dict], None]] = None,
           state: Optional[str] = None, inputs: Optional[dict] = None, seeds: Sequence[Architecture] = ()) -> dict:
    """The evolution (module docstring). Returns the best candidate, the final population (best first) and the
    history of the best fitness per iteration. ``state``: the checkpoint file (resumed when it holds this
    search's ``inputs``, with the settings; written after every iteration); ``seeds``: architectures of the
    space put in the first population when they satisfy the constraints."""
    settings.check()
    rng = random.Random(settings.seed)
    codec = GenomeCodec(space)
    evaluator = Evaluator(fitness, constraints)
    max_attempts = 1000 * settings.population
    checkpoint = EvolutionState(state, {**(inputs or {}), "evolution": asdict(settings), "space": space.to_dict(),
                                        **({"seeds": [a.to_dict() for a in seeds]} if seeds else {})})
    resumed = checkpoint.load(codec, evaluator)
    if resumed:
        rng.setstate(resumed["random_state"])
        population, history, best, stale = resumed["population"], resumed["history"], resumed["best"], resumed["stale"]
        start = resumed["iteration"] + 1
    else:
        # (the space under the constraints: no search can start; children of feasible parents that run out
        # mid-search are an error of the search, whose iterations so far stay in its state)
        population = first_population(codec, evaluator, settings, rng, seeds, max_attempts)
        history, best, stale, start = [], None, 0, 0
    stopped_early = False
    for iteration in range(start, settings.iterations):
        architectures = [codec.decode(g) for g in population]
        scored = sorted(zip(population, architectures, evaluator.evaluate(architectures)),
                        key=lambda x: (x[2][0], x[1].to_json()))
        top = scored[0]
        if best is None or top[2][0] < best.fitness:
            best, stale = Candidate(top[1], top[0], top[2][0], top[2][1]), 0
        else:
            stale += 1
        history.append({"iteration": iteration, "best_fitness": best.fitness,
                        "population_best": top[2][0], "evaluated": len(evaluator.cache)})
        if settings.patience is not None and stale >= settings.patience:
            stopped_early = True
        if stopped_early or iteration == settings.iterations - 1:
            if progress:
                progress(history[-1])
            break
        parents = [g for g, _, _ in scored[:settings.parents]]
        mutations = feasible_children(lambda: codec.mutate(rng.choice(parents), settings.mutation_probability, rng),
                                      settings.mutations, codec, evaluator, "mutations", max_attempts)
        crossovers = feasible_children(lambda: codec.crossover(rng.choice(parents), rng.choice(parents), rng),
                                       settings.crossovers, codec, evaluator, "crossovers", max_attempts)
        population = parents + mutations + crossovers
        checkpoint.save(iteration, population, rng, history, best, stale, evaluator)
        if progress:
            progress(history[-1])
    final = sorted({codec.decode(g): g for g in population}.items(), key=lambda x: (evaluator.cache[x[0]][0], x[0].to_json()))
    return {"best": best, "population": [Candidate(a, g, *evaluator.cache[a]) for a, g in final],
            "history": history, "settings": asdict(settings), "stopped_early": stopped_early}


def trial_seeded_nsga2(population: int, seed: int):
    """Optuna's NSGA-II sampler whose random state is set before every trial from (``seed``, the number of
    trials finished before it), instead of running on from the previous trial's draws: what a trial draws
    then depends on the stored study alone, so that a study resumed from its storage draws what the
    uninterrupted one drew (a trial cut off is not counted)."""
    import optuna
    from optuna.trial import TrialState

    class TrialSeededNSGAIISampler(optuna.samplers.NSGAIISampler):
        def before_trial(self, study, trial):
            finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
            state = (seed * 1_000_003 + finished) % 2 ** 32
            # (the sampler's and its random sampler's LazyRandomState, which the child generation shares)
            self._rng.rng.seed(state)
            self._random_sampler._rng.rng.seed(state)
            super().before_trial(study, trial)

    return TrialSeededNSGAIISampler(population_size=population, seed=seed)


def pareto(space: SearchSpace, fitness: Callable[[Sequence[Architecture]], List[float]], objective: Constraint,
           constraints: Sequence[Constraint], trials: int = 500, population: int = 50, seed: int = 1,
           storage: Optional[str] = None, inputs: Optional[dict] = None,
           seeds: Sequence[Architecture] = ()) -> List[Candidate]:
    """Optuna's NSGA-II (with constraints) minimising the fitness and ``objective``'s cost; the Pareto set of
    the feasible trials, by increasing cost. ``storage``: an SQLite file holding the study (continued when
    it holds this search's ``inputs``, to ``trials`` finished trials); ``seeds``: architectures of the space
    tried first (Optuna's enqueued trials: ``--latency-of``'s baseline, feasible under its own budget)."""
    import optuna
    from optuna.trial import TrialState

    if trials < 1 or population < 2:
        raise SearchError("--trials must be >= 1 and --population >= 2")
    codec = GenomeCodec(space)
    evaluator = Evaluator(fitness, [objective, *constraints])
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def genome_of(params) -> Genome:
        # (choices as strings: Optuna's categorical choices must be of one type per parameter)
        return tuple(gene.choices[int(params[gene.name])] for gene in codec.genes)

    def objectives(trial):
        params = {gene.name: trial.suggest_categorical(gene.name, [str(i) for i in range(len(gene.choices))])
                  for gene in codec.genes}
        architecture = codec.decode(genome_of(params))
        value, costs = evaluator.evaluate([architecture])[0]
        for c in constraints:  # feasible when every value is <= 0
            trial.set_constraint(c.name, costs[c.name] - c.limit)
        trial.set_user_attr("constraint", [costs[c.name] - c.limit for c in constraints])
        trial.set_user_attr("costs", costs)
        return value, costs[objective.name]

    key = {**(inputs or {}), "space": space.to_dict(), "trials": trials, "population": population, "seed": seed,
           "objective": objective.name, "constraints": {c.name: c.limit for c in constraints},
           **({"seeds": [a.to_dict() for a in seeds]} if seeds else {})}
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=trial_seeded_nsga2(population, seed),
                                storage=f"sqlite:///{os.path.abspath(storage)}" if storage else None,
                                study_name="pareto", load_if_exists=True)
    stored_key = study.user_attrs.get("inputs")
    if stored_key is None:
        study.set_user_attr("inputs", json.loads(json.dumps(key)))
        rng = random.Random(seed)
        for architecture in list(dict.fromkeys(seeds))[:trials]:  # (a new study: stored, so a resumed one runs them once)
            genome = codec.encode(architecture, rng)
            study.enqueue_trial({gene.name: str(gene.choices.index(value)) for gene, value in zip(codec.genes, genome)})
    elif stored_key != json.loads(json.dumps(key)):
        differing = sorted(k for k in set(key) | set(stored_key) if json.loads(json.dumps(key.get(k))) != stored_key.get(k))
        raise SearchError(f"{storage}: the study of a search with other inputs ({', '.join(differing)}): give another "
                          "--output, or remove it to search again")
    finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if finished < trials:
        study.optimize(objectives, n_trials=trials - finished)
    front = {}
    for trial in study.best_trials:
        if all(v <= 0 for v in trial.user_attrs["constraint"]):
            genome = genome_of(trial.params)
            architecture = codec.decode(genome)
            front[architecture] = Candidate(architecture, genome, trial.values[0], trial.user_attrs["costs"])
    return sorted(front.values(), key=lambda c: (c.costs[objective.name], c.fitness))
