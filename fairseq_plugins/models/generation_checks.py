"""Generation options checked before the first sentence is decoded (``prepare_for_inference_``, which
fairseq-generate, fairseq-interactive, fairseq-eval-lm and the hub interface call on every model they load):
options that fairseq would ignore silently, or that would fail mid-run, are one-line errors naming them.

* ``--retain-dropout-modules``: fairseq keeps dropout in the modules whose class name is listed and silently
  ignores a name that matches none (fairseq's own layer names, ``TransformerDecoderLayerBase``, are not this
  package's); ``--retain-dropout`` on a model whose dropout probabilities are all 0 changes nothing.
* ``fairseq-generate --lm-path`` (shallow fusion): fairseq's ``SequenceGenerator`` bounds the hypotheses by the
  translation model's positions only and scores every prefix of a hypothesis, end of sentence included, with the
  language model in a full pass (``lm_model(tokens[:, :step + 1])``); a hypothesis longer than the language
  model's positions fails mid-run (cosFormer's horizon, learned positions) or is scored past what it was trained
  for. The longest hypothesis the options allow must fit."""
import os
import re
from typing import List, Optional

from fairseq.modules.fairseq_dropout import FairseqDropout

from ..modules import AttentionConfigError


def modules_applying_dropout(model) -> List[str]:
    """The class names (fairseq's ``module_name``) of the model's dropouts with a probability above 0."""
    return sorted({m.module_name for m in model.modules() if isinstance(m, FairseqDropout) and m.module_name and m.p > 0})


def retained_module_names(value) -> List[str]:
    """The class names ``--retain-dropout-modules`` lists: the command line gives one string (fairseq then tests
    ``module_name in`` that string), Python or a hydra config a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return re.findall(r"[A-Za-z_]\w*", value)
    return [str(name) for name in value]


def check_retain_dropout(model, generation) -> None:
    if not getattr(generation, "retain_dropout", False):
        return
    applying = modules_applying_dropout(model)
    if not applying:
        raise AttentionConfigError(
            "--retain-dropout: the model applies no dropout (every dropout probability it was trained with is 0), so its "
            "outputs would be those without the option; give probabilities with --model-overrides, e.g. \"{'dropout': 0.1}\"")
    unknown = [name for name in retained_module_names(getattr(generation, "retain_dropout_modules", None)) if name not in applying]
    if unknown:
        raise AttentionConfigError(
            f"--retain-dropout-modules {','.join(unknown)}: no module of the model of that class applies dropout; the "
            f"model's modules that do: {', '.join(applying)} (class names)")


def longest_hypothesis(generation, task) -> tuple:
    """The most tokens (end of sentence not counted) a hypothesis may have under the generation options, as
    ``SequenceGenerator._generate`` bounds it, and the options that set that bound."""
    source = getattr(task, "max_source_positions", None)
    target = getattr(task, "max_target_positions", None)
    if getattr(generation, "match_source_len", False):
        return source, f"--match-source-len: as long as a source, up to --max-source-positions {source}"
    a, b = float(generation.max_len_a), int(generation.max_len_b)
    if a > 0 and source is None:
        return None, ""
    longest = int(a * (source or 0) + b)
    why = f"--max-len-a {a:g} x --max-source-positions {source} + --max-len-b {b}" if a > 0 else f"--max-len-b {b}"
    if target is not None and target - 1 < longest:
        longest, why = target - 1, f"--max-target-positions {target} - 1"
    return longest, why


def check_fusion_positions(model, generation, task) -> None:
    positions = model.max_decoder_positions()
    longest, why = longest_hypothesis(generation, task)
    if longest is None or longest + 1 <= positions:
        return
    remedy = (f"give --max-source-positions {positions - 1} or less (with --skip-invalid-size-inputs-valid-test), or "
              "leave out --match-source-len" if getattr(generation, "match_source_len", False)
              else f"give --max-len-a 0 --max-len-b {positions - 1} or less")
    raise AttentionConfigError(
        f"--lm-path {generation.lm_path}: the language model has {positions} positions (what it was built for) and fairseq "
        f"scores every prefix of a hypothesis with it, the end of sentence included: hypotheses of up to {longest} tokens "
        f"({why}) need {longest + 1}; {remedy}")


def is_fusion_language_model(model, generation) -> bool:
    """Whether ``model`` is the language model of ``--lm-path`` (its weights came from that file)."""
    lm_path: Optional[str] = getattr(generation, "lm_path", None)
    loaded = getattr(model, "loaded_file", None)
    return bool(lm_path and loaded and os.path.exists(lm_path) and os.path.exists(loaded) and os.path.samefile(lm_path, loaded))


class GenerationChecks:
    """Mixed into this package's models: the checks of the module docstring, before fairseq's
    ``prepare_for_inference_``. (The language model of ``--lm-path`` is checked for its positions only: the
    dropout options are the decoded models'.)"""

    def prepare_for_inference_(self, cfg):
        generation = getattr(cfg, "generation", None)
        if generation is not None:
            if is_fusion_language_model(self, generation):
                check_fusion_positions(self, generation, getattr(cfg, "task", None))
            else:
                check_retain_dropout(self, generation)
        super().prepare_for_inference_(cfg)
