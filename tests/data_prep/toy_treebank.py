"""A toy treebank with known trees (CoNLL-U) and a spaCy parser trained on it
by data_prep/train_parser.sh, shared by the tests of the parser, the syntax
hints and BET(SG) end to end (trained once per session: it lives in the
session's temporary folder)."""
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "data_prep" / "train_parser.sh"
STEPS = 30

DETS = ["the", "a"]
ADJS = ["big", "small", "red", "old"]
NOUNS = ["dog", "cat", "bird", "man", "park", "house"]
VERBS = ["saw", "chased", "liked", "found"]
PREPS = ["in", "near", "with"]


def toy_sentence(rng: random.Random):
    """[form, upos, head (1-based, 0 = root), deprel] rows of one sentence of the toy grammar:
    DET (ADJ) NOUN VERB DET (ADJ) NOUN [ADP DET (ADJ) NOUN] ."""
    rows = []

    def add(form, upos, relation, head=None):
        rows.append([form, upos, head, relation])
        return len(rows)

    def noun_phrase(relation, head):
        modifiers = [add(rng.choice(DETS), "DET", "det")]
        if rng.random() < 0.5:
            modifiers.append(add(rng.choice(ADJS), "ADJ", "amod"))
        noun = add(rng.choice(NOUNS), "NOUN", relation, head)
        for modifier in modifiers:
            rows[modifier - 1][2] = noun
        return noun

    subject = noun_phrase("nsubj", None)
    verb = add(rng.choice(VERBS), "VERB", "root", 0)
    rows[subject - 1][2] = verb
    noun_phrase("obj", verb)
    if rng.random() < 0.5:
        preposition = add(rng.choice(PREPS), "ADP", "case")
        rows[preposition - 1][2] = noun_phrase("obl", verb)
    add(".", "PUNCT", "punct", verb)
    return rows


def write_conllu(path: Path, count: int, seed: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        rows = toy_sentence(rng)
        lines.append(f"# sent_id = toy-{seed}-{n + 1}")
        lines.append("# text = " + " ".join(r[0] for r in rows[:-1]) + ".")
        for i, (form, upos, head, relation) in enumerate(rows, 1):
            misc = "SpaceAfter=No" if i == len(rows) - 1 else "_"
            lines.append(f"{i}\t{form}\t{form}\t{upos}\t_\t_\t{head}\t{relation}\t_\t{misc}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_script(*args, python=sys.executable, check=True):
    env = dict(os.environ, PYTHON=python)
    result = subprocess.run(["bash", str(SCRIPT), *map(str, args)], env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"train_parser.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def treebank(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    return (write_conllu(root / "train.conllu", 60, seed=1), write_conllu(root / "dev.conllu", 15, seed=2),
            write_conllu(root / "test.conllu", 15, seed=3))


def small_parser(tmp_path_factory) -> Path:
    """OUTPUT_DIR of train_parser.sh on the toy treebank (trained once per session; a rerun is a no-op)."""
    root = tmp_path_factory.getbasetemp() / "toy_parser"
    output = root / "parser"
    if not (output / "metrics.json").exists():
        train, dev, test = treebank(root)
        run_script(train, dev, output, "--max-steps", STEPS, "--eval-frequency", 10, "--test", test)
    return output
