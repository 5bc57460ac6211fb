"""Every recipe as a researcher runs it, on the dataset's sample (prepared
from its raw format, see tests/data_prep/prepared.py): prepare.sh (finds the
preparation up to date) -> train.sh with a shrunk preset for a few updates ->
generate.sh (beam search, tokenized BLEU, sacreBLEU with signature) or
evaluate.sh (fairseq-eval-lm: perplexity or bits per character)."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from prepared import ROOT_DIR

RECIPES = os.path.join(ROOT_DIR, "recipes")
TINY_SIZES = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-attention-heads", "2",
              "--decoder-attention-heads", "2", "--dropout", "0.0"]
TINY_TRANSLATION = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-ffn-embed-dim", "64",
                    "--decoder-ffn-embed-dim", "64", *TINY_SIZES]
TINY_LM = ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]


def recipe(dataset, script, *args, env):
    result = subprocess.run(["bash", os.path.join(RECIPES, dataset, script), *args], capture_output=True, text=True,
                            env=env, cwd=env["TEST_CWD"])
    assert result.returncode == 0, f"{dataset}/{script} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def environment(prepared, tmp_path, **overrides):
    env = dict(os.environ, DATA_BIN=prepared.dest, WORK_DIR=prepared.work_dir, SAVE_DIR=str(tmp_path / "checkpoints"),
               PYTHON=sys.executable, NUM_GPUS="0", MAX_UPDATE="3", MAX_TOKENS="1500", UPDATE_FREQ="1", LOG_INTERVAL="1",
               DATA_WORKERS="0", TEST_CWD=str(tmp_path))
    env.update(overrides)
    return env


def prepare_again(prepared, dataset, env):
    """prepare.sh with the arguments of the session's preparation: nothing left to do."""
    flags = [a for i, a in enumerate(prepared.argv) if a not in ("--dest", "--work-dir") and prepared.argv[i - 1] not in ("--dest", "--work-dir")]
    result = subprocess.run(["bash", os.path.join(RECIPES, dataset, "prepare.sh"), *flags], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stderr and " ...\n" not in result.stderr


TRANSLATION = [
    # dataset, preset (None: the recipe's default), flags, environment
    ("iwslt14_de_en", "mixed_transformer_iwslt_de_en", TINY_TRANSLATION, {}),
    ("wmt14_en_de", None, ["--encoder-layer-ffn-embed-dims", "64", "--decoder-layer-ffn-embed-dims", "64", *TINY_SIZES],
     {"SAVE_INTERVAL_UPDATES": "1", "AVERAGE_LAST": "2"}),  # mformer_wmt_en_de's layout, shrunk; averaging as the paper
    ("wmt17_en_de", "cosformer_iwslt_de_en", TINY_TRANSLATION, {"AVERAGE_LAST": "0"}),
    ("multi30k", "mformer_iwslt_de_en", ["--decoder-layers", "1", "--encoder-ffn-embed-dim", "64",
                                         "--decoder-ffn-embed-dim", "64", *TINY_SIZES],
     {"SRC": "en", "TGT": "de", "SUBSETS": "test test3"}),  # en-de; test 2016 flickr and 2017 mscoco
]


@pytest.mark.parametrize("dataset, preset, flags, overrides", TRANSLATION, ids=[t[0] for t in TRANSLATION])
def test_translation_recipe(prepare_sample, tmp_path, dataset, preset, flags, overrides):
    prepared = prepare_sample(dataset)
    env = environment(prepared, tmp_path, GEN_EXTRA_ARGS="--max-len-a 0 --max-len-b 8", **overrides)
    prepare_again(prepared, dataset, env)
    recipe(dataset, "train.sh", *([preset] if preset else []), *flags, env=env)
    out = recipe(dataset, "generate.sh", *([preset] if preset else []), env=env)
    subsets = overrides.get("SUBSETS", "").split() or [
        line.split("\t")[0] for line in open(os.path.join(prepared.dest, "testsets.tsv")).read().splitlines()]
    tgt = overrides.get("TGT") or json.load(open(os.path.join(prepared.dest, "prepare.json")))["tgt"]
    for subset in subsets:
        score = json.load(open(tmp_path / "checkpoints" / "generate" / f"score-{subset}.json"))
        assert score["sentences"] == len(open(os.path.join(prepared.dest, "refs", f"{subset}.{tgt}")).read().splitlines())
        assert 0 <= score["sacrebleu"] <= 100 and 0 <= score["tokenized_bleu"] <= 100
        assert f"{subset}: sacreBLEU signature: nrefs:1|case:" in out and "|tok:13a|" in out
    assert "tokenized BLEU" in out
    if dataset == "wmt14_en_de":
        assert "compound splitting" in out and score["compound_split"]
        assert os.path.exists(tmp_path / "checkpoints" / "checkpoint_avg_last2.pt")
    if dataset in ("iwslt14_de_en", "multi30k"):
        assert "case:lc" in out  # the preparation lower-cases


def tensorboard_scalars(folder):
    """{tag: [values]} of every tensorboardX event file under folder (TFRecord framing: length, its CRC, the
    serialised Event, its CRC)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    scalars = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            event = Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(value.simple_value)
    return scalars


def test_translation_recipe_selects_checkpoints_by_valid_bleu_and_logs_to_tensorboard(prepare_sample, tmp_path):
    """EVAL_BLEU=1: fairseq-train beam-decodes the valid set at validation, logs its BLEU and keeps
    checkpoint_best.pt by it; TENSORBOARD_DIR: the run's scalars (train and valid, BLEU included) in
    $TENSORBOARD_DIR/<run> through tensorboardX."""
    prepared = prepare_sample("iwslt14_de_en")
    tensorboard = tmp_path / "tensorboard"
    env = environment(prepared, tmp_path, EVAL_BLEU="1", TENSORBOARD_DIR=str(tensorboard))
    recipe("iwslt14_de_en", "train.sh", "mixed_transformer_iwslt_de_en", *TINY_TRANSLATION, env=env)
    log = (tmp_path / "checkpoints" / "train.log").read_text()
    valid = [line for line in log.splitlines() if "| valid on 'valid' subset |" in line]
    bleu = [float(re.search(r"\| bleu ([0-9.]+) ", line).group(1)) for line in valid if "| bleu " in line]
    assert valid and len(bleu) == len(valid), valid
    assert "Please install tensorboardX" not in log and "tensorboard not found" not in log
    # checkpoint_best.pt was chosen by that BLEU: fairseq stores the selecting metric's value with it
    import torch

    import fairseq_plugins  # noqa: F401  (safe globals for weights-only loading)

    best = torch.load(tmp_path / "checkpoints" / "checkpoint_best.pt", map_location="cpu")
    assert best["cfg"]["checkpoint"]["best_checkpoint_metric"] == "bleu"
    assert best["cfg"]["checkpoint"]["maximize_best_checkpoint_metric"] is True
    assert best["extra_state"]["val_loss"] == pytest.approx(bleu[-1], abs=0.01)
    # ... and generate.sh evaluates it (its valid-BLEU meters are numpy arrays, which weights-only loading
    # must accept for fairseq-generate, as for resuming)
    recipe("iwslt14_de_en", "generate.sh", "mixed_transformer_iwslt_de_en",
           env=dict(env, GEN_EXTRA_ARGS="--max-len-a 0 --max-len-b 8"))
    generated = (tmp_path / "checkpoints" / "generate" / "generate-test.txt").read_text()
    assert f"loading model(s) from {tmp_path / 'checkpoints' / 'checkpoint_best.pt'}" in generated
    score = json.load(open(tmp_path / "checkpoints" / "generate" / "score-test.json"))
    assert score["sentences"] == len(open(os.path.join(prepared.dest, "refs", "test.en")).read().splitlines())
    # the run's folder: SAVE_DIR relative to the current directory (the test's tmp_path), as documented
    run = tensorboard / "checkpoints"
    assert sorted(p.name for p in run.iterdir()) == ["train", "train_inner", "valid"]
    scalars = tensorboard_scalars(run / "valid")
    assert scalars["bleu"] == pytest.approx(bleu, abs=0.01) and "nll_loss" in scalars
    assert len(tensorboard_scalars(run / "train_inner")["loss"]) == 3  # LOG_INTERVAL=1, MAX_UPDATE=3


def test_eval_bleu_and_tensorboard_options_build_the_documented_commands(tmp_path):
    # (a folder of your own data: checkpoints and TensorBoard runs are named after it)
    data_bin = tmp_path / "iwslt14_de_en"
    data_bin.mkdir()
    env = dict(os.environ, DRY_RUN="1", NUM_GPUS="0", PYTHON=sys.executable, DATA_BIN=str(data_bin))
    env.pop("SAVE_DIR", None)
    train = lambda dataset, *args, **overrides: subprocess.run(  # noqa: E731
        ["bash", os.path.join(RECIPES, dataset, "train.sh"), *args], capture_output=True, text=True,
        env=dict(env, **overrides), cwd=tmp_path)
    (data_bin / "prepare.json").write_text(json.dumps({"bpe": "subword-nmt"}))
    plain = train("iwslt14_de_en").stdout
    assert "--eval-bleu" not in plain and "--tensorboard-logdir" not in plain and "--best-checkpoint-metric" not in plain
    words = shlex.split(train("iwslt14_de_en", "cosformer_iwslt_de_en", EVAL_BLEU="1", TENSORBOARD_DIR="tb").stdout)
    assert json.loads(words[words.index("--eval-bleu-args") + 1]) == {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2,
                                                                      "max_len_b": 10}
    assert words[words.index("--eval-bleu-remove-bpe") + 1] == "@@ "
    assert words[words.index("--eval-bleu-detok") + 1] == "moses"
    assert json.loads(words[words.index("--eval-bleu-detok-args") + 1]) == {"target_lang": "en"}
    assert "--eval-bleu" in words and "--maximize-best-checkpoint-metric" in words
    assert words[words.index("--best-checkpoint-metric") + 1] == "bleu"
    assert words[words.index("--tensorboard-logdir") + 1] == "tb/iwslt14_de_en/cosformer_iwslt_de_en"
    # WMT: the recipe's beam 4 and length penalty 0.6; sentencepiece data is decoded, not Moses-detokenised
    (data_bin / "prepare.json").write_text(json.dumps({"bpe": "sentencepiece"}))
    words = shlex.split(train("wmt14_en_de", EVAL_BLEU="1").stdout)
    assert json.loads(words[words.index("--eval-bleu-args") + 1])["beam"] == 4
    assert json.loads(words[words.index("--eval-bleu-args") + 1])["lenpen"] == 0.6
    assert words[words.index("--eval-bleu-remove-bpe") + 1] == "sentencepiece"
    assert words[words.index("--eval-bleu-detok") + 1] == "space" and "--eval-bleu-detok-args" not in words
    # the language models log to TensorBoard the same way; SAVE_DIR names the run
    words = shlex.split(train("wikitext2", "cosformer_lm_tiny", TENSORBOARD_DIR="/tb",
                              SAVE_DIR="checkpoints/wikitext2/cosformer").stdout)
    assert words[words.index("--tensorboard-logdir") + 1] == "/tb/wikitext2/cosformer"
    # refused, with the reason: a language model has no BLEU; a value other than 0/1; data not prepared
    result = train("wikitext2", EVAL_BLEU="1")
    assert result.returncode == 2 and not result.stdout and "EVAL_BLEU=1: valid BLEU is for the translation" in result.stderr
    result = train("multi30k", EVAL_BLEU="yes")
    assert result.returncode == 2 and not result.stdout and "EVAL_BLEU=yes: expected 1" in result.stderr
    result = train("multi30k", EVAL_BLEU="1", DATA_BIN=str(tmp_path / "missing"))
    assert result.returncode == 2 and f"DATA_BIN={tmp_path / 'missing'} does not exist" in result.stderr
    # binaries of your own (docs/own-data.md: subword-nmt, no prepare.json): subword-nmt's "@@ " and Moses
    (data_bin / "prepare.json").unlink()
    words = shlex.split(train("multi30k", EVAL_BLEU="1").stdout)
    assert words[words.index("--eval-bleu-remove-bpe") + 1] == "@@ "
    assert words[words.index("--eval-bleu-detok") + 1] == "moses"
    (data_bin / "prepare.json").write_text(json.dumps({"bpe": "bytes"}))
    result = train("iwslt14_de_en", EVAL_BLEU="1")
    assert result.returncode == 2 and "bpe 'bytes'" in result.stderr


def test_multi30k_syntax_hints_recipe(prepare_sample, tmp_path, tmp_path_factory):
    """BET(SG) through the recipe: syntax_hints.sh writes the hints of every subset's target text (the BPE'd
    text the preparation binarised) next to a copy of the binaries, then train.sh with SYNTAX_HINTS=1 trains
    translation_with_syntax with the pointer loss (a stock softmax decoder, two updates)."""
    import shutil

    from toy_treebank import small_parser

    prepared = prepare_sample("multi30k")
    data_bin = tmp_path / "data-bin"
    shutil.copytree(prepared.dest, data_bin)  # the session's preparation stays as it is
    model = small_parser(tmp_path_factory) / "model-best"
    env = environment(prepared, tmp_path, DATA_BIN=str(data_bin), SPACY_MODEL=str(model), MAX_UPDATE="2")
    recipe("multi30k", "syntax_hints.sh", env=env)
    subsets = ["train", "valid"] + [line.split("\t")[0] for line in (data_bin / "testsets.tsv").read_text().splitlines()]
    assert len(subsets) == 6  # test, test1..test3
    for subset in subsets:  # the default direction, de-en: hints of the English side
        info = json.loads((data_bin / f"{subset}.de-en.en.hints.info.json").read_text())
        assert (data_bin / f"{subset}.de-en.en.hints.bin").exists()
        name = subset if subset in ("train", "valid") else dict(
            line.split("\t") for line in (data_bin / "testsets.tsv").read_text().splitlines())[subset]
        assert info["input"] == os.path.join(prepared.work_dir, "bpe", f"{name}.en")
    dry = recipe("multi30k", "train.sh", "transformer_iwslt_de_en", env=dict(env, DRY_RUN="1", SYNTAX_HINTS="1",
                                                                              POINTER_LOSS_WEIGHT="0.5"))
    assert "--task translation_with_syntax --syntax-hints required" in dry
    assert "--criterion label_smoothed_cross_entropy_with_pointer --pointer-loss-weight 0.5" in dry
    assert "--task translation " not in dry and "--criterion label_smoothed_cross_entropy " not in dry
    plain = recipe("multi30k", "train.sh", env=dict(env, DRY_RUN="1"))
    assert "--task translation " in plain and "--criterion label_smoothed_cross_entropy " in plain
    recipe("multi30k", "train.sh", "bet_sg_iwslt_de_en", *TINY_TRANSLATION, env=dict(env, SYNTAX_HINTS="1"))
    log = (tmp_path / "checkpoints" / "train.log").read_text()
    assert "loaded syntax hints" in log and "pointer_loss" in log


def test_syntax_hints_recipe_needs_a_model_and_the_hints(prepare_sample, tmp_path):
    prepared = prepare_sample("multi30k")
    env = environment(prepared, tmp_path, DATA_BIN=str(tmp_path / "missing"), SPACY_MODEL="")
    for dataset in ("multi30k", "wikitext2"):
        result = subprocess.run(["bash", os.path.join(RECIPES, dataset, "syntax_hints.sh")], capture_output=True,
                                text=True, env=env)
        assert result.returncode != 0 and "SPACY_MODEL" in result.stderr
        result = subprocess.run(["bash", os.path.join(RECIPES, dataset, "train.sh")], capture_output=True, text=True,
                                env=dict(env, SYNTAX_HINTS="1"))
        assert result.returncode != 0 and f"{dataset}/syntax_hints.sh" in result.stderr
    # a byte-level corpus has no words to parse: BET(SG) is refused with the reason, even for a dry run
    result = subprocess.run(["bash", os.path.join(RECIPES, "enwik8", "train.sh"), "bet_sf_lm_enwik8"],
                            capture_output=True, text=True, env=dict(env, SYNTAX_HINTS="1", DRY_RUN="1"))
    assert result.returncode != 0 and not result.stdout
    assert "one token per byte" in result.stderr and "no words" in result.stderr
    assert not os.path.exists(os.path.join(RECIPES, "enwik8", "syntax_hints.sh"))
    # word-level data only: the language-model hint step refuses a byte-level preparation
    byte_level = prepare_sample("enwik8")
    result = subprocess.run(["bash", os.path.join(RECIPES, "wikitext2", "syntax_hints.sh")], capture_output=True,
                            text=True, env=dict(env, DATA_BIN=byte_level.dest, WORK_DIR=byte_level.work_dir,
                                                SPACY_MODEL=str(tmp_path / "unused")))
    assert result.returncode != 0 and "not per word" in result.stderr


LANGUAGE_MODELS = [
    # dataset, preset, what evaluate.sh reports, BET(SG) (syntax_hints.sh, then SYNTAX_HINTS=1 train.sh)
    ("wikitext103", "bet_sf_lm_wikitext", "perplexity", True),
    ("wikitext2", "cosformer_lm_tiny", "perplexity", False),
    ("enwik8", "mformer_lm_tiny", "bits per character", False),
]


@pytest.mark.parametrize("dataset, preset, reported, syntax_hints", LANGUAGE_MODELS, ids=[m[0] for m in LANGUAGE_MODELS])
def test_language_model_recipe(prepare_sample, tmp_path, tmp_path_factory, dataset, preset, reported, syntax_hints):
    prepared = prepare_sample(dataset)
    env = environment(prepared, tmp_path, TOKENS_PER_SAMPLE="64", CONTEXT_WINDOW="32", MAX_TOKENS="512")
    prepare_again(prepared, dataset, env)
    flags = list(TINY_LM)
    if syntax_hints:
        env = lm_syntax_hints(prepared, dataset, tmp_path, tmp_path_factory, env)
        flags += ["--decoder-layers", "2"]
    recipe(dataset, "train.sh", preset, *flags, env=env)
    if syntax_hints:
        log = (tmp_path / "checkpoints" / "train.log").read_text()
        assert "loaded syntax hints" in log and "pointer_loss" in log
    out = recipe(dataset, "evaluate.sh", preset, env=env)
    assert reported in out
    score = json.load(open(tmp_path / "checkpoints" / "evaluate" / "score-test.json"))
    assert score["perplexity"] > 1 and score["tokens"] > 0
    if dataset == "enwik8":
        assert 0 < score["bits_per_character"] < 9  # a byte has at most 8 bits; an untrained model may spend a bit more
        test_bytes = os.path.getsize(os.path.join(prepared.work_dir, "text", "test.raw"))
        assert score["tokens"] in (test_bytes, test_bytes + 1)  # one token per byte


def lm_syntax_hints(prepared, dataset, tmp_path, tmp_path_factory, env):
    """BET(SG) of a word-level LM recipe: syntax_hints.sh writes {split}.hints of every split from the text
    fairseq-preprocess binarised ($WORK_DIR/text/{split}.txt, words as they are: --bpe none) next to a copy of
    the binaries; SYNTAX_HINTS=1 selects language_modeling_with_syntax and the pointer criterion. Returns the
    environment that trains on the copy (with SYNTAX_HINTS=1)."""
    import shutil

    from toy_treebank import small_parser

    data_bin = tmp_path / "data-bin"
    shutil.copytree(prepared.dest, data_bin)  # the session's preparation stays as it is
    env = dict(env, DATA_BIN=str(data_bin), SPACY_MODEL=str(small_parser(tmp_path_factory) / "model-best"),
               MAX_UPDATE="2")
    recipe(dataset, "syntax_hints.sh", env=env)
    for split in ("train", "valid", "test"):
        info = json.loads((data_bin / f"{split}.hints.info.json").read_text())
        assert (data_bin / f"{split}.hints.bin").exists() and (data_bin / f"{split}.hints.idx").exists()
        assert info["input"] == os.path.join(prepared.work_dir, "text", f"{split}.txt")
        assert info["fingerprint"]["bpe"] == "none"  # word-level text: every token is a word
    dry = recipe(dataset, "train.sh", env=dict(env, DRY_RUN="1", SYNTAX_HINTS="1", POINTER_LOSS_WEIGHT="0.5"))
    assert "--task language_modeling_with_syntax --syntax-hints required" in dry
    assert "--criterion label_smoothed_cross_entropy_with_pointer --pointer-loss-weight 0.5 --label-smoothing 0" in dry
    assert "--task language_modeling " not in dry and "--criterion cross_entropy" not in dry
    plain = recipe(dataset, "train.sh", env=dict(env, DRY_RUN="1"))
    assert "--task language_modeling " in plain and "--criterion cross_entropy" in plain
    # no BET(SG) LM preset: by default the SG run keeps its checkpoints apart from the BET(SF) run's
    default_dir = {k: v for k, v in env.items() if k != "SAVE_DIR"}
    checkpoints = os.path.join(ROOT_DIR, "checkpoints", "data-bin")  # (a DATA_BIN of one's own: its folder's name)
    dry = recipe(dataset, "train.sh", "bet_sf_lm_wikitext", env=dict(default_dir, DRY_RUN="1", SYNTAX_HINTS="1"))
    assert f"--save-dir {checkpoints}/bet_sf_lm_wikitext_sg " in dry
    plain = recipe(dataset, "train.sh", "bet_sf_lm_wikitext", env=dict(default_dir, DRY_RUN="1"))
    assert f"--save-dir {checkpoints}/bet_sf_lm_wikitext " in plain
    return dict(env, SYNTAX_HINTS="1")


TINY_SPACE = """
shared_embed_dim: true
encoder: {embed_dim: [16, 32], layers: [1], ffn_embed_dim: [32, 64], attention_heads: [2], attention_kinds: [softmax, cosformer]}
decoder: {embed_dim: [16, 32], layers: [1, 2], ffn_embed_dim: [32, 64], attention_heads: [2], attention_kinds: [softmax, cosformer],
          cross_attention_heads: [2], cross_attention_kinds: [softmax, cosformer], encoder_decoder_connect: [1]}
"""


def test_search_recipe_runs_every_stage_on_wmt_raw_data_and_resumes(prepare_sample, tmp_path):
    """recipes/wmt14_en_de/search.sh on the WMT sample with a tiny space: supernet.sh's supernet, collect,
    rank, prune, evolve under a latency budget (predicted, confirmed by measurement), train.sh on the found
    architecture and generate.sh on it; then the stages that resume find their work done. (FLOPs and
    parameter budgets: tests/search.)"""
    prepared = prepare_sample("wmt14_en_de")
    (tmp_path / "space.yaml").write_text(TINY_SPACE)
    search_dir = tmp_path / "search"
    env = environment(prepared, tmp_path, SEARCH_SPACE=str(tmp_path / "space.yaml"), SEARCH_DIR=str(search_dir),
                      MAX_UPDATE="4", TOKENS_PER_UPDATE="1500", SUPERNET_SAMPLING="sandwich", SANDWICH_RANDOM="1",
                      LOSS_SAMPLES="12", LATENCY_SAMPLES="12", LATENCY_SOURCE_LENGTH="5", LATENCY_TARGET_LENGTH="4",
                      LATENCY_BEAM="2", LATENCY_THREADS="1", LATENCY_DEVICE="cpu", PRUNE_KEEP="3",
                      LATENCY_WARMUP="1", LATENCY_REPEATS="3", LATENCY_MAX_SPREAD="10",
                      LATENCY_BUDGETS="1000", SUBSETS="test", AVERAGE_LAST="0",
                      LATENCY_CONFIRM="1", EVOLVE_ARGS="--population 6 --parents 2 --mutations 2 --crossovers 2 --iterations 2",
                      GEN_EXTRA_ARGS="--max-len-a 0 --max-len-b 8")
    recipe("wmt14_en_de", "search.sh", "--dropout", "0.0", env=env)
    log = (search_dir / "supernet" / "train.log").read_text()
    assert re.search(r"valid on 'valid' subset .*\| smallest_loss [0-9.]+", log), log[-3000:]
    for name in ("loss.jsonl", "latency.jsonl", "ranker_loss/ranker.txt", "ranker_latency/regressor.txt", "pruned.yaml"):
        assert (search_dir / name).stat().st_size > 0, name
    assert len((search_dir / "loss.jsonl").read_text().splitlines()) == 13  # the header and 12 architectures
    result = json.load(open(search_dir / "evolve_latency_1000ms" / "result.json"))
    assert result["confirmed_latency"][0]["within_budget"]
    best = json.load(open(search_dir / "evolve_latency_1000ms" / "best.json"))
    trained = (search_dir / "train_latency_1000ms" / "train.log").read_text()
    assert "architecture from --architecture-file" in trained and json.dumps(best)[:40] in trained.replace("'", '"')
    score = json.load(open(search_dir / "train_latency_1000ms" / "generate" / "score-test.json"))
    assert score["sentences"] == len(open(os.path.join(prepared.dest, "refs", "test.de")).read().splitlines())
    # again: collect has its data and the evolution its best.json (the supernet and the training resume
    # from their checkpoint_last.pt as any fairseq-train does)
    out = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "search.sh"), "--dropout", "0.0"],
                         capture_output=True, text=True, env=dict(env, STAGES="collect,evolve"), cwd=env["TEST_CWD"])
    assert out.returncode == 0, out.stderr[-3000:]
    # each stage's result: a table on the screen, the JSON it printed kept in SEARCH_DIR/stages/
    stages = search_dir / "stages"
    assert [json.loads((stages / f"collect_{what}.json").read_text().splitlines()[-1])["added"]
            for what in ("loss", "latency")] == [0, 0]
    assert json.loads((stages / "evolve_latency_1000ms.json").read_text().splitlines()[-1])["done_before"]
    assert re.search(r"^\[recipe\] search: collect_loss\n(  .*\n)*  added +0$", out.stdout, re.M), out.stdout
    assert re.search(r"^  done_before +True$", out.stdout, re.M) and "{" not in out.stdout


TINY_LM_SPACE = """
decoder: {embed_dim: [16, 32], layers: [1, 2], ffn_embed_dim: [32, 64], attention_heads: [2], attention_kinds: [softmax, cosformer]}
"""


def test_language_model_search_recipe_runs_every_stage_on_wikitext2(prepare_sample, tmp_path):
    """recipes/wikitext2/search.sh on the WikiText-2 sample with a tiny space: the LM supernet, collect (the
    latency: tokens per second of scoring and sampling, beside the reference), rank, evolve under a relative
    latency budget (predicted, confirmed by measurement), train.sh on the found architecture and evaluate.sh."""
    prepared = prepare_sample("wikitext2")
    (tmp_path / "space.yaml").write_text(TINY_LM_SPACE)
    search_dir = tmp_path / "search"
    env = environment(prepared, tmp_path, SEARCH_SPACE=str(tmp_path / "space.yaml"), SEARCH_DIR=str(search_dir),
                      MAX_UPDATE="3", TOKENS_PER_SAMPLE="64", CONTEXT_WINDOW="32", MAX_TOKENS="512", TOKENS_PER_UPDATE="512",
                      SUPERNET_SAMPLING="sandwich", SANDWICH_RANDOM="1", LOSS_SAMPLES="12", LATENCY_SAMPLES="12",
                      LATENCY_TARGET_LENGTH="6", LATENCY_WARMUP="0", LATENCY_REPEATS="1", LATENCY_ROUNDS="2", LATENCY_PROCESSES="1",
                      LATENCY_MAX_SPREAD="10", RELATIVE_LATENCY_BUDGETS="100",
                      LATENCY_CONFIRM="1", EVOLVE_ARGS="--population 6 --parents 2 --mutations 2 --crossovers 2 --iterations 2")
    recipe("wikitext2", "search.sh", "--dropout", "0.0", env=env)
    log = (search_dir / "supernet" / "train.log").read_text()
    assert "supernet_language_modeling" in log and re.search(r"valid on 'valid' subset .*\| smallest_loss [0-9.]+", log)
    lines = (search_dir / "latency.jsonl").read_text().splitlines()
    header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    assert len(records) == 12 and header["latency"]["decoder_steps"] == 6
    for record in records:  # sampling 6 tokens (+ the end) one at a time; scoring a context of 6
        assert record["decoder_calls"] == 7 and record["relative_latency"] > 0
        assert record["sampling"]["context"] == record["scoring"]["context"] == 6
        assert record["sampling"]["tokens_per_second"] > 0 and record["scoring"]["tokens_per_second"] > 0
    result = json.load(open(search_dir / "evolve_relative_100x" / "result.json"))
    assert result["constraints"] == {"--relative-latency": 100.0} and result["confirmed_latency"][0]["within_budget"]
    trained = (search_dir / "train_relative_100x" / "train.log").read_text()
    assert "architecture from --architecture-file" in trained
    score = json.load(open(search_dir / "train_relative_100x" / "evaluate" / "score-test.json"))
    assert score["perplexity"] > 1


def test_search_recipe_settings_and_errors(tmp_path):
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, DATA_BIN=str(tmp_path), NUM_GPUS="0", LATENCY_BUDGETS="40",
               SEARCH_DIR=str(tmp_path / "s"))
    out = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "/search_spaces/multi30k_cpu.yaml" in out and "-n 300" in out and "--threads 1 --device cpu" in out
    assert "--warmup 3 --repeats 5 --rounds 6 --processes 3" in out and "--reference" not in out  # (the space's largest)
    assert "--source-length 30 --target-length 30 --beam 5" in out and " prune " not in out  # no pruning at CPU size
    evolve = next(line for line in out.splitlines() if " evolve " in line)
    assert "--confirm 5 --latency-ms 40 " in evolve and f"--ranker {tmp_path / 's'}/ranker_loss/ranker.txt" in evolve
    assert "--train-max-update 15000 " in out  # train_command.sh: the training budget, not the supernet's
    assert f"train.sh mixed_transformer_iwslt_de_en --architecture-file {tmp_path / 's'}/evolve_latency_40ms/best.json" in out
    out = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "search.sh")], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert "/search_spaces/wmt14_en_de.yaml" in out and "--device cuda:0" in out and "--keep 8" in out
    assert f"--space {tmp_path / 's'}/pruned.yaml" in out and "train.sh mformer_wmt_en_de --architecture-file" in out
    assert "--train-max-update 300000 " in out
    out = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                         env=dict(env, STAGES="rank,evolve"), check=True).stdout
    assert " collect " not in out and " rank " in out and " evolve " in out and "train.sh" not in out
    # the tiny mode: every stage at its smallest size, the trainings' budget handed to their scripts
    env_tiny = {k: v for k, v in env.items() if k != "SEARCH_DIR"}
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                            env=dict(env_tiny, SEARCH_TINY="1"), check=True, cwd=tmp_path)
    tiny = os.path.join(ROOT_DIR, "checkpoints", "multi30k.de-en", "search_tiny")
    assert f"env MAX_UPDATE=20 WARMUP=5 SAVE_INTERVAL_UPDATES=0 SAVE_DIR={tiny}/supernet " in result.stdout
    assert f"env MAX_UPDATE=20 WARMUP=5 SAVE_INTERVAL_UPDATES=0 SAVE_DIR={tiny}/train_latency_40ms " in result.stdout
    assert result.stdout.count(" -n 12 ") == 2 and "--population 6 " in result.stdout
    assert "--train-max-update 20 " in result.stdout and "--warmup 1 --repeats 3 --rounds 2 --processes 1 " in result.stdout
    assert "--confirm 1 --latency-ms 40 " in result.stdout
    bad = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                         env=dict(env, SEARCH_TINY="yes"))
    assert bad.returncode == 2 and "error: SEARCH_TINY=yes: expected 1" in bad.stderr
    # no budget given: a share of the largest architecture's FLOPs, which needs no measurement before the supernet
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                            env=dict(env, LATENCY_BUDGETS=""), check=True)
    assert f"--flops-fraction 0.75 --output {tmp_path / 's'}/evolve_flops_0.75x" in result.stdout
    # nothing measured under a FLOPs budget: the measurement's settings, which evolve would refuse, are not given
    evolve = next(line for line in result.stdout.splitlines() if " evolve " in line)
    assert "--source-length 30 --target-length 30 --seed" in evolve and "--beam" not in evolve and "--confirm" not in evolve
    # the supernet's fitness: no ranker given (evolve refuses --ranker without --fitness ranker)
    by_loss = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                             env=dict(env, FITNESS="supernet", STAGES="evolve"), check=True).stdout
    assert "--fitness supernet --checkpoint" in by_loss and "--ranker" not in by_loss
    assert f"--architecture-file {tmp_path / 's'}/evolve_flops_0.75x/best.json" in result.stdout
    assert "no budget given: FLOPS_FRACTIONS=0.75" in result.stderr
    # a language model: the relative latency budgets, the relative latency's ranker, evaluate.sh
    out = subprocess.run(["bash", os.path.join(RECIPES, "wikitext2", "search.sh")], capture_output=True, text=True,
                         env=dict(env, LATENCY_BUDGETS="", RELATIVE_LATENCY_BUDGETS="0.5", LATENCY_REFERENCE="ref.json"),
                         check=True).stdout
    assert "wikitext2/supernet.sh" in out and "/search_spaces/wikitext2_cpu.yaml" in out and "--reference ref.json" in out
    assert f"rank --data {tmp_path / 's'}/latency.jsonl --target relative_latency" in out
    assert (f"--relative-latency 0.5 --latency-predictor {tmp_path / 's'}/ranker_relative_latency/regressor.txt "
            f"--output {tmp_path / 's'}/evolve_relative_0.5x") in out
    assert f"train.sh mixed_transformer_lm_tiny --architecture-file {tmp_path / 's'}/evolve_relative_0.5x/best.json" in out
    assert "wikitext2/evaluate.sh mixed_transformer_lm_tiny" in out and "generate.sh" not in out
    for overrides, message in (({"STAGES": "collect,fly"}, "error: STAGES=collect,fly: unknown stage 'fly'"),
                               ({"PRUNE_KEEP": "all"}, "error: PRUNE_KEEP=all: expected a number of fields")):
        result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                                env=dict(env, **overrides))
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "search.sh")], capture_output=True, text=True,
                            env=dict(env, DRY_RUN="0", STAGES="collect"))
    assert result.returncode == 2 and f"{tmp_path / 's'}/supernet/checkpoint_last.pt: no supernet" in result.stderr


def test_supernet_recipes_settings_and_errors(tmp_path):
    env = dict(os.environ, DRY_RUN="1", NUM_GPUS="8", PYTHON=sys.executable, DATA_BIN=str(tmp_path / "not_prepared"))
    script = os.path.join(RECIPES, "wmt14_en_de", "supernet.sh")
    command = subprocess.run(["bash", script, "--seed", "3"], capture_output=True, text=True, env=env, check=True).stdout
    # Hardware-Aware Transformers' SuperTransformer settings: 4,096 tokens x 16 x 8 GPUs, cosine schedule to 1e-7
    for flags in ("--arch mixed_supertransformer", "--task supernet_translation", "--supernet-sampling random",
                  "/search_spaces/wmt14_en_de.yaml", "--max-tokens 4096 --update-freq 16 --max-update 40000",
                  "--lr 1e-3 --lr-scheduler cosine --min-lr 1e-07 --warmup-updates 10000 --warmup-init-lr 1e-07",
                  "--dropout 0.3", "--attention-dropout 0.1", "--weight-decay 0.0 ", "--share-all-embeddings",
                  "--label-smoothing 0.1", f"--save-dir {ROOT_DIR}/checkpoints/wmt14_en_de/mixed_supertransformer "):
        assert flags in command, (flags, command)
    assert command.rstrip().endswith("--seed 3")  # the user's flags come last and win
    multi30k = os.path.join(RECIPES, "multi30k", "supernet.sh")
    command = subprocess.run(["bash", multi30k], capture_output=True, text=True, env=dict(env, NUM_GPUS="0"), check=True).stdout
    assert "/search_spaces/multi30k_cpu.yaml" in command and "--supernet-sampling sandwich --supernet-sandwich-random 2" in command
    assert "--lr-scheduler inverse_sqrt" in command and "--attention-dropout" not in command
    # data-parallel supernet updates need --find-unused-parameters (the supernet tasks refuse DDP without it)
    lm = os.path.join(RECIPES, "wikitext2", "supernet.sh")
    lm_command = subprocess.run(["bash", lm], capture_output=True, text=True, env=env, check=True).stdout
    for supernet_command in (command, lm_command):
        assert "--find-unused-parameters" in supernet_command, supernet_command
    assert "--task supernet_language_modeling" in lm_command
    for args, overrides, message in (
            (["transformer"], {}, "error: supernet.sh trains mixed_supertransformer over SEARCH_SPACE; 'transformer' is not a flag"),
            ([], {"SEARCH_SPACE": str(tmp_path / "none.yaml")}, f"error: SEARCH_SPACE={tmp_path / 'none.yaml'}: no such file"),
            ([], {"SYNTAX_HINTS": "1"}, "error: SYNTAX_HINTS=1: not supported by supernet.sh"),
            ([], {"LR_SCHEDULER": "linear"}, "error: LR_SCHEDULER=linear: expected inverse_sqrt or cosine")):
        result = subprocess.run(["bash", multi30k, *args], capture_output=True, text=True, env=dict(env, NUM_GPUS="0", **overrides))
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_overrides_reach_fairseq(tmp_path):
    env = dict(os.environ, DRY_RUN="1", NUM_GPUS="2", PYTHON=sys.executable, DATA_BIN=str(tmp_path))
    command = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "train.sh"), "--max-epoch", "7"],
                             capture_output=True, text=True, env=env, check=True).stdout
    assert "--distributed-world-size 2 --fp16" in command
    assert "--update-freq 4 " in command  # ceil(25,000 tokens per update / (4,096 x 2 GPUs))
    assert "--lr 7e-4" in command and "--weight-decay 0.1" in command and "--label-smoothing 0.1" in command
    assert command.rstrip().endswith("--max-epoch 7")
    env.update(NUM_GPUS="0", CPU_PROCS="2", MAX_TOKENS="1000", UPDATE_FREQ="3", EXTRA_ARGS="--seed 5")
    command = subprocess.run(["bash", os.path.join(RECIPES, "iwslt14_de_en", "train.sh"), "cosformer_iwslt_de_en"],
                             capture_output=True, text=True, env=env, check=True).stdout
    assert "cpu_distributed_train --nprocs 2 --" in command and "--cpu" not in command
    assert "--arch cosformer_iwslt_de_en" in command and "--max-tokens 1000 --update-freq 3" in command
    assert "--seed 5" in command and "--share-decoder-input-output-embed" in command


def write_index(path, sizes):
    """A fairseq mmap index (fairseq-preprocess's .idx) listing sentences of these sizes."""
    import struct

    import numpy as np

    with open(path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8) + struct.pack("<Q", len(sizes)))
        f.write(np.asarray(sizes, dtype=np.int32).tobytes())
        f.write(np.cumsum([0] + list(sizes[:-1]), dtype=np.int64).tobytes())


def test_cpu_profile_trains_the_small_preset_with_checkpoints_every_n_updates(tmp_path):
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, DATA_BIN=str(tmp_path / "missing"))
    for name in ("SAVE_DIR", "NUM_GPUS", "MAX_UPDATE", "WARMUP", "SAVE_INTERVAL_UPDATES", "LOG_INTERVAL"):
        env.pop(name, None)
    run = lambda dataset, *args, **overrides: subprocess.run(  # noqa: E731
        ["bash", os.path.join(RECIPES, dataset, "train.sh"), *args], capture_output=True, text=True,
        env=dict(env, **overrides), cwd=tmp_path)
    words = shlex.split(run("multi30k", PROFILE="cpu").stdout)
    assert words[words.index("--arch") + 1] == "mixed_transformer_cpu_small" and "--cpu" in words
    assert words[words.index("--save-interval-updates") + 1] == "250"
    assert words[words.index("--max-update") + 1] == "4000" and words[words.index("--warmup-updates") + 1] == "500"
    words = shlex.split(run("enwik8", PROFILE="cpu", MAX_UPDATE="77", SAVE_INTERVAL_UPDATES="10").stdout)
    assert words[words.index("--arch") + 1] == "mixed_transformer_lm_cpu_small"
    assert words[words.index("--max-update") + 1] == "77" and words[words.index("--save-interval-updates") + 1] == "10"
    # a named preset wins; the GPU profile (default) is the data set's settings
    words = shlex.split(run("multi30k", "mformer_cpu_small", PROFILE="cpu").stdout)
    assert words[words.index("--arch") + 1] == "mformer_cpu_small"
    words = shlex.split(run("multi30k", NUM_GPUS="0").stdout)
    assert words[words.index("--arch") + 1] == "mixed_transformer_iwslt_de_en" and "--save-interval-updates" not in words
    assert words[words.index("--max-update") + 1] == "15000"
    result = run("multi30k", PROFILE="laptop")
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: PROFILE=laptop: expected gpu (the data set's settings) or cpu (a small preset and budget for a CPU)")


def test_own_data_gets_its_own_folder_and_a_budget_for_its_size(tmp_path):
    own = tmp_path / "shakespeare"
    own.mkdir()
    write_index(own / "train.idx", [11264] * 5)  # 56,320 bytes: 5 updates of enwik8's 11,264 per pass
    env = dict(os.environ, DRY_RUN="1", NUM_GPUS="0", PYTHON=sys.executable, DATA_BIN=str(own))
    for name in ("SAVE_DIR", "MAX_UPDATE", "WARMUP", "PROFILE"):
        env.pop(name, None)
    run = lambda dataset, **overrides: subprocess.run(  # noqa: E731
        ["bash", os.path.join(RECIPES, dataset, "train.sh")], capture_output=True, text=True,
        env=dict(env, **overrides), cwd=tmp_path, check=True)
    result = run("enwik8")
    words = shlex.split(result.stdout)
    assert words[words.index("--save-dir") + 1] == os.path.join(ROOT_DIR, "checkpoints", "shakespeare", "mixed_transformer_lm")
    # 20 passes x 56,320 tokens / 11,264 per update = 100 updates (not 400,000), warm-up a tenth of them
    assert words[words.index("--max-update") + 1] == "100" and words[words.index("--warmup-updates") + 1] == "10"
    assert "your data" in result.stderr and "56320 training tokens" in result.stderr
    words = shlex.split(run("enwik8", OWN_DATA_EPOCHS="3").stdout)
    assert words[words.index("--max-update") + 1] == "15" and words[words.index("--warmup-updates") + 1] == "1"
    result = run("enwik8", MAX_UPDATE="1000")  # set: kept, and so is the recipe's warm-up, with a warning
    words = shlex.split(result.stdout)
    assert words[words.index("--max-update") + 1] == "1000" and words[words.index("--warmup-updates") + 1] == "4000"
    assert ("[recipe] warning: WARMUP=4000 is not below MAX_UPDATE=1000: the learning rate never reaches LR=2.5e-4 "
            "(set WARMUP, e.g. WARMUP=100)") in result.stderr
    assert "warning" not in run("enwik8", MAX_UPDATE="1000", WARMUP="100").stderr
    # a parallel corpus: its target side's tokens
    write_index(own / "train.de-en.en.idx", [50] * 4096)  # 204,800 tokens: 50 updates of 4,096 per pass
    words = shlex.split(run("iwslt14_de_en").stdout)
    assert words[words.index("--max-update") + 1] == "1000"  # 20 passes
    assert words[words.index("--save-dir") + 1] == os.path.join(ROOT_DIR, "checkpoints", "shakespeare", "mixed_transformer_iwslt_de_en")


def test_rounded_update_frequency_is_a_warning_with_the_effective_tokens(tmp_path):
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, DATA_BIN=str(tmp_path))
    script = os.path.join(RECIPES, "iwslt14_de_en", "train.sh")
    # 4,096 tokens per update (the recipe's setting) on 8 GPUs of 4,096 tokens: UPDATE_FREQ cannot go below 1
    result = subprocess.run(["bash", script], capture_output=True, text=True, env=dict(env, NUM_GPUS="8"), check=True)
    assert "--update-freq 1 " in result.stdout
    assert ("warning: tokens per update = MAX_TOKENS=4096 x NUM_GPUS=8 x UPDATE_FREQ=1 (ceil(TOKENS_PER_UPDATE / "
            "(MAX_TOKENS x workers)), at least 1) = 32768, not TOKENS_PER_UPDATE=4096") in result.stderr
    # 25,000 on 2 GPUs: rounded up to 4 x 8,192 = 32,768
    result = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "train.sh")], capture_output=True, text=True,
                            env=dict(env, NUM_GPUS="2"), check=True)
    assert "= 32768, not TOKENS_PER_UPDATE=25000" in result.stderr
    # exact: no warning, the effective number in the summary line
    result = subprocess.run(["bash", script], capture_output=True, text=True,
                            env=dict(env, NUM_GPUS="2", MAX_TOKENS="1024"), check=True)
    assert "--update-freq 2 " in result.stdout and "warning" not in result.stderr
    assert "up to 4096 tokens per update; TOKENS_PER_UPDATE=4096" in result.stderr


def test_help_lists_the_overrides():
    out = subprocess.run(["bash", os.path.join(RECIPES, "enwik8", "evaluate.sh"), "--help"], capture_output=True, text=True,
                         check=True).stdout
    for name in ("NUM_GPUS", "UPDATE_FREQ", "MAX_TOKENS", "EXTRA_ARGS", "CONTEXT_WINDOW", "bits per character"):
        assert name in out


@pytest.mark.parametrize("script", ["multi30k/train.sh", "wmt14_en_de/generate.sh", "wikitext103/evaluate.sh"])
def test_help_shows_no_linter_directives(script):
    """The help is the scripts' comments; the shellcheck directives among them are for the linter."""
    out = subprocess.run(["bash", os.path.join(RECIPES, script), "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "Overrides, as environment variables" in out and "shellcheck" not in out


def test_readme_recipe_commands_name_scripts_and_presets_that_exist():
    """Every recipe command in the "Datasets and recipes" tables of docs/datasets.md names a script that exists and a
    registered preset; the train.sh commands build their fairseq-train command (DRY_RUN=1), except BET(SG) on
    enwik8, which the README says is refused."""
    import re
    import shlex

    import fairseq_plugins  # noqa: F401  (registers the presets)
    from fairseq.models import ARCH_MODEL_REGISTRY

    guide = open(os.path.join(ROOT_DIR, "docs", "datasets.md"), encoding="utf-8").read()
    section = guide[guide.index("\n## Datasets and recipes"):]
    commands = [c for c in re.findall(r"`([^`]*recipes/\w+/\w+\.sh[^`]*)`", section)]
    assert len(commands) > 50
    trained = set()
    for command in commands:
        words = shlex.split(command)
        assignments = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_0-9]+=", w))
        words = [w for w in words if not re.match(r"^[A-Z_0-9]+=", w)]
        script = os.path.join(ROOT_DIR, words[0])
        assert os.access(script, os.X_OK), command
        preset = words[1] if len(words) > 1 and not words[1].startswith("-") else None
        if os.path.basename(script) in ("train.sh", "generate.sh", "evaluate.sh") and preset:
            assert preset in ARCH_MODEL_REGISTRY, command
        if os.path.basename(script) == "train.sh":
            env = dict(os.environ, PYTHON=sys.executable, NUM_GPUS="0", DATA_BIN=os.path.join(ROOT_DIR, "missing"),
                       **assignments, DRY_RUN="1")
            result = subprocess.run(["bash", script, *words[1:]], capture_output=True, text=True, env=env,
                                    cwd=ROOT_DIR)
            if "enwik8" in script and assignments.get("SYNTAX_HINTS") == "1":
                assert result.returncode != 0 and "no words" in result.stderr, command
                continue
            assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"
            assert f"--arch {preset or 'mixed_transformer'}" in result.stdout or preset is None, command
            trained.add(os.path.basename(os.path.dirname(script)))
    assert trained == {"iwslt14_de_en", "wmt14_en_de", "wmt17_en_de", "multi30k", "wikitext103", "wikitext2", "enwik8"}


def test_generate_and_valid_bleu_share_the_output_length_cap(tmp_path):
    """generate.sh and EVAL_BLEU=1's validation decode with one cap: MAX_LEN_A x source + MAX_LEN_B."""
    fake = tmp_path / "python"  # the interpreter the recipe launches: records its arguments
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$CALLS"\necho subword-nmt\n')
    fake.chmod(0o755)
    (tmp_path / "testsets.tsv").write_text("test\ttest_2016_flickr\n")
    (tmp_path / "test.de-en.de.idx").write_text("")
    (tmp_path / "prepare.json").write_text(json.dumps({"bpe": "subword-nmt"}))
    env = dict(os.environ, NUM_GPUS="0", PYTHON=str(fake), DATA_BIN=str(tmp_path), SAVE_DIR=str(tmp_path / "ck"),
               CALLS=str(tmp_path / "calls"))
    for name in ("MAX_LEN_A", "MAX_LEN_B", "GEN_EXTRA_ARGS", "SUBSETS"):
        env.pop(name, None)
    for overrides, (a, b) in (({}, ("1.2", "10")), ({"MAX_LEN_A": "1.5", "MAX_LEN_B": "7"}, ("1.5", "7"))):
        (tmp_path / "calls").write_text("")
        subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "generate.sh")], capture_output=True, text=True,
                       env=dict(env, **overrides), check=True)
        generate = [c for c in (tmp_path / "calls").read_text().splitlines() if "fairseq_cli.generate" in c]
        assert len(generate) == 1 and f" --max-len-a {a} --max-len-b {b} " in generate[0]
        words = shlex.split(subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "train.sh")], capture_output=True,
                                           text=True, env=dict(env, DRY_RUN="1", EVAL_BLEU="1", **overrides),
                                           check=True).stdout)
        decoding = json.loads(words[words.index("--eval-bleu-args") + 1])
        assert (decoding["max_len_a"], decoding["max_len_b"]) == (float(a), int(b))


def test_generate_scores_the_test_split_of_binaries_of_your_own(tmp_path):
    """docs/own-data.md's binaries (fairseq-preprocess of subword-nmt text) have no prepare.json and no
    testsets.tsv: generate.sh decodes their test split with subword-nmt's "@@ " removed, and scores it."""
    fake = tmp_path / "python"  # the interpreter the recipe launches: records its arguments
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$CALLS"\n')
    fake.chmod(0o755)
    data_bin = tmp_path / "mine"
    data_bin.mkdir()
    (data_bin / "test.de-en.de.idx").write_text("")
    env = dict(os.environ, NUM_GPUS="0", PYTHON=str(fake), DATA_BIN=str(data_bin), SAVE_DIR=str(tmp_path / "ck"),
               CALLS=str(tmp_path / "calls"))
    env.pop("SUBSETS", None)
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "generate.sh")], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0 and "No such file" not in result.stderr, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    generate = [c for c in calls if "fairseq_cli.generate" in c]
    assert len(generate) == 1 and " --gen-subset test " in generate[0] and " --remove-bpe @@  " in generate[0]
    assert any("score_translation.py" in c and "--subset test --lang en" in c for c in calls)


def test_generate_decodes_the_valid_split_and_refuses_a_split_without_binaries(tmp_path):
    """SUBSETS may name valid beside testsets.tsv's splits (the convergence ladders score both); a subset whose
    binaries do not exist is a one-line error naming SUBSETS before anything is decoded."""
    fake = tmp_path / "python"  # the interpreter the recipe launches: records its arguments
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$CALLS"\necho subword-nmt\n')
    fake.chmod(0o755)
    (tmp_path / "testsets.tsv").write_text("test\ttest_2016_flickr\n")
    (tmp_path / "prepare.json").write_text(json.dumps({"bpe": "subword-nmt"}))
    for subset in ("valid", "test"):
        (tmp_path / f"{subset}.de-en.de.idx").write_text("")
    env = dict(os.environ, NUM_GPUS="0", PYTHON=str(fake), DATA_BIN=str(tmp_path), SAVE_DIR=str(tmp_path / "ck"),
               CALLS=str(tmp_path / "calls"), SUBSETS="valid test")
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "generate.sh")], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stderr
    generate = [c for c in (tmp_path / "calls").read_text().splitlines() if "fairseq_cli.generate" in c]
    assert [c.split(" --gen-subset ")[1].split()[0] for c in generate] == ["valid", "test"]
    assert "de-en valid (valid)" in result.stderr and "de-en test (test_2016_flickr)" in result.stderr
    (tmp_path / "calls").write_text("")
    result = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "generate.sh")], capture_output=True, text=True,
                            env=dict(env, SUBSETS="test test9", AVERAGE_LAST="2"))
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and 'SUBSETS="test test9"' in errors[0] and "'test9'" in errors[0], result.stderr
    assert "fairseq_cli.generate" not in (tmp_path / "calls").read_text()
    assert "average_checkpoints" not in (tmp_path / "calls").read_text()  # (refused before AVERAGE_LAST's averaging)


def test_cpu_runs_keep_freed_memory_unless_told_otherwise(tmp_path):
    """CPU_MALLOC=keep (the default on CPU): the training process runs with glibc's MALLOC_MMAP_MAX_=0 and a
    trim threshold above any heap; glibc leaves glibc's defaults; values in the environment win."""
    fake = tmp_path / "python"  # the interpreter the recipe launches: says what its environment holds
    fake.write_text('#!/bin/sh\necho "mmap_max=${MALLOC_MMAP_MAX_-unset} trim=${MALLOC_TRIM_THRESHOLD_-unset} $2"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "CPU_MALLOC"}
    env.update(NUM_GPUS="0", PYTHON=str(fake), DATA_BIN=str(tmp_path), SAVE_DIR=str(tmp_path / "ck"))

    def train(**overrides):
        return subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "train.sh")], capture_output=True, text=True,
                              env=dict(env, **overrides), cwd=tmp_path)

    launched = train().stdout
    assert "mmap_max=0 trim=68719476736 import sys; from fairseq_cli.train import cli_main" in launched
    assert "mmap_max=unset trim=unset import sys; from fairseq_cli.train" in train(CPU_MALLOC="glibc").stdout
    assert "mmap_max=7 trim=68719476736 import sys" in train(MALLOC_MMAP_MAX_="7").stdout
    bad = train(CPU_MALLOC="tcmalloc")
    assert bad.returncode == 2 and "error: CPU_MALLOC must be keep or glibc, got 'tcmalloc'" in bad.stderr
    assert "mmap_max" not in bad.stdout
