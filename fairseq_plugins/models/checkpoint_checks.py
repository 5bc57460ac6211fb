"""What a model of this package checks when it loads a checkpoint file's weights (its ``load_state_dict``):
the file's layers must have the attention kinds the options ask for (softmax weights loaded into cosFormer
layers have the same names and shapes, so nothing else would notice), and torch's "Error(s) in loading
state_dict" becomes one line naming the file and what differs (another dictionary size, another model).

The file and the options saved in it come from ``checkpoint_compat.loaded_from`` (fairseq reads every
checkpoint through ``load_checkpoint_to_cpu``); weights that come from elsewhere are loaded unchecked."""
import re
from typing import Callable

from ..checkpoint_compat import loaded_from
from ..errors import CheckpointError
from ..modules.registry import PLACEMENT_NAMES
from .architecture import Architecture
from .layout import placed_kinds

# the option that sets the kinds of each placement (messages name it)
KIND_OPTIONS = {"encoder self-attention": "--encoder-attention-kinds", "decoder self-attention": "--decoder-attention-kinds",
                "encoder-decoder attention": "--cross-attention-kinds"}
EMBEDDINGS = re.compile(r"(embed_tokens|output_projection)\.weight$")


def _saved_option(saved, name: str):
    return saved.get(name) if hasattr(saved, "get") else getattr(saved, name, None)


def check_attention_kinds(model, path: str, saved) -> None:
    """A ``CheckpointError`` when the file's layers (its recorded architecture) have other kinds than ``model``."""
    recorded = _saved_option(saved, "architecture")
    if not recorded:
        return  # saved before the architecture was recorded: the kinds are not known without rebuilding it
    theirs = {(placement, index): kind for placement, index, kind in placed_kinds(Architecture.from_json(recorded))}
    ours = {(placement, index): kind for placement, index, kind in placed_kinds(model.architecture)}
    differing = [(placement, index, theirs[placement, index], kind) for (placement, index), kind in ours.items()
                 if (placement, index) in theirs and theirs[placement, index] != kind]
    if differing:
        placement, index, saved_kind, kind = differing[0]
        name = PLACEMENT_NAMES[placement]
        raise CheckpointError(
            f"{path}: its layers have other attention kinds than the options ask for ({len(differing)} layers; e.g. "
            f"{name} layer {index}: {saved_kind} in the checkpoint, {kind} asked by {KIND_OPTIONS[name]}): resume with "
            "the checkpoint's kinds, or train into another --save-dir")


def describe_mismatch(path: str, saved, error: RuntimeError) -> CheckpointError:
    """torch's "Error(s) in loading state_dict" of ``path``, as what differs."""
    message = str(error)
    size = re.search(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from checkpoint, "
                     r"the shape in current model is torch\.Size\((\[[^\]]*\])\)", message)
    if size and EMBEDDINGS.search(size.group(1)):
        rows_saved, rows_ours = size.group(2).strip("[]").split(",")[0], size.group(3).strip("[]").split(",")[0]
        return CheckpointError(
            f"{path}: trained with a dictionary of {rows_saved} entries, the data's has {rows_ours} ({size.group(1)}): "
            "the checkpoint belongs to other data (another binarisation or BPE); give the data folder it was trained on")
    saved_arch = (_saved_option(saved, "arch") or _saved_option(saved, "_name")) if saved is not None else None
    if size:
        return CheckpointError(f"{path}: {size.group(1)} has shape {size.group(2)} in the checkpoint, {size.group(3)} in "
                               f"the model the options build (the checkpoint's is {saved_arch}): give the options the "
                               "checkpoint was trained with")
    missing = re.search(r'Missing key\(s\) in state_dict: "([^"]+)"', message)
    unexpected = re.search(r'Unexpected key\(s\) in state_dict: "([^"]+)"', message)
    example = f"; e.g. {'no ' + missing.group(1) if missing else unexpected.group(1) + ' not in the model'}" if missing or unexpected else ""
    return CheckpointError(f"{path}: holds another model than the options build (the checkpoint's is {saved_arch}; a "
                           f"language model's and a translation model's weights differ){example}")


def load_checked(model, load: Callable, state_dict, **kwargs):
    """``load(state_dict, **kwargs)`` (fairseq's load_state_dict) with the checks of the module docstring when the
    weights come from a checkpoint file."""
    path, saved = loaded_from(state_dict)
    if path is None:
        return load(state_dict, **kwargs)
    if saved is not None and getattr(model, "architecture", None) is not None:  # (model None: no kinds to check)
        check_attention_kinds(model, path, saved)
    try:
        return load(state_dict, **kwargs)
    except RuntimeError as error:
        if "Error(s) in loading state_dict" not in str(error):
            raise
        raise describe_mismatch(path, saved, error) from error
