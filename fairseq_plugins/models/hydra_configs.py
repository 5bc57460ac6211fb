"""The hydra config file of every preset (fairseq's convention for hydra: one file per architecture, as
fairseq/config/model/transformer_lm/*.yaml), generated from the preset functions and shipped in the
package as fairseq_plugins/config/model/<preset>.yaml::

    python -m fairseq_plugins.models.hydra_configs          # rewrite the files
    python -m fairseq_plugins.models.hydra_configs --check  # exit 1 if a file differs from its preset

fairseq-hydra-train fills every option of a model's dataclass with its default before the preset runs,
and a preset only fills unset options: ``model: {_name: <preset>}`` alone would hold the model's
defaults (the preset refuses it, see ``architecture.refuse_hydra_defaults``). A file holds every option
the preset sets, with the value ``fairseq-train --arch <preset>`` gives it, and ``preset: <preset>``.
"""
import argparse
import dataclasses
import logging
import os
import sys
from typing import Dict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the files with the presets; exit 1 if one differs")
    options = parser.parse_args(argv)
    from fairseq_plugins.command_line import configure_logging

    configure_logging()
    from fairseq_plugins import register
    from fairseq_plugins.files import atomic_output
    from fairseq_plugins.models.architecture import PRESETS, preset_config_file
    from fairseq_plugins.models.hydra_configs import render  # (run as __main__, this module stops before defining it)

    register()  # registers the presets

    differ = []
    for arch in sorted(PRESETS):
        path = preset_config_file(arch)
        text = render(arch)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current == text:
            continue
        differ.append(path)
        if not options.check:
            with atomic_output(path) as f:
                f.write(text)
    names = {f"{arch}.yaml" for arch in PRESETS}
    folder = os.path.dirname(preset_config_file("x"))
    stale = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".yaml") and name not in names) \
        if os.path.isdir(folder) else []
    logger = logging.getLogger("fairseq_plugins.models.hydra_configs")  # (not __name__: run with -m, that is __main__)
    for path in stale:
        logger.error("%s: no preset of this name", path)
    for path in differ:
        (logger.error if options.check else logger.info)("%s: %s", path, "differs from its preset" if options.check else "written")
    return 1 if stale or (options.check and differ) else 0


if __name__ == "__main__":  # before the imports below (torch, fairseq): --help needs neither
    sys.exit(main())

from omegaconf import OmegaConf  # noqa: E402

from .architecture import PRESETS, preset_config_file  # noqa: E402


def from_task() -> set:
    """Kind options a preset sets from the task's options when the model is built (a field's ``from_task``
    metadata, e.g. lags that follow --max-target-positions / --tokens-per-sample): not constants of the
    preset, so left to the build."""
    from ..modules.options import option_fields, registered_option_classes

    return {f.name for options_class in registered_option_classes() for f in option_fields(options_class)
            if f.metadata.get("from_task")}


def _lm_fields() -> set:
    """The options of mixed_transformer_lm's dataclass a file may set: not the ones fairseq takes from the
    task (``II("task....")`` interpolations: --tokens-per-sample, --add-bos-token, ...)."""
    from .mixed_transformer_lm import MixedTransformerLanguageModelConfig

    return {f.name for f in dataclasses.fields(MixedTransformerLanguageModelConfig)
            if not (isinstance(f.default, str) and f.default.startswith("${")) and f.name != "_name"}


def preset_values(arch: str) -> Dict[str, object]:
    """Every option the preset ``arch`` sets, as it sets them on the options fairseq-train gives it when
    none is given on the command line (unset options: the preset's own defaults)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    skip = from_task()
    values = {name: value for name, value in sorted(vars(args).items()) if name not in skip and name != "_name"}
    if PRESETS[arch] == "mixed_transformer_lm":
        from omegaconf.errors import ValidationError

        from .mixed_transformer_lm import MixedTransformerLanguageModelConfig

        fields = _lm_fields()
        # in the dataclass's types, as hydra checks them (fairseq's LM architectures set e.g. base_shuffle,
        # an int option, to False)
        typed = OmegaConf.structured(MixedTransformerLanguageModelConfig)
        for name, value in list(values.items()):
            if name not in fields:
                del values[name]
                continue
            try:
                typed[name] = value
            except ValidationError:
                typed[name] = int(value)
            values[name] = typed[name]
    return values


def render(arch: str) -> str:
    body = OmegaConf.to_yaml(OmegaConf.create({"_name": arch, **preset_values(arch)}))
    return (f"# @package _group_\n"
            f"# The preset {arch} ({PRESETS[arch]}) for fairseq-hydra-train: the values fairseq-train --arch {arch} builds.\n"
            f"# Generated by python -m fairseq_plugins.models.hydra_configs: do not edit, change the preset.\n"
            f"{body}")
