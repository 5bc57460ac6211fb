"""Measured latency of a sub-network, relative to a fixed reference model, as a shared machine allows.

The work timed is Hardware-Aware Transformers': for a translation model, one source sentence through the
encoder, then incremental beam search (fairseq's ``SequenceGenerator``, what fairseq-generate runs) for a
fixed number of decoder steps (no end of sentence before it, one forced at it), so every model is timed on
the same work whatever it would translate. A language model has two: scoring (one forward pass over a
context of ``decoder_steps`` tokens) and sampling (``decoder_steps`` tokens drawn one at a time by
fairseq's sampling search, the context growing to ``decoder_steps``), reported in tokens per second; on
request (``measure(..., work=("next_token",))``) also the next sampled token after a prefix of
``decoder_steps`` tokens, the marginal cost of decoding at that length.

The protocol (``measure``), because the speed of a shared machine changes by factors within minutes:

* one process per measurement (forked: the models are not reloaded), pinned to one core
  (``os.sched_setaffinity``; ``--core``, default the last core this process may use) with one thread
  (``--threads``), so that neither other jobs' threads nor the measuring one's move it across cores;
* the candidate and a fixed reference model (``--reference``) timed in the same process, interleaved in
  blocks of ``repeats`` runs, block pairs in ABBA order (R C, C R, R C, ...), after ``warmup`` untimed runs
  of each; a block's value is the trimmed mean of its runs (a run slowed by a preemption is left out), a
  round's ratio is the candidate's block over the reference's block beside it (a change of the machine's
  speed between rounds weighs on both);
* ``processes`` such processes per architecture (``--processes``, default 3), one after another, each a
  fresh fork: the relative latency of one process varies between processes (their memory placement and
  allocator state; docs/records/latency_agreement.md: 0.47-0.59 for one architecture over 16 processes,
  whatever the rounds in each), so more rounds in one process cannot remove that spread, more processes
  can. The ``rounds`` block pairs of an architecture are shared among its processes (as evenly as they
  go, at least 2 in each): the timed work per architecture stays what ``rounds`` says, spent where it
  narrows the spread that limits the protocol (only the forks, model builds and warm-ups are repeated);
* reported: milliseconds (the median over processes of each process's median block value, candidate and
  reference), the relative latency (the median over processes of each process's median round ratio: a
  round, or a process, disturbed throughout is outvoted), its repeatability (``ratio_range``: (largest -
  smallest round ratio, over every round of every process) / relative latency, which bounds the
  processes' disagreement too; ``ratio_stdev``: the ratios' standard deviation over it) and the
  repeatability between processes (``process_range``: (largest - smallest process's relative latency) /
  relative latency); ``per_process`` keeps each process's own figures. ``collect`` measures again a
  candidate whose ``ratio_range`` exceeds ``--max-spread``;
* several candidates (a collection, a comparison of baselines, evolution's fittest) measured ``in_turn``
  at a time (``--in-turn``, default 10) with their processes taken in turn (``measure_in_turn``: the first
  process of each, then the second of each, ...): the relative speed of large and small models drifts over
  minutes on a shared VM, so the processes of one candidate measured one after another all see the same
  minutes; taken in turn, every candidate's processes spread over the whole measurement
  (docs/records/latency_agreement.md: quiet runs of 10 architectures then agree within 4.5 %, where one
  after another they differed by up to 10.4 %; a run beside a CPU-heavy job agreed with them within 4.9 %
  once, and differed by up to 11.6 % once).

On CUDA (``--device cuda``) the measurement runs in this process (a CUDA context does not survive a fork),
every run ends with ``torch.cuda.synchronize``; the ``processes`` parts then run one after another in this
process (the same sharing of rounds and the same medians; ``process_range`` is then the spread between
those parts), the protocol is otherwise the same.
"""
import functools
import multiprocessing
import os
import statistics
import time
import traceback
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch

from ..modules import AttentionConfigError


# The command-line option of each setting (``python -m fairseq_plugins.search cost --latency``).
OPTIONS = {"source_length": "--source-length", "decoder_steps": "--target-length", "beam": "--beam",
           "threads": "--threads", "warmup": "--warmup", "repeats": "--repeats", "rounds": "--rounds",
           "trim": "--trim", "core": "--core", "processes": "--processes", "in_turn": "--in-turn"}
CANDIDATE, REFERENCE = "candidate", "reference"


class LatencyError(AttentionConfigError):
    """A latency setting or model that cannot be measured; the message names the option."""


@dataclass(frozen=True)
class LatencySettings:
    source_length: int = 30
    decoder_steps: int = 30
    beam: int = 5
    threads: int = 1
    warmup: int = 3
    repeats: int = 5   # timed runs per block
    rounds: int = 6    # candidate/reference block pairs per architecture, shared among its processes
    trim: float = 0.2  # the fraction of the fastest and of the slowest runs of a block left out of its mean
    core: Optional[int] = None  # the (first) core the measuring process is pinned to; None: the last allowed
    processes: int = 3  # measuring processes per architecture (fresh forks, one after another)
    in_turn: int = 10   # candidates measured together, their processes taken in turn (1: one after another)

    @classmethod
    def from_args(cls, args) -> "LatencySettings":
        """The settings of the command line's latency options (``OPTIONS``; decoder steps: --target-length)."""
        return cls(source_length=args.source_length, decoder_steps=args.target_length, beam=args.beam,
                   threads=args.threads, warmup=args.warmup, repeats=args.repeats, rounds=args.rounds,
                   trim=args.trim, core=args.core, processes=args.processes, in_turn=args.in_turn)

    def check(self):
        for name in ("source_length", "decoder_steps", "beam", "threads", "repeats", "processes", "in_turn"):
            if getattr(self, name) < 1:
                raise LatencyError(f"{OPTIONS[name]}: expected at least 1, got {getattr(self, name)}")
        if self.rounds < 2 * self.processes:
            raise LatencyError(f"--rounds: expected at least 2 for each of the --processes {self.processes} (at least "
                               f"{2 * self.processes}: a process's repeatability is the spread over its rounds), got {self.rounds}")
        if self.warmup < 0:
            raise LatencyError(f"--warmup: expected 0 or more, got {self.warmup}")
        if not 0 <= self.trim < 0.5:
            raise LatencyError(f"--trim: expected a fraction in [0, 0.5), got {self.trim}")
        self.cores()

    def process_rounds(self) -> List[int]:
        """The rounds of each measuring process: ``rounds`` shared among ``processes`` as evenly as they go."""
        each, more = divmod(self.rounds, self.processes)
        return [each + (index < more) for index in range(self.processes)]

    def cores(self) -> List[int]:
        """The ``threads`` cores the measuring process is pinned to: from ``core`` on, or the last allowed ones."""
        allowed = sorted(os.sched_getaffinity(0))
        if self.core is None:
            if self.threads > len(allowed):
                raise LatencyError(f"--threads {self.threads}: this process may use {len(allowed)} cores")
            return allowed[-self.threads:]
        wanted = list(range(self.core, self.core + self.threads))
        if not set(wanted) <= set(allowed):
            raise LatencyError(f"--core {self.core}: with --threads {self.threads}, cores {wanted} are not all among "
                               f"the cores this process may use ({', '.join(map(str, allowed))})")
        return wanted


# Settings added since measurements were first recorded, with the value those were measured with (a record
# without ``processes`` was measured in one process, one without ``in_turn`` one candidate after another)
ADDED_SETTINGS = {"processes": 1, "in_turn": 1}


def recorded_settings(stored: Optional[dict]) -> Optional[dict]:
    """Stored ``asdict(LatencySettings)`` (a collection's header, a search's inputs) as this version writes
    them: a setting added since they were written gets the value they were measured with."""
    return None if stored is None else {**ADDED_SETTINGS, **stored}


# ------------------------------------------------------------------ arithmetic ---
def trimmed(times: List[float], trim: float) -> List[float]:
    """``times`` sorted, without the ``trim`` fraction at each end."""
    cut = int(len(times) * trim)
    ordered = sorted(times)
    return ordered[cut:len(ordered) - cut]


def block_order(rounds: int) -> List[Tuple[str, str]]:
    """ABBA: the reference first in even rounds, the candidate first in odd ones (every candidate block
    beside a reference block, neither always first after the other's)."""
    return [(REFERENCE, CANDIDATE) if r % 2 == 0 else (CANDIDATE, REFERENCE) for r in range(rounds)]


def spread(values: Sequence[float], center: float) -> float:
    """(largest - smallest) / ``center``: a repeatability figure of ``values`` around their median."""
    return (max(values) - min(values)) / center


def relative_stdev(values: Sequence[float], center: float) -> float:
    return (statistics.stdev(values) if len(values) > 1 else 0.0) / center


def summarize(candidate_ms: Sequence[float], reference_ms: Sequence[float]) -> Dict[str, object]:
    """Milliseconds, relative latency and its repeatability from the block values of each round."""
    ratios = [c / r for c, r in zip(candidate_ms, reference_ms)]
    relative = statistics.median(ratios)
    return {"latency_ms": statistics.median(candidate_ms), "reference_ms": statistics.median(reference_ms),
            "relative_latency": relative, "ratios": ratios, "ratio_range": spread(ratios, relative),
            "ratio_stdev": relative_stdev(ratios, relative)}


def interleave(run_candidate: Callable[[], object], run_reference: Callable[[], object], settings: LatencySettings,
               clock: Callable[[], float] = time.perf_counter, synchronize: Callable[[], None] = lambda: None) -> Dict:
    """Time the two in ``block_order`` (module docstring); ``clock`` in seconds, ``synchronize`` after every
    run (CUDA). Returns ``summarize``'s figures, the block values, the order and the runs' extremes."""
    runs = {CANDIDATE: run_candidate, REFERENCE: run_reference}
    for name in (REFERENCE, CANDIDATE):
        for _ in range(settings.warmup):
            runs[name]()
            synchronize()
    blocks: Dict[str, List[float]] = {CANDIDATE: [], REFERENCE: []}
    every: Dict[str, List[float]] = {CANDIDATE: [], REFERENCE: []}
    for pair in block_order(settings.rounds):
        for name in pair:
            times = []
            for _ in range(settings.repeats):
                start = clock()
                runs[name]()
                synchronize()
                times.append(1000 * (clock() - start))
            every[name] += times
            blocks[name].append(statistics.fmean(trimmed(times, settings.trim)))
    candidate = blocks[CANDIDATE]
    return {**summarize(candidate, blocks[REFERENCE]), "candidate_blocks_ms": candidate, "reference_blocks_ms": blocks[REFERENCE],
            "order": [name for pair in block_order(settings.rounds) for name in pair],
            "stdev_ms": statistics.stdev(candidate), "min_ms": min(every[CANDIDATE]), "max_ms": max(every[CANDIDATE])}


# what ``per_process`` keeps of each process's figures (its blocks and ratios are the combined lists', in turn)
PER_PROCESS = ("latency_ms", "reference_ms", "relative_latency", "ratio_range", "ratio_stdev", "stdev_ms")


def combine(parts: Sequence[Dict], pids: Sequence[int]) -> Dict:
    """One workload measured in several processes (``interleave``'s figures of each, in the order the
    processes ``pids`` ran) as one: the medians over the processes of their milliseconds and of their
    relative latencies; every round's ratio and block, process after process, with the ratios'
    repeatability around the combined relative latency; the spread of the processes' relative latencies
    (``process_range``); each process's own figures (``per_process``). One process: its own figures."""
    relatives = [part["relative_latency"] for part in parts]
    relative = statistics.median(relatives)
    ratios = [ratio for part in parts for ratio in part["ratios"]]
    candidate = [block for part in parts for block in part["candidate_blocks_ms"]]
    return {"latency_ms": statistics.median(part["latency_ms"] for part in parts),
            "reference_ms": statistics.median(part["reference_ms"] for part in parts),
            "relative_latency": relative, "ratios": ratios, "ratio_range": spread(ratios, relative),
            "ratio_stdev": relative_stdev(ratios, relative), "process_range": spread(relatives, relative),
            "candidate_blocks_ms": candidate, "reference_blocks_ms": [block for part in parts for block in part["reference_blocks_ms"]],
            "order": [name for part in parts for name in part["order"]],
            "stdev_ms": statistics.stdev(candidate) if len(candidate) > 1 else 0.0,
            "min_ms": min(part["min_ms"] for part in parts), "max_ms": max(part["max_ms"] for part in parts),
            "per_process": [{"pid": pid, "rounds": len(part["ratios"]), **{key: part[key] for key in PER_PROCESS}}
                            for pid, part in zip(pids, parts)]}


# ------------------------------------------------------------------- workloads ---
def language_model(model) -> bool:
    return not hasattr(model, "encoder")


def check_positions(model, settings: LatencySettings):
    max_steps = model.max_decoder_positions() - 1
    if settings.decoder_steps > max_steps:
        raise LatencyError(f"--target-length: {settings.decoder_steps} is more than the model's {max_steps} target positions")
    if not language_model(model) and settings.source_length > model.max_positions()[0]:
        raise LatencyError(f"--source-length: {settings.source_length} is more than the model's {model.max_positions()[0]} "
                           "source positions")


class Generation:
    """One call: fairseq's SequenceGenerator on one fixed input for exactly ``decoder_steps`` steps (+ the end
    of sentence): beam search of a random source sentence (translation), or sampling from the start of a
    document (language model). ``decoder_calls``: the decoder steps of the last call."""

    def __init__(self, model, dictionary, settings: LatencySettings, device: str, seed: int = 1):
        from fairseq import search
        from fairseq.sequence_generator import SequenceGenerator

        check_positions(model, settings)
        self.model = model.eval().to(device)
        sampling = language_model(model)
        self.generator = SequenceGenerator([self.model], dictionary, beam_size=1 if sampling else settings.beam,
                                           search_strategy=search.Sampling(dictionary) if sampling else None,
                                           min_len=settings.decoder_steps, max_len_a=0, max_len_b=settings.decoder_steps)
        rng = torch.Generator().manual_seed(seed)
        length = 1 if sampling else settings.source_length
        source = torch.randint(dictionary.nspecial, len(dictionary), (1, length), generator=rng)
        source[0, -1] = dictionary.eos()
        self.sample = {"net_input": {"src_tokens": source.to(device), "src_lengths": torch.tensor([length], device=device)}}
        self.calls: List[int] = []
        # (fairseq calls decoder.forward directly, which runs no hooks: count the first layer's calls)
        self.hook = self.model.decoder.layers[0].register_forward_hook(lambda *_: self.calls.append(1))

    def __call__(self):
        self.calls.clear()
        with torch.no_grad():
            self.generator.forward(self.sample)

    @property
    def decoder_calls(self) -> int:
        return len(self.calls)

    def close(self):
        self.hook.remove()


class Scoring:
    """One call: a language model's forward pass over a context of ``decoder_steps`` random tokens (what
    scoring a text, or one training step's forward, costs)."""

    def __init__(self, model, dictionary, settings: LatencySettings, device: str, seed: int = 1):
        check_positions(model, settings)
        self.model = model.eval().to(device)
        rng = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(dictionary.nspecial, len(dictionary), (1, settings.decoder_steps), generator=rng).to(device)

    def __call__(self):
        with torch.no_grad():
            self.model(self.tokens)

    def close(self):
        pass


class NextToken:
    """One call: a language model's next sampled token after a prefix of ``decoder_steps`` tokens, the marginal
    cost of one more token of ``Generation``'s sampling at that prefix: one decoder step on the prefix's
    incremental state (built once, untimed, token by token), the log-probabilities and fairseq's sampling draw.
    Each call steps from a shallow copy of the prefix's state (the kinds store new tensors in their buffers,
    never write into the stored ones), so every call is the (prefix + 1)-th token."""

    def __init__(self, model, dictionary, settings: LatencySettings, device: str, seed: int = 1):
        from fairseq import search
        from fairseq.sequence_generator import EnsembleModel

        if not language_model(model):
            raise LatencyError("the next-token cost is a language model's (a translation model's is its beam search)")
        check_positions(model, settings)  # the prefix and the timed token within the model's positions
        self.model = model.eval().to(device)
        self.ensemble = EnsembleModel([self.model])
        self.search = search.Sampling(dictionary)
        self.prefix = settings.decoder_steps
        rng = torch.Generator().manual_seed(seed)
        tokens = torch.randint(dictionary.nspecial, len(dictionary), (1, self.prefix + 1), generator=rng)
        tokens[0, 0] = dictionary.eos()  # the start of a document, as sampling begins
        self.tokens = tokens.to(device)
        self.scores = torch.zeros(1, 1, self.prefix + 1, device=device)
        self.state: Dict[str, Dict[str, Optional[torch.Tensor]]] = {}
        with torch.no_grad():
            for end in range(1, self.prefix + 1):
                self.ensemble.forward_decoder(self.tokens[:, :end], [], [self.state])

    def step(self) -> torch.Tensor:
        """The log-probabilities of the token after the prefix, from a copy of the prefix's state."""
        state = {key: dict(value) if isinstance(value, dict) else value for key, value in self.state.items()}
        with torch.no_grad():
            log_probs, _ = self.ensemble.forward_decoder(self.tokens, [], [state])
        return log_probs

    def __call__(self):
        log_probs = self.step()
        self.search.step(self.prefix, log_probs.view(1, 1, -1), self.scores)

    def close(self):
        pass


def workloads(model) -> Tuple[str, ...]:
    """The work timed for ``model``: ``generation`` (translation: beam search; language model: sampling),
    and for a language model also ``scoring``."""
    return ("sampling", "scoring") if language_model(model) else ("generation",)


WORKLOADS = {"generation": Generation, "sampling": Generation, "scoring": Scoring, "next_token": NextToken}


def workload(name: str, model, dictionary, settings: LatencySettings, device: str):
    return WORKLOADS[name](model, dictionary, settings, device)


# ----------------------------------------------------------------- the protocol ---
ModelBuilder = Callable[[], torch.nn.Module]


def time_workloads(build_candidate: ModelBuilder, build_reference: ModelBuilder, dictionary, settings: LatencySettings,
                   device: str = "cpu", work: Sequence[str] = ()) -> Dict:
    """One measuring process's part of the protocol, in this process: ``interleave``'s figures of every
    workload ``work`` (names of ``WORKLOADS``; default: ``workloads`` of the candidate; generation's and
    sampling's with the decoder calls of a run), the process, its cores and threads."""
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda and not torch.cuda.is_available():
        raise LatencyError(f"--device {device}: no CUDA device is available")
    synchronize = (lambda: torch.cuda.synchronize(device)) if on_cuda else (lambda: None)
    torch.manual_seed(1)  # (sampling: the same draws every time; the work does not depend on them)
    candidate, reference = build_candidate(), build_reference()
    if language_model(candidate) != language_model(reference):
        raise LatencyError("--reference: a translation model and a language model cannot be compared")
    part = {"pid": os.getpid(), "cores": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(), "workloads": {}}
    for name in work or workloads(candidate):
        timed_candidate = workload(name, candidate, dictionary, settings, device)
        timed_reference = workload(name, reference, dictionary, settings, device)
        measured = interleave(timed_candidate, timed_reference, settings, synchronize=synchronize)
        timed_candidate.close()
        timed_reference.close()  # (a model measured again in this process, on CUDA, counts its own calls only)
        if isinstance(timed_candidate, Generation):
            measured["decoder_calls"] = timed_candidate.decoder_calls
        part["workloads"][name] = measured
    return part


def assemble(parts: Sequence[Dict], settings: LatencySettings, device: str) -> Dict:
    """The record of a measurement whose processes gave ``parts`` (``time_workloads``'s, in the order they
    ran): ``combine``'s figures of every workload; a translation model's generation, and a language model's
    sampling, also at the top level (the latency of budgets and the predictor); a language model's
    workloads in tokens per second too."""
    pids = [part["pid"] for part in parts]
    record = {**asdict(settings), "device": device, "pids": pids, "cores": parts[0]["cores"], "threads": parts[0]["threads"]}
    for name, first in parts[0]["workloads"].items():
        measured = combine([part["workloads"][name] for part in parts], pids)
        if name == "generation":
            record.update(measured, decoder_calls=first["decoder_calls"])
            continue
        if name == "next_token":  # one token: milliseconds per token at the prefix
            record[name] = {**measured, "prefix": settings.decoder_steps}
            continue
        tokens = settings.decoder_steps
        measured.update(context=tokens, tokens_per_second=1000 * tokens / measured["latency_ms"],
                        reference_tokens_per_second=1000 * tokens / measured["reference_ms"])
        if name == "sampling":
            measured["decoder_calls"] = first["decoder_calls"]
            # a language model's latency (budgets, the predictor): sampling's
            record.update({key: value for key, value in measured.items() if key not in ("context", "tokens_per_second",
                                                                                          "reference_tokens_per_second")})
        record[name] = measured
    return record


def process_settings(settings: LatencySettings) -> List[LatencySettings]:
    """The settings of each measuring process: its share of the rounds, in one process."""
    return [replace(settings, rounds=rounds, processes=1) for rounds in settings.process_rounds()]


def batches(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter), taken from the iterable as each list is needed."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def groups(items: Iterable, settings: LatencySettings) -> List[list]:
    """``items`` (candidates) in the groups ``measure_in_turn`` measures together: ``in_turn`` at a time."""
    return list(batches(items, settings.in_turn))


def _child(connection, build_candidate, build_reference, dictionary, settings: LatencySettings, device: str,
           work: Sequence[str]):
    try:
        os.sched_setaffinity(0, settings.cores())
        torch.set_num_threads(settings.threads)
        connection.send({"part": time_workloads(build_candidate, build_reference, dictionary, settings, device, work)})
    except AttentionConfigError as error:
        connection.send({"error": str(error)})
    except BaseException:  # (the parent raises it: nothing is lost silently)
        connection.send({"failure": traceback.format_exc()})
    finally:
        connection.close()


def time_in_child(build_candidate: ModelBuilder, build_reference: ModelBuilder, dictionary, settings: LatencySettings,
                  device: str, work: Sequence[str]) -> Dict:
    """``time_workloads`` in a forked child pinned to ``settings.cores()`` with ``settings.threads`` threads
    (the builders run there); its errors raised here."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, build_candidate, build_reference, dictionary, settings, device,
                                                               tuple(work)))
    child.start()
    sender.close()
    try:
        answer = receiver.recv()
    except EOFError:
        answer = {"failure": "the measuring process ended without a result"}
    finally:
        child.join()
    if "error" in answer:
        raise LatencyError(answer["error"])
    if "failure" in answer:
        raise RuntimeError(f"latency measurement failed (exit status {child.exitcode}):\n{answer['failure']}")
    return answer["part"]


def check_work(work: Sequence[str]):
    unknown = [name for name in work if name not in WORKLOADS]
    if unknown:
        raise LatencyError(f"unknown workload {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")


def measure(build_candidate: ModelBuilder, build_reference: ModelBuilder, dictionary, settings: LatencySettings,
            device: str = "cpu", work: Sequence[str] = ()) -> Dict:
    """The latency of the model ``build_candidate`` returns, relative to ``build_reference``'s (module
    docstring), on the workloads ``work`` (default: ``workloads`` of the candidate); on the CPU in
    ``settings.processes`` forked child processes, one after another, each pinned to ``settings.cores()``
    with ``settings.threads`` threads and timing its share of the rounds (the builders run there: the
    sub-networks are built in each child, not in this process); ``assemble``'s record of them."""
    return measure_in_turn([(build_candidate, build_reference)], dictionary, settings, device, work)[0]


def measure_in_turn(builders: Sequence[Tuple[ModelBuilder, ModelBuilder]], dictionary, settings: LatencySettings,
                    device: str = "cpu", work: Sequence[str] = ()) -> List[Dict]:
    """``measure`` of several (candidate, reference) builders with their measuring processes taken in turn:
    the first process of every candidate, then the second of every one, and so on. Each candidate's processes
    then spread over the whole measurement instead of following one another, so that a change of the
    machine's speed slower than one process (docs/records/latency_agreement.md: minutes, on a shared VM)
    weighs on every candidate alike. One record per candidate, in order."""
    settings.check()
    check_work(work)
    on_cpu = torch.device(device).type == "cpu"
    # (on CUDA in this process: a CUDA context does not survive a fork)
    run_part = time_in_child if on_cpu else time_workloads
    parts: List[List[Dict]] = [[] for _ in builders]
    for part_settings in process_settings(settings):
        for index, (build_candidate, build_reference) in enumerate(builders):
            parts[index].append(run_part(build_candidate, build_reference, dictionary, part_settings, device, work))
    return [assemble(candidate_parts, settings, device) for candidate_parts in parts]


def measure_subnetwork(model, dictionary, architecture, reference, settings: LatencySettings, device: str = "cpu") -> Dict:
    """``measure`` of two architectures of a loaded supernet (their exported sub-networks, as ``export`` writes
    them); the record names the reference."""
    return measure_subnetworks(model, dictionary, [architecture], reference, settings, device)[0]


def measure_subnetworks(model, dictionary, architectures, reference, settings: LatencySettings,
                        device: str = "cpu") -> List[Dict]:
    """``measure_in_turn`` of several architectures of a loaded supernet against one reference."""
    builders = [(functools.partial(model.subnetwork, architecture), functools.partial(model.subnetwork, reference))
                for architecture in architectures]
    return [{**record, "reference": reference.to_dict()}
            for record in measure_in_turn(builders, dictionary, settings, device)]


def default_reference(model):
    """The reference when none is given: the largest architecture of the supernet's space."""
    return model.space.extreme(largest=True)
