"""The recipes' documentation says what the scripts do: every override they read is documented, the
default checkpoint folders are the documented ones, and the quick fairseq-train command of docs/datasets.md trains
with the IWSLT14 recipe's settings. All through DRY_RUN=1 (no data, no training)."""
import os
import re
import shlex
import subprocess
import sys

import pytest
from prepared import ROOT_DIR

RECIPES = os.path.join(ROOT_DIR, "recipes")
# Set by the scripts themselves (a dataset's config.sh or recipes/lib), read with a default only so that
# the other datasets' scripts run under `set -u`: not overrides.
INTERNAL = {"DATA_NAME", "SAVE_NAME", "SAVE_SUFFIX", "NO_SYNTAX_HINTS_REASON", "SEARCH_EVALUATE"}


def _read(*parts):
    with open(os.path.join(ROOT_DIR, *parts), encoding="utf-8") as f:
        return f.read()


def recipe_overrides():
    """Every variable a recipe script reads with a default (``${NAME:-...}`` or ``${NAME:=...}``)."""
    names = set()
    for folder, _, files in os.walk(RECIPES):
        for name in files:
            if name.endswith(".sh"):
                names.update(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):[-=]", _read(folder, name)))
    return names - INTERNAL


def dry_run(dataset, *args, **env):
    environment = dict(os.environ, DRY_RUN="1", NUM_GPUS="0", PYTHON=sys.executable,
                       DATA_BIN=os.path.join(ROOT_DIR, "missing"))
    for name in ("SAVE_DIR", "SRC", "TGT"):  # the defaults are under test
        environment.pop(name, None)
    for name, value in env.items():  # None: the recipe's default
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    result = subprocess.run(["bash", os.path.join(RECIPES, dataset, "train.sh"), *args], capture_output=True,
                            text=True, env=environment, cwd=ROOT_DIR)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_every_override_a_recipe_reads_is_documented():
    overrides = recipe_overrides()
    assert {"LOG_INTERVAL", "DATA_WORKERS", "OUT_DIR", "KEEP_INTERVAL_UPDATES", "SCORE_ARGS",
            "SHARE_EMBEDDINGS", "MAX_UPDATE", "SAVE_DIR"} <= overrides
    table = _read("recipes", "README.md")
    help_text = subprocess.run(["bash", os.path.join(RECIPES, "multi30k", "generate.sh"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    undocumented = sorted(name for name in overrides if f"`{name}`" not in table and f"`{name}=" not in table)
    assert not undocumented, f"recipes/README.md does not document {undocumented}"
    missing_in_help = sorted(name for name in overrides if not re.search(rf"\b{name}\b", help_text))
    assert not missing_in_help, f"--help does not list {missing_in_help}"


@pytest.mark.parametrize("dataset, env, folder", [
    ("iwslt14_de_en", {}, "iwslt14_de_en"),
    ("wmt14_en_de", {}, "wmt14_en_de"),
    ("wikitext2", {}, "wikitext2"),
    ("multi30k", {}, "multi30k.de-en"),
    ("multi30k", {"SRC": "en", "TGT": "de"}, "multi30k.en-de"),
])
def test_default_checkpoint_folders_are_the_documented_ones(dataset, env, folder):
    command = dry_run(dataset, "mformer_iwslt_de_en" if "lm" not in dataset and "wiki" not in dataset
                      else "mixed_transformer_lm_tiny", **env)
    preset = re.search(r"--arch (\S+)", command).group(1)
    assert f"--save-dir {os.path.join(ROOT_DIR, 'checkpoints', folder, preset)} " in command
    readme, recipes_readme = _read("docs", "datasets.md"), _read("recipes", "README.md")
    if dataset == "multi30k":  # one folder per direction: both share one preparation
        assert "`checkpoints/multi30k.<src>-<tgt>/<preset>/`" in readme
        assert "`checkpoints/multi30k.<SRC>-<TGT>/<preset>`" in recipes_readme
    assert "`checkpoints/<dataset>/<preset>/`" in readme and "`checkpoints/<dataset>/<preset>`" in recipes_readme


TRAINING_FLAGS = ("--arch", "--optimizer", "--adam-betas", "--clip-norm", "--lr", "--lr-scheduler", "--warmup-updates",
                  "--warmup-init-lr", "--dropout", "--weight-decay", "--criterion", "--label-smoothing",
                  "--max-tokens")


def _flags(words):
    values = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else ""
            values[word] = following if following and not following.startswith("--") else True
    return values


def test_readme_quick_fairseq_train_uses_the_iwslt14_recipes_settings():
    readme = _read("docs", "datasets.md")
    block = readme[readme.index("## Training and decoding with fairseq's commands"):]
    block = block[block.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    train = next(line for line in block.replace("\\\n", " ").splitlines() if line.startswith("fairseq-train"))
    documented = _flags(shlex.split(train))
    recipe = _flags(shlex.split(dry_run("iwslt14_de_en", "mformer_iwslt_de_en")))
    for flag in TRAINING_FLAGS:
        assert flag in documented, f"docs/datasets.md's fairseq-train lacks the recipe's {flag} {recipe.get(flag)}"
        assert documented[flag] == recipe[flag], (flag, documented[flag], recipe[flag])
    assert "--share-decoder-input-output-embed" in documented and "--share-decoder-input-output-embed" in recipe
    # the data folder the recipe's prepare.sh writes and its train.sh reads by default
    default = dry_run("iwslt14_de_en", "mformer_iwslt_de_en", DATA_BIN=None)
    assert shlex.split(default)[0] == "fairseq-train"
    assert os.path.relpath(shlex.split(default)[1], ROOT_DIR) == shlex.split(train)[1]
