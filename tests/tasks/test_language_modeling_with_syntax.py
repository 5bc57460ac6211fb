"""language_modeling_with_syntax: hints go through the same blocking as the
tokens. Every batch row is checked against an independent computation from the
flat token stream: the block's targets are the stream's tokens and its hints are
the stream's distances turned into key rows of the block, -1 where a hint falls
before the block start (never wrapped)."""
import os
import random
import shutil

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.cli.pipeline import fairseq_command, run
from fairseq_plugins.data.hinted_datasets import HintedMonolingualDataset
from fairseq_plugins.data.syntax_hints import HintDataError, hint_dataset_prefix, write_hint_dataset

PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
SIZES = {"train": 30, "valid": 8, "valid1": 6}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_hints")
    rng = random.Random(3)
    raw = root / "raw"
    os.makedirs(raw)
    lines, distances = {}, {}
    for split, n in SIZES.items():
        lines[split] = [" ".join(f"w{rng.randrange(15)}" for _ in range(rng.randint(1, 9))) for _ in range(n)]
        with open(raw / f"{split}.txt", "w") as f:
            f.writelines(line + "\n" for line in lines[split])
        # n + 1 distances per line, some reaching back past the line start
        distances[split] = [[rng.randint(0, t + 3) for t in range(len(line.split()) + 1)] for line in lines[split]]
    data = str(root / "bin")
    run(fairseq_command("preprocess") + [
        "--only-source", "--trainpref", f"{raw}/train.txt", "--validpref", f"{raw}/valid.txt,{raw}/valid1.txt",
        "--destdir", data, "--workers", "1",
    ])
    for split in SIZES:
        write_hint_dataset(hint_dataset_prefix(data, split), distances[split])
    return {"dir": data, "lines": lines, "distances": distances}


def setup_task(data, *extra, task="language_modeling_with_syntax"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, input_args=[data, "--task", task, "--arch", "mixed_transformer_lm", "--user-dir", PLUGIN_DIR, *extra]
    )
    return tasks.setup_task(args)


def batches(task, split, seed=1, max_tokens=40):
    itr = task.get_batch_iterator(
        dataset=task.dataset(split), max_tokens=max_tokens, seed=seed, disable_iterator_cache=True, required_batch_size_multiple=1,
    )
    return list(itr.next_epoch_itr(shuffle=True))


# ------------------------------------------------ independent reference ---
def stream(task, lines, distances, truncate=None):
    """Per line: encoded tokens (+ eos) and distances, optionally truncated to the first ``truncate``."""
    sentences = []
    for line, dist in zip(lines, distances):
        tokens = task.dictionary.encode_line(line, add_if_not_exist=False).long().tolist()
        assert len(tokens) == len(dist)
        if truncate is not None:
            tokens, dist = tokens[:truncate], dist[:truncate]
        sentences.append((tokens, list(dist)))
    return sentences


def reference_blocks(sentences, mode, block_size):
    """[(start, end)] slices of the flat stream, following the documented break modes."""
    sizes = [len(tokens) for tokens, _ in sentences]
    total = sum(sizes)
    if mode == "none":
        return [(s, min(s + block_size, total)) for s in range(0, total, block_size)]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    if mode == "eos":
        return [(s, s + n) for s, n in zip(starts, sizes)]
    assert mode == "complete"  # whole sentences, as many as fit; a longer sentence alone
    blocks, start, length = [], 0, 0
    for n in sizes:
        if length > 0 and length + n > block_size:
            blocks.append((start, start + length))
            start, length = start + length, 0
        length += n
    blocks.append((start, start + length))
    return blocks


def reference(sentences, mode, block_size, add_bos=False):
    tokens = [t for s, _ in sentences for t in s]
    dists = [d for _, ds in sentences for d in ds]
    out = []
    for start, end in reference_blocks(sentences, mode, block_size):
        rows = [j - dists[start + j] if j - dists[start + j] >= 0 else -1 for j in range(end - start)]
        target = tokens[start:end]
        if add_bos:
            rows = [-1] + [r + 1 if r >= 0 else -1 for r in rows]
        out.append((target, rows))
    return out


def check(task, split, expected, seed, bos=None):
    seen = set()
    for batch in batches(task, split, seed):
        target, hints = batch["target"], batch["pointer_hints"]
        assert hints.shape == target.shape
        for row, block in enumerate(batch["id"].tolist()):
            tokens, rows = expected[block]
            if bos is not None:
                tokens = [bos] + tokens
            n = len(tokens)
            assert target[row, :n].tolist() == tokens
            assert hints[row].tolist() == rows + [-1] * (target.size(1) - n)
            seen.add(block)
    assert seen == set(range(len(expected)))


@pytest.mark.parametrize("mode,block_size", [("none", 5), ("none", 11), ("complete", 8), ("eos", 0)])
def test_blocks_carry_the_hints_of_their_stream_slice(corpus, mode, block_size):
    extra = ["--sample-break-mode", mode] + (["--tokens-per-sample", str(block_size)] if block_size else [])
    task = setup_task(corpus["dir"], *extra)
    task.load_dataset("train")
    assert isinstance(task.dataset("train"), HintedMonolingualDataset)
    sentences = stream(task, corpus["lines"]["train"], corpus["distances"]["train"])
    expected = reference(sentences, mode, block_size)
    assert len(task.dataset("train")) == len(expected)
    for seed in (1, 2):
        check(task, "train", expected, seed)
    if mode == "none":
        # some hints really were cut at a block start, and some reach into the previous sentence
        cut = sum(1 for _, rows in expected for j, r in enumerate(rows) if r < 0)
        assert cut > 0


def test_truncate_and_add_bos_token(corpus):
    task = setup_task(corpus["dir"], "--sample-break-mode", "eos", "--tokens-per-sample", "4", "--shorten-method", "truncate",
                      "--add-bos-token")
    task.load_dataset("train")
    sentences = stream(task, corpus["lines"]["train"], corpus["distances"]["train"], truncate=4)
    check(task, "train", reference(sentences, "eos", 4, add_bos=True), 1, bos=task.dictionary.bos())


def test_combined_shards(corpus):
    task = setup_task(corpus["dir"], "--sample-break-mode", "none", "--tokens-per-sample", "6")
    task.load_dataset("valid", combine=True)
    lines = corpus["lines"]["valid"] + corpus["lines"]["valid1"]
    distances = corpus["distances"]["valid"] + corpus["distances"]["valid1"]
    check(task, "valid", reference(stream(task, lines, distances), "none", 6), 1)


@pytest.mark.parametrize("mode", ["none", "complete", "eos"])
def test_batches_are_language_modelings_own_apart_from_the_hints(corpus, mode, tmp_path):
    extra = ["--sample-break-mode", mode, "--tokens-per-sample", "7"]
    parent = setup_task(corpus["dir"], *extra, task="language_modeling")
    parent.load_dataset("train")
    expected = batches(parent, "train", 4)
    hinted = setup_task(corpus["dir"], *extra)
    hinted.load_dataset("train")
    got = batches(hinted, "train", 4)
    assert len(got) == len(expected)
    for x, y in zip(got, expected):
        assert x.keys() - {"pointer_hints"} == y.keys()
        assert torch.equal(x["id"], y["id"]) and torch.equal(x["target"], y["target"])
        assert torch.equal(x["net_input"]["src_tokens"], y["net_input"]["src_tokens"])
        assert x["ntokens"] == y["ntokens"]
    bare = str(tmp_path / "bare")
    shutil.copytree(corpus["dir"], bare, ignore=shutil.ignore_patterns("*.hints.*"))
    without = setup_task(bare, *extra)
    without.load_dataset("train")
    assert not isinstance(without.dataset("train"), HintedMonolingualDataset)
    for x, y in zip(batches(without, "train", 4), expected):
        assert x.keys() == y.keys() and torch.equal(x["target"], y["target"]) and torch.equal(x["id"], y["id"])


def test_eval_lm_reads_the_tokens_only(corpus):
    task = setup_task(corpus["dir"], "--sample-break-mode", "none", "--tokens-per-sample", "6")
    task.load_dataset("valid")
    itr = task.eval_lm_dataloader(task.dataset("valid"), max_tokens=50, context_window=3)
    batch = next(iter(itr))
    assert "pointer_hints" not in batch


def test_random_crop_and_other_targets_are_refused(corpus):
    task = setup_task(corpus["dir"], "--shorten-method", "random_crop", "--tokens-per-sample", "4")
    with pytest.raises(HintDataError, match="--shorten-method random_crop is not supported with syntax hints"):
        task.load_dataset("train")
    # shortening only other splits is fine
    setup_task(corpus["dir"], "--shorten-method", "random_crop", "--shorten-data-split-list", "valid").load_dataset("train")
    task = setup_task(corpus["dir"], "--self-target")
    with pytest.raises(HintDataError, match="--self-target / --past-target"):
        task.load_dataset("train")


def test_hint_file_with_a_wrong_token_count_names_the_line(corpus, tmp_path):
    data = str(tmp_path / "data")
    shutil.copytree(corpus["dir"], data, ignore=shutil.ignore_patterns("*.hints.*"))
    distances = [list(d) for d in corpus["distances"]["train"]]
    distances[11] = distances[11][:-1]
    write_hint_dataset(hint_dataset_prefix(data, "train"), distances)
    n = len(corpus["lines"]["train"][11].split()) + 1
    with pytest.raises(HintDataError, match=f"train.hints.bin/.idx: line 12 has {n - 1} hints but .*train.bin/.idx has {n} tokens"):
        setup_task(data).load_dataset("train")
    with pytest.raises(HintDataError, match="train.hints.bin/.idx not found \\(--syntax-hints required\\)"):
        os.remove(hint_dataset_prefix(data, "train") + ".bin")
        setup_task(data, "--syntax-hints", "required").load_dataset("train")
