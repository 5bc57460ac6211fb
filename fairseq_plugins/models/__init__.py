"""Model classes and presets (fairseq architectures). Importing the package registers them (``register``),
except in one of the package's light command lines (``fairseq_plugins.command_line``), where
``fairseq_plugins.register()`` does."""
from ..command_line import started_as_light_command


def register() -> None:
    from . import mixed_transformer, mixed_transformer_lm, extractor_presets, bet_presets  # noqa: F401  (registration side effects)


if not started_as_light_command():
    register()
