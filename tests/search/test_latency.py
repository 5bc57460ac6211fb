"""The latency protocol (issue 33): its arithmetic on a fake clock (the ABBA order of the blocks, trimmed
blocks, ratios to the reference, their median and repeatability, a machine whose speed changes), the
combination of several measuring processes (medians over them, their spread; each a fresh child, one after
another), then real measurements of tiny sub-networks in pinned child processes: a translation supernet's
(beam search) and a language-model supernet's (tokens per second of scoring and sampling)."""
import os
import statistics

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins  # noqa: F401
from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task
from fairseq_plugins.search import latency
from fairseq_plugins.search.latency import (CANDIDATE, REFERENCE, LatencyError, LatencySettings, NextToken, block_order,
                                            combine, interleave, measure, measure_subnetwork, recorded_settings, summarize,
                                            trimmed)


class FakeMachine:
    """A clock whose runs take ``work[name]`` milliseconds times the machine's slowdown at that moment."""

    def __init__(self, work, slowdown=lambda now: 1.0):
        self.now, self.work, self.slowdown, self.log = 0.0, work, slowdown, []

    def clock(self) -> float:
        return self.now / 1000

    def run(self, name):
        def timed():
            self.log.append(name)
            self.now += self.work[name] * self.slowdown(self.now)
        return timed


def test_blocks_alternate_abba_after_the_warmup_of_each():
    machine = FakeMachine({CANDIDATE: 2.0, REFERENCE: 1.0})
    settings = LatencySettings(warmup=2, repeats=3, rounds=4, trim=0.0)
    measured = interleave(machine.run(CANDIDATE), machine.run(REFERENCE), settings, clock=machine.clock)
    assert block_order(4) == [(REFERENCE, CANDIDATE), (CANDIDATE, REFERENCE)] * 2
    r, c = [REFERENCE] * 3, [CANDIDATE] * 3
    assert machine.log == [REFERENCE] * 2 + [CANDIDATE] * 2 + r + c + c + r + r + c + c + r
    assert measured["order"] == [REFERENCE, CANDIDATE, CANDIDATE, REFERENCE] * 2
    assert measured["candidate_blocks_ms"] == pytest.approx([2.0] * 4) and measured["reference_blocks_ms"] == pytest.approx([1.0] * 4)
    assert measured["relative_latency"] == pytest.approx(2.0) and measured["ratio_range"] == pytest.approx(0.0)
    assert measured["latency_ms"] == pytest.approx(2.0) and measured["reference_ms"] == pytest.approx(1.0)


def test_a_machine_slowing_down_between_rounds_leaves_the_relative_latency_as_it_is():
    # every round pair on a machine twice as slow as the one before: milliseconds change by 8x, the ratio not
    work = {CANDIDATE: 3.0, REFERENCE: 2.0}
    machine = FakeMachine(work, slowdown=lambda now: 2.0 ** int(now // 50))
    settings = LatencySettings(warmup=0, repeats=5, rounds=4, trim=0.0)
    measured = interleave(machine.run(CANDIDATE), machine.run(REFERENCE), settings, clock=machine.clock)
    assert max(measured["candidate_blocks_ms"]) / min(measured["candidate_blocks_ms"]) > 3
    # (a block that straddles a change of speed gives a ratio off by the change; the median outvotes it)
    assert measured["relative_latency"] == pytest.approx(1.5)


def test_a_preempted_run_is_trimmed_out_of_its_block():
    runs = iter([1.0, 1.0, 50.0, 1.0, 1.0])  # one reference run preempted
    machine = FakeMachine({CANDIDATE: 4.0, REFERENCE: 1.0})
    default_run = machine.run(REFERENCE)

    def reference():
        work = next(runs, 1.0)
        machine.work[REFERENCE] = work
        default_run()

    measured = interleave(machine.run(CANDIDATE), reference, LatencySettings(warmup=0, repeats=5, rounds=2, trim=0.2),
                          clock=machine.clock)
    assert measured["reference_blocks_ms"] == pytest.approx([1.0, 1.0]) and measured["relative_latency"] == pytest.approx(4.0)
    assert measured["max_ms"] == pytest.approx(4.0)
    runs = iter([1.0, 1.0, 50.0, 1.0, 1.0])
    untrimmed = interleave(machine.run(CANDIDATE), reference, LatencySettings(warmup=0, repeats=5, rounds=2, trim=0.0),
                           clock=machine.clock)
    assert untrimmed["reference_blocks_ms"][0] == pytest.approx(54.0 / 5)


def test_the_ratio_median_and_repeatability_on_known_values():
    summary = summarize([2.0, 3.0, 2.2, 10.0, 2.1], [1.0, 1.0, 1.0, 2.0, 1.0])
    assert summary["ratios"] == pytest.approx([2.0, 3.0, 2.2, 5.0, 2.1])
    assert summary["relative_latency"] == pytest.approx(2.2)  # the disturbed rounds outvoted
    assert summary["latency_ms"] == pytest.approx(2.2) and summary["reference_ms"] == pytest.approx(1.0)
    assert summary["ratio_range"] == pytest.approx((5.0 - 2.0) / 2.2)
    ratios = [2.0, 3.0, 2.2, 5.0, 2.1]
    mean = sum(ratios) / 5
    stdev = (sum((r - mean) ** 2 for r in ratios) / 4) ** 0.5
    assert summary["ratio_stdev"] == pytest.approx(stdev / 2.2)
    assert trimmed([5.0, 1.0, 3.0, 100.0, 2.0, 4.0, 0.5, 3.5, 2.5, 1.5], 0.1) == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0]


def test_bad_settings_name_the_option():
    allowed = sorted(os.sched_getaffinity(0))
    for settings, message in ((LatencySettings(rounds=1, processes=1), "--rounds: expected at least 2"),
                              (LatencySettings(processes=0), "--processes: expected at least 1, got 0"),
                              (LatencySettings(in_turn=0), "--in-turn: expected at least 1, got 0"),
                              (LatencySettings(rounds=5, processes=3),
                               "--rounds: expected at least 2 for each of the --processes 3 (at least 6"),
                              (LatencySettings(trim=0.5), "--trim: expected a fraction in [0, 0.5), got 0.5"),
                              (LatencySettings(core=max(allowed) + 1), f"--core {max(allowed) + 1}: with --threads 1"),
                              (LatencySettings(threads=len(allowed) + 1), f"--threads {len(allowed) + 1}: this process may use")):
        with pytest.raises(LatencyError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            settings.check()
    assert LatencySettings().cores() == allowed[-1:] and LatencySettings(core=allowed[0]).cores() == allowed[:1]


def test_the_rounds_are_shared_among_the_processes():
    # the timed work per architecture stays what --rounds says, spread over the processes as evenly as it goes
    assert LatencySettings().process_rounds() == [2, 2, 2]
    assert LatencySettings(rounds=8, processes=3).process_rounds() == [3, 3, 2]
    assert LatencySettings(rounds=18, processes=1).process_rounds() == [18]
    parts = latency.process_settings(LatencySettings(rounds=7, processes=2))
    assert [(part.rounds, part.processes) for part in parts] == [(4, 1), (3, 1)]
    # settings stored before --processes (--in-turn) existed were measured in one process (one after another)
    stored = {"rounds": 6, "repeats": 5}
    assert recorded_settings(stored) == {"rounds": 6, "repeats": 5, "processes": 1, "in_turn": 1}
    assert recorded_settings(None) is None
    assert recorded_settings({"processes": 3, "in_turn": 10}) == {"processes": 3, "in_turn": 10}
    # several candidates are measured in_turn at a time
    assert latency.groups(list(range(23)), LatencySettings()) == [list(range(10)), list(range(10, 20)), [20, 21, 22]]
    assert latency.groups([1, 2], LatencySettings(in_turn=1)) == [[1], [2]]


def process_part(candidate_ms, reference_ms):
    """``interleave``'s figures of one process whose rounds gave these block values."""
    return {**summarize(candidate_ms, reference_ms), "candidate_blocks_ms": list(candidate_ms),
            "reference_blocks_ms": list(reference_ms), "order": [REFERENCE, CANDIDATE, CANDIDATE, REFERENCE][:2 * len(candidate_ms)],
            "stdev_ms": statistics.stdev(candidate_ms), "min_ms": min(candidate_ms) - 0.1, "max_ms": max(candidate_ms) + 0.1}


def test_several_processes_combine_into_their_medians_and_their_spread():
    # three processes, each steady within (ratios 0.5, 0.7, 0.55): the relative latency is the middle process's,
    # not the mean of all rounds (0.5833); the milliseconds the median of the processes' medians
    parts = [process_part([5.0, 5.0], [10.0, 10.0]), process_part([14.0, 14.0], [20.0, 20.0]),
             process_part([5.5, 5.5], [10.0, 10.0])]
    combined = combine(parts, pids=[11, 12, 13])
    assert combined["relative_latency"] == pytest.approx(0.55)
    assert combined["latency_ms"] == pytest.approx(5.5) and combined["reference_ms"] == pytest.approx(10.0)
    assert combined["process_range"] == pytest.approx((0.7 - 0.5) / 0.55)
    # every round's ratio and block, process after process; the ratios' spread bounds the processes'
    assert combined["ratios"] == pytest.approx([0.5, 0.5, 0.7, 0.7, 0.55, 0.55])
    assert combined["ratio_range"] == pytest.approx((0.7 - 0.5) / 0.55) and combined["ratio_range"] >= combined["process_range"]
    assert combined["candidate_blocks_ms"] == [5.0, 5.0, 14.0, 14.0, 5.5, 5.5] and len(combined["order"]) == 12
    assert combined["min_ms"] == pytest.approx(4.9) and combined["max_ms"] == pytest.approx(14.1)
    assert [(p["pid"], p["rounds"], p["relative_latency"]) for p in combined["per_process"]] == [
        (11, 2, pytest.approx(0.5)), (12, 2, pytest.approx(0.7)), (13, 2, pytest.approx(0.55))]
    # an even number of processes: the mean of the middle two; one process: its own figures, no spread between
    assert combine(parts[:2], pids=[1, 2])["relative_latency"] == pytest.approx(0.6)
    alone = combine(parts[1:2], pids=[7])
    assert alone["process_range"] == 0.0
    assert {key: alone[key] for key in parts[1] if key != "stdev_ms"} == {key: parts[1][key] for key in parts[1] if key != "stdev_ms"}
    # rounds within one process that disagree: the ratios' spread shows it, the processes' not
    noisy = combine([process_part([4.0, 6.0], [10.0, 10.0])] * 3, pids=[1, 2, 3])
    assert noisy["process_range"] == 0.0 and noisy["ratio_range"] == pytest.approx(0.2 / 0.5)


class Counted(torch.nn.Module):
    """A model of no real work (a language model: it has no encoder)."""


class CountedWork:
    """A workload that sums ``size`` numbers: no model, no data; the measuring process logs its id."""

    def __init__(self, model, dictionary, settings, device):
        self.size = 200 if isinstance(model, Counted) else 100

    def __call__(self):
        sum(range(self.size))

    def close(self):
        pass


def test_each_process_is_a_fresh_child_and_the_relative_latency_is_their_median(tmp_path, monkeypatch):
    monkeypatch.setitem(latency.WORKLOADS, "counted", CountedWork)  # (the forked children see it too)
    log = tmp_path / "builders.log"

    def build(model):
        def built():
            with open(log, "a") as f:  # each child appends: the parent never builds a model
                f.write(f"{os.getpid()}\n")
            return model
        return built

    settings = LatencySettings(warmup=0, repeats=2, rounds=7, processes=3, trim=0.0)
    record = measure(build(Counted()), build(torch.nn.Module()), None, settings, work=("counted",))
    # three children, one after another (the builders of one ran before the next began), none of them this process
    built = [int(pid) for pid in log.read_text().split()]
    assert len(set(record["pids"])) == 3 and os.getpid() not in record["pids"]
    assert built == [pid for pid in record["pids"] for _ in (CANDIDATE, REFERENCE)]
    measured = record["counted"]
    assert [p["pid"] for p in measured["per_process"]] == record["pids"]
    assert [p["rounds"] for p in measured["per_process"]] == [3, 2, 2] and len(measured["ratios"]) == 7
    relatives = [p["relative_latency"] for p in measured["per_process"]]
    assert measured["relative_latency"] == statistics.median(relatives)
    assert measured["latency_ms"] == statistics.median(p["latency_ms"] for p in measured["per_process"])
    assert measured["process_range"] == pytest.approx((max(relatives) - min(relatives)) / statistics.median(relatives))
    assert record["rounds"] == 7 and record["processes"] == 3  # the settings of the whole measurement


def test_several_candidates_take_their_processes_in_turn(tmp_path, monkeypatch):
    """measure_in_turn: the first process of every candidate, then the second of every one (each candidate's
    processes spread over the whole measurement); each candidate's record is its own processes' medians."""
    monkeypatch.setitem(latency.WORKLOADS, "counted", CountedWork)
    log = tmp_path / "builders.log"

    def build(name, model):
        def built():
            with open(log, "a") as f:
                f.write(f"{name} {os.getpid()}\n")
            return model
        return built

    settings = LatencySettings(warmup=0, repeats=2, rounds=4, processes=2, trim=0.0)
    records = latency.measure_in_turn([(build(name, Counted()), build("reference", torch.nn.Module())) for name in "abc"],
                                      None, settings, work=("counted",))
    built = [line.split() for line in log.read_text().splitlines()]
    assert [name for name, _ in built[::2]] == ["a", "b", "c", "a", "b", "c"]  # each child builds its candidate first
    assert all(name == "reference" for name, _ in built[1::2])
    children = [int(pid) for _, pid in built[::2]]
    assert [r["pids"] for r in records] == [[children[i], children[i + 3]] for i in range(3)]
    for record in records:
        measured = record["counted"]
        assert [p["rounds"] for p in measured["per_process"]] == [2, 2]
        assert measured["relative_latency"] == statistics.median(p["relative_latency"] for p in measured["per_process"])
    with pytest.raises(latency.LatencyError, match="unknown workload nothing"):
        latency.measure_in_turn([(build("a", Counted()), build("reference", torch.nn.Module()))], None, settings,
                                work=("nothing",))


# the choices of a side, the same in the encoder, the decoder and the language model
SIDE = """
  embed_dim: [8, 16]
  layers: [1, 2]
  ffn_embed_dim: [8, 12]
  attention_heads: [2]
  attention_kinds: [softmax, cosformer]"""
TRANSLATION_SPACE = f"""shared_embed_dim: true
encoder:{SIDE}
decoder:{SIDE}
  cross_attention_heads: [2]
  cross_attention_kinds: [softmax]
  encoder_decoder_connect: [1]
"""
LM_SPACE = f"decoder:{SIDE}\n"
TINY = LatencySettings(source_length=5, decoder_steps=4, beam=2, warmup=1, repeats=2, rounds=4, processes=2, trim=0.0)


def supernet(root, language_model: bool):
    if language_model:
        write_lm_corpus(str(root / "raw"), splits={"train": 20, "valid": 5, "test": 5})
        data = binarize_lm(str(root / "raw"), str(root / "bin"))
        (root / "space.yaml").write_text(LM_SPACE)
        arguments = [data, "--task", "language_modeling", "--arch", "mixed_supertransformer_lm", "--tokens-per-sample", "16"]
    else:
        data = binarize_translation(write_translation_task(str(root / "raw"), splits={"train": 20, "valid": 5, "test": 5}),
                                    str(root / "bin"))
        (root / "space.yaml").write_text(TRANSLATION_SPACE)
        arguments = [data, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", "mixed_supertransformer",
                     "--share-all-embeddings", "--max-source-positions", "32", "--max-target-positions", "32"]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=[
        *arguments, "--search-space", str(root / "space.yaml"), "--dropout", "0"])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task, task.build_model(args)


@pytest.mark.parametrize("language_model", [False, True], ids=["translation", "language_model"])
def test_a_sub_network_is_measured_beside_the_reference_in_a_pinned_child(tmp_path, language_model):
    task, model = supernet(tmp_path, language_model)
    smallest, largest = model.space.extreme(largest=False), model.space.extreme(largest=True)
    record = measure_subnetwork(model, task.target_dictionary, smallest, largest, TINY)
    assert len(set(record["pids"])) == 2 and os.getpid() not in record["pids"]
    assert record["cores"] == sorted(os.sched_getaffinity(0))[-1:] and record["threads"] == 1
    assert record["reference"] == largest.to_dict() and record["device"] == "cpu"
    # two processes of two rounds each: the relative latency is the median (here the mean) of theirs
    assert len(record["ratios"]) == 4 and [p["rounds"] for p in record["per_process"]] == [2, 2]
    assert record["relative_latency"] == pytest.approx(statistics.median(p["relative_latency"] for p in record["per_process"]))
    assert record["process_range"] <= record["ratio_range"]
    assert record["latency_ms"] > 0 and record["reference_ms"] > 0 and record["ratio_range"] >= 0
    assert record["min_ms"] <= record["latency_ms"] <= record["max_ms"]
    # exactly 4 decoder steps and the forced end of sentence, whatever the model would generate
    assert record["decoder_calls"] == 5
    if language_model:
        for name in ("scoring", "sampling"):
            part = record[name]
            assert part["context"] == 4 and part["tokens_per_second"] == pytest.approx(4000 / part["latency_ms"])
            assert part["reference_tokens_per_second"] == pytest.approx(4000 / part["reference_ms"])
        assert record["latency_ms"] == record["sampling"]["latency_ms"]
    else:
        assert "scoring" not in record
    # errors in the child come back as this process's one-line error
    with pytest.raises(LatencyError, match="--target-length: 40 is more than the model's"):
        measure_subnetwork(model, task.target_dictionary, smallest, largest, LatencySettings(decoder_steps=40, rounds=2, processes=1))


def test_cuda_latency_runs_in_this_process_with_a_synchronisation_or_is_refused_without_a_device(tmp_path):
    task, model = supernet(tmp_path, language_model=False)
    smallest, largest = model.space.extreme(largest=False), model.space.extreme(largest=True)
    if not torch.cuda.is_available():
        with pytest.raises(LatencyError, match="--device cuda: no CUDA device is available"):
            measure_subnetwork(model, task.target_dictionary, smallest, largest, TINY, device="cuda")
        return
    record = measure_subnetwork(model, task.target_dictionary, smallest, largest, TINY, device="cuda")
    # (the parts of the processes in turn in this process: a CUDA context does not survive a fork)
    assert record["device"] == "cuda" and record["pids"] == [os.getpid()] * 2 and record["decoder_calls"] == 5
    assert record["relative_latency"] > 0 and len(record["ratios"]) == 4 and len(record["per_process"]) == 2


def test_the_next_token_is_one_step_after_the_prefix_whatever_the_calls_before_it(tmp_path):
    task, model = supernet(tmp_path, language_model=True)
    largest = model.space.extreme(largest=True)
    assert {layer.attention_kind for layer in largest.decoder_layers} <= {"softmax", "cosformer"}
    for architecture in (largest, largest.__class__.from_dict({**largest.to_dict(), "decoder_layers": [
            {**layer, "attention_kind": "cosformer"} for layer in largest.to_dict()["decoder_layers"]]})):
        sub = model.subnetwork(architecture).eval()
        step = NextToken(sub, task.target_dictionary, LatencySettings(decoder_steps=9), "cpu")
        assert step.tokens.shape == (1, 10) and step.tokens[0, 0] == task.target_dictionary.eos()
        with torch.no_grad():  # the known answer: the last position of one full pass over prefix + 1 tokens
            full = sub.get_normalized_probs(sub(step.tokens), log_probs=True)[0, -1]
        first = step.step()
        step()
        step()  # the timed calls leave the prefix's state as it was
        torch.testing.assert_close(first[0], full, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step.step(), first)
    with pytest.raises(LatencyError, match="--target-length: 16 is more than the model's 15 target positions"):
        NextToken(sub, task.target_dictionary, LatencySettings(decoder_steps=16), "cpu")
    # through the protocol (a pinned child), the named workload only
    build = lambda: model.subnetwork(largest)  # noqa: E731
    record = measure(build, build, task.target_dictionary, TINY, work=("next_token",))
    assert record["next_token"]["prefix"] == 4 and record["next_token"]["latency_ms"] > 0
    assert len(record["next_token"]["ratios"]) == 4 and "sampling" not in record and "scoring" not in record
    with pytest.raises(LatencyError, match="unknown workload next_word"):
        measure(build, build, task.target_dictionary, TINY, work=("next_word",))
