"""fairseq-hydra-train builds every preset's model as fairseq-train --arch does, or refuses (issue 19,
item 3): fairseq fills a dataclass model's options with the dataclass defaults before the preset runs, so
``model: {_name: mformer_lm_tiny}`` alone held a 6-layer softmax model's options. Each preset ships its
hydra config file (fairseq_plugins/config/model/<preset>.yaml, generated from the preset functions).

Every preset is built in process through fairseq's hydra config path (the steps of fairseq-hydra-train:
the model group's file, ``add_defaults``, resolving, ``task.build_model``) and through fairseq-train's
(``parse_args_and_arch``, ``convert_namespace_to_omegaconf``); real fairseq-hydra-train runs (1 update)
prove the route for one LM preset and one translation preset."""
import os
import re

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.configs import FairseqConfig
from fairseq.dataclass.initialize import add_defaults
from fairseq.dataclass.utils import convert_namespace_to_omegaconf, omegaconf_no_object_check
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from omegaconf import OmegaConf

import fairseq_plugins
from fairseq_plugins.models.architecture import PRESETS, preset_config_file
from fairseq_plugins.models.hydra_configs import main as check_files
from fairseq_plugins.models.hydra_configs import render
from fairseq_plugins.modules import AttentionConfigError

PLUGIN_DIR = os.path.dirname(fairseq_plugins.__file__)
CONFIG_DIR = os.path.join(PLUGIN_DIR, "config")
MODELS = ("mixed_transformer", "mixed_transformer_lm")
ALL_PRESETS = sorted(arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model in MODELS)


def is_lm(arch):
    return ARCH_MODEL_NAME_REGISTRY[arch] == "mixed_transformer_lm"


def task_options(data_dir, arch):
    if is_lm(arch):
        return {"_name": "language_modeling", "data": data_dir, "tokens_per_sample": 64}
    return {"_name": "translation", "data": data_dir, "source_lang": "src", "target_lang": "tgt"}


def built(task_cfg, model_cfg):
    task = tasks.setup_task(task_cfg)
    torch.manual_seed(0)
    with torch.device("meta"):  # shapes without memory or initialisation time
        return task.build_model(model_cfg)


def via_fairseq_train(data_dir, arch):
    task = task_options(data_dir, arch)
    argv = [data_dir, "--arch", arch, "--user-dir", PLUGIN_DIR, "--task", task["_name"], "--tokens-per-sample", "64"]
    if not is_lm(arch):
        argv = [data_dir, "--arch", arch, "--user-dir", PLUGIN_DIR, "--task", "translation", "-s", "src", "-t", "tgt"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), input_args=argv))
    return built(cfg.task, cfg.model)


def via_hydra(data_dir, arch, model):
    """fairseq-hydra-train's steps from the composed config to the model (fairseq_cli/hydra_train.py)."""
    cfg = OmegaConf.structured(FairseqConfig)
    OmegaConf.set_struct(cfg, False)
    cfg.task = task_options(data_dir, arch)
    cfg.model = model
    add_defaults(cfg)
    with omegaconf_no_object_check():
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return built(cfg.task, cfg.model)


def preset_file(arch):
    """The model group's file, as hydra loads it (the ``# @package _group_`` line is hydra's, not a key)."""
    return OmegaConf.to_container(OmegaConf.load(preset_config_file(arch)))


def shapes(model):
    return sum(p.numel() for p in model.parameters()), [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def test_the_shipped_files_are_the_ones_the_presets_generate():
    assert sorted(PRESETS) == sorted(a for a in ALL_PRESETS if a != "mixed_transformer_lm")
    assert check_files(["--check"]) == 0
    for arch in PRESETS:
        with open(preset_config_file(arch), encoding="utf-8") as f:
            assert f.read() == render(arch), arch


@pytest.mark.parametrize("arch", ALL_PRESETS)
def test_every_preset_builds_the_same_model_through_hydra(data_dir, arch):
    expected = via_fairseq_train(data_dir, arch)
    # mixed_transformer_lm is the dataclass model itself: fairseq's hydra route fills its defaults, as
    # fairseq-train does; every preset of this package has its file
    model = {"_name": arch} if arch == "mixed_transformer_lm" else preset_file(arch)
    got = via_hydra(data_dir, arch, model)
    assert got.architecture == expected.architecture
    assert shapes(got) == shapes(expected)


@pytest.mark.parametrize("arch", sorted(a for a in PRESETS if is_lm(a)))
def test_an_lm_preset_named_without_its_file_is_refused(data_dir, arch):
    with pytest.raises(AttentionConfigError) as error:
        via_hydra(data_dir, arch, {"_name": arch})
    message = str(error.value)
    assert message.startswith(f"model._name {arch}: the model options hold mixed_transformer_lm's defaults")
    assert preset_config_file(arch) in message and f"model={arch}" in message


def test_another_presets_file_is_refused(data_dir):
    model = preset_file("mformer_lm_tiny")
    model["_name"] = "cosformer_lm_tiny"
    with pytest.raises(AttentionConfigError, match="model._name cosformer_lm_tiny: the model options hold the values of the preset mformer_lm_tiny"):
        via_hydra(data_dir, "cosformer_lm_tiny", model)


@pytest.mark.parametrize("arch", sorted(a for a in PRESETS if not is_lm(a)))
def test_a_translation_preset_named_alone_builds_the_same_model(data_dir, arch):
    """mixed_transformer has no dataclass: hydra's options hold only what the config gives, and the preset
    fills the rest as under fairseq-train."""
    expected = via_fairseq_train(data_dir, arch)
    got = via_hydra(data_dir, arch, {"_name": arch})
    assert got.architecture == expected.architecture
    assert shapes(got) == shapes(expected)


# ------------------------------------------------- real fairseq-hydra-train ---
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from fairseq_plugins.cli.synthetic import binarize_lm, binarize_translation, write_lm_corpus, write_translation_task

    root = tmp_path_factory.mktemp("hydra")
    splits = {"train": 60, "valid": 4, "test": 4}
    return {
        "lm": binarize_lm(write_lm_corpus(str(root / "raw_lm"), splits=splits), str(root / "lm")),
        "translation": binarize_translation(write_translation_task(str(root / "raw_mt"), splits=splits), str(root / "mt")),
    }


def trained_parameters(log):
    match = re.search(r"num\. shared model params: ([\d,]+)", log)
    assert match, log[-3000:]
    return int(match.group(1).replace(",", ""))


@pytest.mark.parametrize("arch", ["mformer_lm_tiny", "mformer_iwslt_de_en"])
def test_fairseq_hydra_train_with_the_preset_file(data, tmp_path, arch):
    import sys

    from fairseq_plugins.cli.pipeline import run

    lm = is_lm(arch)
    task = (["task=language_modeling", f"task.data={data['lm']}", "task.tokens_per_sample=16"] if lm else
            ["task=translation", f"task.data={data['translation']}", "task.source_lang=src", "task.target_lang=tgt"])
    command = [sys.executable, "-c", "import sys; from fairseq_cli.hydra_train import cli_main; sys.exit(cli_main())",
               "--config-dir", CONFIG_DIR, "--config-name", "config", f"model={arch}", *task,
               f"common.user_dir={PLUGIN_DIR}", "common.cpu=true", "common.seed=1", "optimizer=adam", "optimization.lr=[0.001]",
               "optimization.max_update=1", "dataset.max_tokens=512", "dataset.num_workers=0", "dataset.disable_validation=true",
               "checkpoint.no_save=true", "criterion=cross_entropy", f"hydra.run.dir={tmp_path}"]
    log = run(command, env={"OMP_NUM_THREADS": "1"})
    assert "num_updates" in log or "done training" in log, log[-3000:]
    expected = via_fairseq_train(str(data["lm"] if lm else data["translation"]), arch)
    assert trained_parameters(log) == sum(p.numel() for p in expected.parameters())
    # the route the issue reported: the preset named without its file
    if lm:
        from fairseq_plugins.cli.pipeline import CommandFailed

        named = [part for part in command if not part.startswith("model=")] + [f"+model={{_name: {arch}}}"]
        with pytest.raises(CommandFailed, match=re.escape(preset_config_file(arch))):
            run(named, env={"OMP_NUM_THREADS": "1"})
