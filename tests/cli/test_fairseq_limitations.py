"""fairseq's own failures, recorded so that a fixed fairseq shows up here.

The known limitations in docs/troubleshooting.md name two generation options that fail in
fairseq 0.12.3.1 itself, for every model: fairseq's own `transformer` fails
exactly like our presets. We do not patch fairseq. Each test below runs the
real CLI on a model of each kind (trained for 2 updates: the failures do not
depend on what the model learnt) and expects fairseq's error; if fairseq
starts to accept the option, the test fails and says what to remove.

1. `fairseq-generate --diverse-beam-groups N` on a subset of more than one
   batch::

       File ".../fairseq/search.py", line 649, in step
         penalty_val = 1 + self.group_overlap[original_batch_idxs, g, :g]
       IndexError: index 9 is out of bounds for dimension 0 with size 8

   `SequenceGenerator._generate` (fairseq/sequence_generator.py, line 337)
   passes the sentences' dataset ids (`sample["id"]`) as
   `original_batch_idxs`; `DiverseBeamSearch.step` (fairseq/search.py) keeps
   `group_overlap` with one row per sentence of the batch and indexes it with
   those ids from the second decoding step on. A batch whose ids are all below
   its size (one batch holding the whole subset) decodes; any id at or above
   the batch size raises. fairseq-interactive is not affected (its samples
   carry no "id", so it falls back to 0..bsz-1).

2. `--score-reference` in fairseq-interactive::

       File ".../fairseq/sequence_scorer.py", line 61, in generate
         orig_target = sample["target"]
       KeyError: 'target'

   `SequenceScorer.generate` (fairseq/sequence_scorer.py) scores
   `sample["target"]`, and fairseq-interactive builds its samples with
   "net_input" only (fairseq_cli/interactive.py, `main`, line 220): there is no
   reference to score. fairseq-generate's samples carry the test set's
   targets: `fairseq-generate --score-reference` works for both models
   (checked by hand when this was written: the references come back as the
   hypotheses, BLEU 100).

3. `fairseq-generate --constraints`::

       File ".../fairseq/search.py", line 241, in init_constraints
         for constraint_tensor in batch_constraints:
       TypeError: 'NoneType' object is not iterable

   fairseq-generate reads a binarised test set, which holds no constraints
   (`sample` has no "constraints"; fairseq_cli/generate.py, `_main`), and
   `LexicallyConstrainedBeamSearch.init_constraints` iterates over None.
   Constraints are given to fairseq-interactive, after a tab on each input
   line; that works for both models (tests/cli/test_end_to_end.py checks it
   on a cosFormer and Extractor decoder).

Each fairseq CLI run is a fresh interpreter (~3-5 s of imports), so the file
keeps to the runs it needs: preprocess, two trainings, six failing runs.
"""
import re

import pytest

from fairseq_plugins.cli.pipeline import (
    EVALUATE_ALL,
    PLUGIN_DIR,
    TINY_TRANSLATION_SIZES,
    TRANSLATION_TRAINING,
    CommandFailed,
    fairseq_command,
    run,
    train,
)
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

# fairseq's own transformer and one of our presets, both shrunk (the preset as
# tests/cli/translation_presets.py shrinks it).
MODELS = {
    "transformer": ["--encoder-layers", "1", "--decoder-layers", "1"],
    "mixed_transformer_iwslt_de_en": ["--encoder-layers", "2", "--decoder-layers", "2"],
}
SPLITS = {"train": 64, "valid": 8, "test": 20}
BATCH_SIZE = 8  # 20 test sentences: three batches, most of their ids >= 8
MAX_UPDATE = 2


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("limitations")
    write_translation_task(str(root / "raw"), splits=SPLITS)
    return binarize_translation(str(root / "raw"), str(root / "bin"))


@pytest.fixture(scope="module", params=list(MODELS))
def checkpoint(request, data_bin, tmp_path_factory):
    arch = request.param
    save_dir = tmp_path_factory.mktemp(arch)
    return train(data_bin, str(save_dir), arch, TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + MODELS[arch], max_update=MAX_UPDATE).checkpoint


def fails_with(command, option, error_pattern, where, input_text=None):
    """Run a fairseq CLI that fairseq 0.12.3.1 makes fail; assert its error
    (regex error_pattern) and the fairseq line that raises it (regex where;
    line numbers left open, so that a fairseq release that only moves the code
    still matches)."""
    try:
        output = run(command, input_text=input_text)
    except CommandFailed as failure:
        output = str(failure)
    else:
        pytest.fail(f"fairseq now supports {option}: remove it from docs/troubleshooting.md's limitations and this test\n{output[-1500:]}")
    assert re.search(error_pattern, output), f"{option} failed, but not with fairseq's known error {error_pattern!r}:\n{output}"
    assert re.search(where, output), f"{option} failed with {error_pattern!r}, but not in {where!r}:\n{output}"


def test_diverse_beam_groups_fails_in_fairseq_generate(data_bin, checkpoint):
    fails_with(
        fairseq_command("generate") + [
            data_bin, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--cpu", "--gen-subset", "test", "--num-workers", "0",
            "--batch-size", str(BATCH_SIZE), *EVALUATE_ALL, "--beam", "4", "--diverse-beam-groups", "2",
        ],
        "--diverse-beam-groups",
        r"IndexError: index \d+ is out of bounds for dimension 0 with size \d+",
        r'fairseq/search\.py", line \d+, in step\n\s+penalty_val = 1 \+ self\.group_overlap\[original_batch_idxs',
    )


def test_score_reference_fails_in_fairseq_interactive(data_bin, checkpoint):
    fails_with(
        fairseq_command("interactive") + [
            data_bin, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--cpu", "-s", "src", "-t", "tgt", *EVALUATE_ALL,
            "--score-reference",
        ],
        "--score-reference in fairseq-interactive",
        r"KeyError: 'target'",
        r'fairseq/sequence_scorer\.py", line \d+, in generate\n\s+orig_target = sample\["target"\]',
        input_text="s1 s2 s3\n",
    )



def test_constraints_fail_in_fairseq_generate(data_bin, checkpoint):
    fails_with(
        fairseq_command("generate") + [
            data_bin, "--user-dir", PLUGIN_DIR, "--path", checkpoint, "--cpu", "--gen-subset", "test", "--num-workers", "0",
            "--batch-size", str(BATCH_SIZE), *EVALUATE_ALL, "--beam", "4", "--constraints",
        ],
        "--constraints in fairseq-generate",
        r"TypeError: 'NoneType' object is not iterable",
        r'fairseq/search\.py", line \d+, in init_constraints\n\s+for constraint_tensor in batch_constraints:',
    )
