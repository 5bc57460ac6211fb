"""Hardware-aware evolutionary search (``evolve``) and the multi-objective search (``pareto``).

``evolve``: the evolution of Hardware-Aware Transformers (Wang et al. 2020, its ``evo_search``): a population
of ``population`` architectures that satisfy the constraints; each iteration keeps the ``parents`` fittest,
adds ``mutations`` children of random parents (every gene redrawn with ``mutation_probability``) and
``crossovers`` children of two random parents (every gene from either), each child kept only when it
satisfies the constraints (it is drawn again otherwise). It stops after ``iterations`` iterations, or
earlier when the best fitness has not improved for ``patience`` iterations. Fitness is lower-is-better: the
loss ranker's negated score (``--fitness ranker``) or the inherited validation loss inside the supernet
(``--fitness supernet``). Constraints: the predicted latency (a ``rank --target latency`` regressor) and the
counted FLOPs and parameters (``search cost``'s counts).

``pareto``: Optuna's NSGA-II over the same genomes, two objectives (the fitness and the latency, FLOPs or
parameters), the constraints as Optuna constraints; the Pareto set of the feasible trials.
"""
import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .genome import Genome, GenomeCodec
from .space import SearchSpace


class SearchError(AttentionConfigError):
    """Settings the search cannot run with; the message names the option."""


@dataclass(frozen=True)
class EvolutionSettings:
    """HAT's defaults (its ``configs/*/supertransformer/space0.yml`` evolution settings), plus the stop."""

    population: int = 125
    parents: int = 25
    mutations: int = 50
    crossovers: int = 50
    mutation_probability: float = 0.3
    iterations: int = 30
    patience: int = 5  # iterations without a better best fitness before stopping early
    seed: int = 1

    def check(self):
        for name in ("population", "parents", "iterations", "patience"):
            if getattr(self, name) < 1:
                raise SearchError(f"--{name.replace('_', '-')}: expected at least 1, got {getattr(self, name)}")
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

    def feasible(self, costs: Dict[str, float]) -> bool:
        return all(costs[c.name] <= c.limit for c in self.constraints)

    def evaluate(self, architectures: Sequence[Architecture]) -> List[Tuple[float, Dict[str, float]]]:
        missing = [a for a in dict.fromkeys(architectures) if a not in self.cache]
        if missing:
            for a, f, c in zip(missing, self.fitness_function(missing), self.costs(missing)):
                self.cache[a] = (float(f), c)
        return [self.cache[a] for a in architectures]


def feasible_children(make: Callable[[], Genome], count: int, codec: GenomeCodec, evaluator: Evaluator,
                      what: str, max_attempts: int) -> List[Genome]:
    """``count`` genomes from ``make`` whose architectures satisfy the constraints (HAT redraws until it has
    them); after ``max_attempts`` draws without enough, the constraints are too tight: an error."""
    children, attempts = [], 0
    while len(children) < count:
        batch = [make() for _ in range(max(1, min(64, count - len(children))))]
        attempts += len(batch)
        costs = evaluator.costs([codec.decode(g) for g in batch])
        children += [g for g, c in zip(batch, costs) if evaluator.feasible(c)][:count - len(children)]
        if len(children) < count and attempts >= max_attempts:
            bounds = ", ".join(f"{c.option} {c.limit:g}" for c in evaluator.constraints)
            raise SearchError(f"{bounds}: only {len(children)} of {attempts} {what} satisfy the constraints; loosen them")
    return children


def evolve(space: SearchSpace, fitness: Callable[[Sequence[Architecture]], List[float]], constraints: Sequence[Constraint],
           settings: EvolutionSettings = EvolutionSettings(), progress: Optional[Callable[[dict], None]] = None) -> dict:
    """The evolution (module docstring). Returns the best candidate, the final population (best first) and the
    history of the best fitness per iteration."""
    settings.check()
    rng = random.Random(settings.seed)
    codec = GenomeCodec(space)
    evaluator = Evaluator(fitness, constraints)
    max_attempts = 1000 * settings.population
    population = feasible_children(lambda: codec.draw(rng), settings.population, codec, evaluator,
                                   "random architectures", max_attempts)
    history, best, stale = [], None, 0
    for iteration in range(settings.iterations):
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
        if progress:
            progress(history[-1])
        if stale >= settings.patience:
            break
        if iteration == settings.iterations - 1:
            break
        parents = [g for g, _, _ in scored[:settings.parents]]
        mutations = feasible_children(lambda: codec.mutate(rng.choice(parents), settings.mutation_probability, rng),
                                      settings.mutations, codec, evaluator, "mutations", max_attempts)
        crossovers = feasible_children(lambda: codec.crossover(rng.choice(parents), rng.choice(parents), rng),
                                       settings.crossovers, codec, evaluator, "crossovers", max_attempts)
        population = parents + mutations + crossovers
    final = sorted({codec.decode(g): g for g in population}.items(), key=lambda x: (evaluator.cache[x[0]][0], x[0].to_json()))
    return {"best": best, "population": [Candidate(a, g, *evaluator.cache[a]) for a, g in final],
            "history": history, "settings": asdict(settings), "stopped_early": len(history) < settings.iterations}


def pareto(space: SearchSpace, fitness: Callable[[Sequence[Architecture]], List[float]], objective: Constraint,
           constraints: Sequence[Constraint], trials: int = 500, population: int = 50, seed: int = 1) -> List[Candidate]:
    """Optuna's NSGA-II (with constraints) minimising the fitness and ``objective``'s cost; the Pareto set of
    the feasible trials, by increasing cost."""
    import optuna

    if trials < 1 or population < 2:
        raise SearchError("--trials must be >= 1 and --population >= 2")
    codec = GenomeCodec(space)
    evaluator = Evaluator(fitness, [objective, *constraints])
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def genome_of(trial) -> Genome:
        # (choices as strings: Optuna's categorical choices must be of one type per parameter)
        return tuple(gene.choices[int(trial.suggest_categorical(gene.name, [str(i) for i in range(len(gene.choices))]))]
                     for gene in codec.genes)

    def objectives(trial):
        architecture = codec.decode(genome_of(trial))
        value, costs = evaluator.evaluate([architecture])[0]
        for c in constraints:  # feasible when every value is <= 0
            trial.set_constraint(c.name, costs[c.name] - c.limit)
        trial.set_user_attr("constraint", [costs[c.name] - c.limit for c in constraints])
        return value, costs[objective.name]

    sampler = optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(objectives, n_trials=trials)
    front = {}
    for trial in study.best_trials:
        if all(v <= 0 for v in trial.user_attrs["constraint"]):
            genome = tuple(gene.choices[int(trial.params[gene.name])] for gene in codec.genes)
            architecture = codec.decode(genome)
            front[architecture] = Candidate(architecture, genome, *evaluator.cache[architecture])
    return sorted(front.values(), key=lambda c: (c.costs[objective.name], c.fitness))
