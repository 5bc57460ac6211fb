"""translation_with_syntax: hints written next to data binarised by
fairseq-preprocess reach every batch as absolute key rows, whatever the batch
order, padding side, shard or data directory; bad hint files fail naming the
file and line; without hints (and apart from the hints) the batches are
translation's own."""
import os
import random
import shutil

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.cli.pipeline import fairseq_command, run
from fairseq_plugins.data.hinted_datasets import HintedLanguagePairDataset
from fairseq_plugins.data.syntax_hints import HintDataError, hint_dataset_prefix, write_hint_dataset

PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
SIZES = {"train": 40, "valid": 9, "valid1": 7}


def sentence(rng, prefix):
    return " ".join(f"{prefix}{rng.randrange(12)}" for _ in range(rng.randint(1, 9)))


def write_raw(raw, seed):
    rng = random.Random(seed)
    os.makedirs(raw, exist_ok=True)
    lines = {}
    for split, n in SIZES.items():
        pairs = [(sentence(rng, "s"), sentence(rng, "t")) for _ in range(n)]
        lines[split] = [t for _, t in pairs]
        for side, column in (("src", 0), ("tgt", 1)):
            with open(os.path.join(raw, f"{split}.{side}"), "w") as f:
                f.writelines(p[column] + "\n" for p in pairs)
    return lines


def random_distances(lines, seed):
    """n + 1 distances per line; some point before the sentence start (d_t > t)."""
    rng = random.Random(seed)
    return [[rng.randint(0, t + 2) for t in range(len(line.split()) + 1)] for line in lines]


def expected_rows(distances):
    return [t - d if t - d >= 0 else -1 for t, d in enumerate(distances)]


def preprocess(raw, dest, extra=()):
    run(fairseq_command("preprocess") + [
        "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw}/train",
        "--validpref", f"{raw}/valid,{raw}/valid1", "--destdir", dest, "--workers", "1", *extra,
    ])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two data directories (the second uses the first's dictionaries) with hints for every split."""
    root = tmp_path_factory.mktemp("translation_hints")
    data = {}
    for name, seed in (("a", 1), ("b", 2)):
        lines = write_raw(str(root / f"raw_{name}"), seed)
        extra = [] if name == "a" else ["--srcdict", str(root / "a" / "dict.src.txt"), "--tgtdict", str(root / "a" / "dict.tgt.txt")]
        preprocess(str(root / f"raw_{name}"), str(root / name), extra)
        distances = {}
        for split in SIZES:
            distances[split] = random_distances(lines[split], seed=10 * seed + list(SIZES).index(split))
            write_hint_dataset(hint_dataset_prefix(str(root / name), split, "src", "tgt"), distances[split])
        data[name] = {"dir": str(root / name), "lines": lines, "distances": distances}
    return data


def setup_task(data, *extra, task="translation_with_syntax"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        input_args=[data, "--task", task, "--arch", "mixed_transformer", "--user-dir", PLUGIN_DIR, "-s", "src", "-t", "tgt", *extra],
    )
    return tasks.setup_task(args)


def batches(task, split, seed=1, max_tokens=30):
    itr = task.get_batch_iterator(
        dataset=task.dataset(split), max_tokens=max_tokens, seed=seed, disable_iterator_cache=True, required_batch_size_multiple=1,
    )
    return list(itr.next_epoch_itr(shuffle=True))


def check_batches(task, split, lines, distances, seed, max_tokens, left_pad=False):
    seen = []
    for batch in batches(task, split, seed, max_tokens):
        target, hints = batch["target"], batch["pointer_hints"]
        assert hints.shape == target.shape and hints.dtype == torch.long
        width = target.size(1)
        for row, sample_id in enumerate(batch["id"].tolist()):
            encoded = task.tgt_dict.encode_line(lines[sample_id], add_if_not_exist=False).long()
            n = encoded.numel()
            offset = width - n if left_pad else 0
            # the row really is sentence sample_id ...
            assert torch.equal(target[row, offset : offset + n], encoded)
            # ... and carries that sentence's hints as key rows of this batch
            expected = [-1] * width
            for t, key in enumerate(expected_rows(distances[sample_id])):
                expected[offset + t] = key + offset if key >= 0 else -1
            assert hints[row].tolist() == expected
            seen.append(sample_id)
    return sorted(seen)


@pytest.mark.parametrize("seed,max_tokens,extra", [(1, 30, []), (2, 30, []), (3, 80, []), (1, 80, ["--num-batch-buckets", "3"])])
def test_hints_survive_binarisation_and_batching(corpus, seed, max_tokens, extra):
    a = corpus["a"]
    task = setup_task(a["dir"], *extra)
    task.load_dataset("train")
    assert isinstance(task.dataset("train"), HintedLanguagePairDataset)
    seen = check_batches(task, "train", a["lines"]["train"], a["distances"]["train"], seed, max_tokens)
    assert seen == list(range(SIZES["train"]))
    # different seeds give different batch orders, and hints follow them
    first = [b["id"].tolist() for b in batches(task, "train", seed, max_tokens)]
    other = [b["id"].tolist() for b in batches(task, "train", seed + 10, max_tokens)]
    assert first != other


def test_hints_before_the_sentence_start_are_counted_in_a_warning(corpus, caplog):
    """random_distances points some hints before their sentence's start: they are not used, and the loader says
    how many (issue 35: they were dropped without a word)."""
    a = corpus["a"]
    distances = a["distances"]["train"]
    bad = [(i, t, d) for i, line in enumerate(distances) for t, d in enumerate(line) if d > t]
    assert bad  # (the fixture has some)
    with caplog.at_level("WARNING"):
        setup_task(a["dir"]).load_dataset("train")
    prefix = hint_dataset_prefix(a["dir"], "train", "src", "tgt")
    i, t, d = bad[0]
    assert (f"{prefix}.bin: {len(bad)} of {sum(map(len, distances))} hints, in {len({b[0] for b in bad})} of "
            f"{len(distances)} sentences, point before the start of their sentence and are not used (the first: sentence "
            f"{i + 1}, row {t}, distance {d})") in caplog.text


@pytest.mark.parametrize("extra", [[], ["--num-batch-buckets", "3"]])
def test_left_padded_targets_shift_the_key_rows(corpus, extra):
    a = corpus["a"]
    task = setup_task(a["dir"], "--left-pad-target", *extra)
    task.load_dataset("train")
    seen = check_batches(task, "train", a["lines"]["train"], a["distances"]["train"], 1, 40, left_pad=True)
    assert seen == list(range(SIZES["train"]))
    assert any(b["target"][:, 0].eq(task.tgt_dict.pad()).any() for b in batches(task, "train", 1, 40))


def test_combined_shards_carry_their_own_hints(corpus):
    a = corpus["a"]
    task = setup_task(a["dir"], "--upsample-primary", "1")
    task.load_dataset("valid", combine=True)
    lines = a["lines"]["valid"] + a["lines"]["valid1"]
    distances = a["distances"]["valid"] + a["distances"]["valid1"]
    assert check_batches(task, "valid", lines, distances, 1, 30) == list(range(len(lines)))


def test_data_directories_rotate_by_epoch_for_train_only(corpus):
    a, b = corpus["a"], corpus["b"]
    task = setup_task(f"{a['dir']}:{b['dir']}")
    task.load_dataset("train", epoch=2)  # second directory
    assert check_batches(task, "train", b["lines"]["train"], b["distances"]["train"], 1, 30) == list(range(SIZES["train"]))
    task.load_dataset("valid", epoch=2)  # valid and test always come from the first
    assert check_batches(task, "valid", a["lines"]["valid"], a["distances"]["valid"], 1, 30) == list(range(SIZES["valid"]))


def assert_same_batches(left, right, drop=()):
    assert len(left) == len(right)
    for x, y in zip(left, right):
        x = {k: v for k, v in x.items() if k not in drop}
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], dict):
                assert x[key].keys() == y[key].keys()
                for k in x[key]:
                    assert torch.equal(x[key][k], y[key][k])
            elif torch.is_tensor(x[key]):
                assert torch.equal(x[key], y[key])
            else:
                assert x[key] == y[key]


def test_batches_are_translations_own_apart_from_the_hints(corpus, tmp_path):
    a = corpus["a"]
    parent = setup_task(a["dir"], task="translation")
    parent.load_dataset("train")
    with_hints = setup_task(a["dir"])
    with_hints.load_dataset("train")
    expected = batches(parent, "train", 5, 40)
    got = batches(with_hints, "train", 5, 40)
    assert all("pointer_hints" in b for b in got)
    assert_same_batches(got, expected, drop=("pointer_hints",))
    # no hint files: exactly the parent's batches, no pointer_hints
    bare = str(tmp_path / "bare")
    shutil.copytree(a["dir"], bare, ignore=shutil.ignore_patterns("*.hints.*"))
    without = setup_task(bare)
    without.load_dataset("train")
    assert not isinstance(without.dataset("train"), HintedLanguagePairDataset)
    assert_same_batches(batches(without, "train", 5, 40), expected)
    # --syntax-hints off ignores existing files
    off = setup_task(a["dir"], "--syntax-hints", "off")
    off.load_dataset("train")
    assert_same_batches(batches(off, "train", 5, 40), expected)


def copy_without_hints(corpus, tmp_path):
    target = str(tmp_path / "data")
    shutil.copytree(corpus["a"]["dir"], target, ignore=shutil.ignore_patterns("*.hints.*"))
    return target


def test_hint_file_with_a_wrong_line_count_fails(corpus, tmp_path):
    data = copy_without_hints(corpus, tmp_path)
    prefix = hint_dataset_prefix(data, "train", "src", "tgt")
    write_hint_dataset(prefix, corpus["a"]["distances"]["train"][:-1])
    with pytest.raises(HintDataError, match=f"{prefix}.bin/.idx has 39 sentences but .*train.src-tgt.tgt.bin/.idx has 40"):
        setup_task(data).load_dataset("train")


def test_hint_file_with_a_wrong_token_count_names_the_line(corpus, tmp_path):
    data = copy_without_hints(corpus, tmp_path)
    distances = [list(d) for d in corpus["a"]["distances"]["train"]]
    distances[6].append(0)  # line 7 gets one hint too many
    write_hint_dataset(hint_dataset_prefix(data, "train", "src", "tgt"), distances)
    n = len(corpus["a"]["lines"]["train"][6].split()) + 1
    with pytest.raises(HintDataError, match=f"line 7 has {n + 1} hints but .* has {n} tokens there"):
        setup_task(data).load_dataset("train")


def test_required_hints_missing_names_the_file_and_the_tool(corpus, tmp_path):
    data = copy_without_hints(corpus, tmp_path)
    task = setup_task(data, "--syntax-hints", "required")
    prefix = hint_dataset_prefix(data, "valid", "src", "tgt")
    with pytest.raises(HintDataError, match=f"{prefix}.bin/.idx not found \\(--syntax-hints required\\).*data_prep/syntax_hints.py"):
        task.load_dataset("valid")


def test_a_shard_without_hints_is_an_error_when_others_have_them(corpus, tmp_path):
    data = copy_without_hints(corpus, tmp_path)
    write_hint_dataset(hint_dataset_prefix(data, "valid", "src", "tgt"), corpus["a"]["distances"]["valid"])
    task = setup_task(data, "--upsample-primary", "1")
    missing = hint_dataset_prefix(data, "valid1", "src", "tgt")
    with pytest.raises(HintDataError, match=f"{missing}.bin/.idx not found \\(other shards of split 'valid' have hints\\)"):
        task.load_dataset("valid", combine=True)


def pointer_criterion(task, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        input_args=[task.cfg.data, "--task", "translation_with_syntax", "--arch", "mixed_transformer", "--user-dir", PLUGIN_DIR,
                    "--criterion", "label_smoothed_cross_entropy_with_pointer", *extra],
    )
    return task.build_criterion(args)


def test_pointer_criterion_makes_hints_required_for_later_splits(corpus, tmp_path):
    data = copy_without_hints(corpus, tmp_path)
    write_hint_dataset(hint_dataset_prefix(data, "train", "src", "tgt"), corpus["a"]["distances"]["train"])
    task = setup_task(data)
    pointer_criterion(task)
    task.load_dataset("train")
    with pytest.raises(HintDataError, match="valid.src-tgt.tgt.hints.bin/.idx not found \\(--criterion label_smoothed_cross_entropy_with_pointer with --pointer-loss-weight 1 needs them\\)"):
        task.load_dataset("valid")
    # a split loaded before the criterion without hints: error when the criterion is built
    task = setup_task(data)
    task.load_dataset("valid")
    with pytest.raises(HintDataError, match="split 'valid' was loaded without them"):
        pointer_criterion(task)
    # lambda_p = 0 needs no hints
    task = setup_task(data)
    task.load_dataset("valid")
    pointer_criterion(task, "--pointer-loss-weight", "0")
    # --syntax-hints off cannot feed the pointer loss
    with pytest.raises(HintDataError, match="--syntax-hints off"):
        pointer_criterion(setup_task(data, "--syntax-hints", "off"))


def test_generation_ignores_the_hints(corpus):
    a = corpus["a"]
    task = setup_task(a["dir"])
    task.load_dataset("valid")
    torch.manual_seed(0)
    model = task.build_model(model_args(a["dir"]))
    model.eval()
    parser = options.get_generation_parser()
    generator = task.build_generator([model], options.parse_args_and_arch(parser, input_args=[a["dir"], "--user-dir", PLUGIN_DIR, "--beam", "3", "--max-len-b", "6"]))
    batch = batches(task, "valid", 1, 200)[0]
    assert "pointer_hints" in batch
    hinted = task.inference_step(generator, [model], batch)
    plain = task.inference_step(generator, [model], {k: v for k, v in batch.items() if k != "pointer_hints"})
    assert len(hinted) == batch["target"].size(0) == SIZES["valid"]
    assert [[h["tokens"].tolist() for h in hyps] for hyps in hinted] == [[h["tokens"].tolist() for h in hyps] for hyps in plain]


def model_args(data):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser,
        input_args=[data, "--task", "translation_with_syntax", "--arch", "mixed_transformer", "--user-dir", PLUGIN_DIR, "-s", "src", "-t", "tgt",
                    "--encoder-layers", "1", "--decoder-layers", "2", "--decoder-attention-kinds", "bet,softmax",
                    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                    "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0"],
    )


@pytest.mark.parametrize("damage", ["truncated_bin", "longer_bin", "empty_idx", "truncated_idx"])
def test_damaged_hint_files_fail_when_the_split_is_loaded(corpus, tmp_path, damage):
    """Sizes are checked against the .idx when the hints are opened, not at the first batch that reads
    past the end of the .bin (or inside fairseq's index reader)."""
    data = copy_without_hints(corpus, tmp_path)
    prefix = hint_dataset_prefix(data, "train", "src", "tgt")
    write_hint_dataset(prefix, corpus["a"]["distances"]["train"])
    values = sum(len(d) for d in corpus["a"]["distances"]["train"])
    bin_size, idx_size = os.path.getsize(prefix + ".bin"), os.path.getsize(prefix + ".idx")
    assert bin_size == 4 * values and idx_size == 26 + 12 * 40  # int32 values; header, int32 sizes, int64 offsets
    if damage in ("truncated_bin", "longer_bin"):
        size = bin_size - 8 if damage == "truncated_bin" else bin_size + 4
        with open(prefix + ".bin", "r+b") as f:
            f.truncate(size)
        match = (f"^{prefix}.bin has {size} bytes, but {prefix}.idx lists 40 sentences of {values} values \\({bin_size} "
                 "bytes\\): the .bin is truncated or belongs to another index; write the hint dataset again with "
                 "data_prep/syntax_hints.py$")
    elif damage == "empty_idx":
        open(prefix + ".idx", "wb").close()
        match = f"^{prefix}.idx is empty; write the hint dataset again with data_prep/syntax_hints.py$"
    else:
        with open(prefix + ".idx", "r+b") as f:
            f.truncate(idx_size - 12)
        match = (f"^{prefix}.idx has {idx_size - 12} bytes, but its header lists 40 sentences \\({idx_size} bytes\\): "
                 "the .idx is truncated; write the hint dataset again with data_prep/syntax_hints.py$")
    with pytest.raises(HintDataError, match=match):
        setup_task(data, "--syntax-hints", "required").load_dataset("train")
