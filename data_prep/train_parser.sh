#!/usr/bin/env bash
# Train a spaCy dependency parser offline from CoNLL-U treebanks, for the
# BET(SG) syntax hints of data_prep/syntax_hints.py (no internet needed).
#
# Usage: data_prep/train_parser.sh TRAIN.conllu DEV.conllu OUTPUT_DIR [options] [-- spacy-train overrides]
#   --lang LANG          language of the blank spaCy pipeline (default en)
#   --max-steps N        training steps (default 2000)
#   --eval-frequency N   score DEV every N steps; model-best is the best of these (default min(200, N))
#   --seed N             random seed (default 0)
#   --gpu-id ID          GPU for training and evaluation, -1 = CPU (default -1)
#   --test FILE.conllu   also evaluate on this CoNLL-U file (repeatable)
#   --n-sents N          sentences per document in `spacy convert` (default 10)
#   --config FILE        spaCy training config (default data_prep/spacy_parser.cfg: tok2vec + parser)
#   after --              more `spacy train` config overrides, e.g. -- --training.dropout 0.2
#
# Steps: `python -m spacy convert` (CoNLL-U -> .spacy), `python -m spacy train`
# (gold tokenisation and one sentence per example, as syntax_hints.py parses:
# the text's own words, one line at a time), then spaCy's evaluate with gold
# tokenisation on DEV and every --test file, for model-best and model-last.
#
# OUTPUT_DIR holds model-best and model-last (spacy.load-able; pass
# OUTPUT_DIR/model-best to syntax_hints.py --spacy-model), config.cfg,
# train.log, metrics.json (unlabelled/labelled attachment scores, UAS/LAS in %,
# steps, training seconds) and signature.txt. Everything is written into
# OUTPUT_DIR.partial and renamed when complete; a rerun with the same inputs
# and settings prints the stored scores and does nothing; an interrupted run
# keeps its converted corpora (and a finished training) in OUTPUT_DIR.partial
# and continues from there (spaCy training itself restarts from step 0).
#
# Environment: PYTHON, the interpreter with spaCy (default: python on PATH, as
# in the recipes: `. .venv/bin/activate` first, or PYTHON=.venv/bin/python).
set -euo pipefail
shopt -s inherit_errexit

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python}
export PYTHONUNBUFFERED=1

die() {
    echo "error: $*" >&2
    exit 2
}

usage() {
    sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

LANG_CODE=en
MAX_STEPS=2000
EVAL_FREQUENCY=
SEED=0
GPU_ID=-1
N_SENTS=10
CONFIG=$SCRIPT_DIR/spacy_parser.cfg
TESTS=()
OVERRIDES=()
POSITIONAL=()
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --lang | --max-steps | --eval-frequency | --seed | --gpu-id | --test | --n-sents | --config)
            [ $# -ge 2 ] || die "$1 needs a value"
            case $1 in
                --lang) LANG_CODE=$2 ;;
                --max-steps) MAX_STEPS=$2 ;;
                --eval-frequency) EVAL_FREQUENCY=$2 ;;
                --seed) SEED=$2 ;;
                --gpu-id) GPU_ID=$2 ;;
                --test) TESTS+=("$2") ;;
                --n-sents) N_SENTS=$2 ;;
                --config) CONFIG=$2 ;;
            esac
            shift 2 ;;
        --) shift; OVERRIDES=("$@"); break ;;
        -*) die "unknown option $1 (see --help; spaCy config overrides go after --)" ;;
        *) POSITIONAL+=("$1"); shift ;;
    esac
done
[ ${#POSITIONAL[@]} -eq 3 ] || { usage >&2; die "expected TRAIN.conllu DEV.conllu OUTPUT_DIR, got ${#POSITIONAL[@]} argument(s)"; }
TRAIN=${POSITIONAL[0]}
DEV=${POSITIONAL[1]}
OUTPUT_DIR=${POSITIONAL[2]%/}
for name in MAX_STEPS SEED N_SENTS; do
    [[ ${!name} =~ ^[0-9]+$ ]] || die "--$(tr 'A-Z_' 'a-z-' <<<"$name") must be a non-negative integer, got '${!name}'"
done
[ "$MAX_STEPS" -ge 1 ] || die "--max-steps must be >= 1"
[ "$N_SENTS" -ge 1 ] || die "--n-sents must be >= 1"
: "${EVAL_FREQUENCY:=$((MAX_STEPS < 200 ? MAX_STEPS : 200))}"
[[ $EVAL_FREQUENCY =~ ^[1-9][0-9]*$ ]] || die "--eval-frequency must be a positive integer, got '$EVAL_FREQUENCY'"
[[ $GPU_ID =~ ^-?[0-9]+$ ]] || die "--gpu-id must be an integer (-1 = CPU), got '$GPU_ID'"
for file in "$TRAIN" "$DEV" "${TESTS[@]}"; do
    [ -f "$file" ] || die "CoNLL-U file $file not found"
    [ -s "$file" ] || die "CoNLL-U file $file is empty"
done
[ -f "$CONFIG" ] || die "--config $CONFIG not found"
SPACY_VERSION=$("$PYTHON" -c "import spacy; print(spacy.__version__)" 2>/dev/null) \
    || die "$PYTHON cannot import spacy: activate the project's venv (. .venv/bin/activate) or set PYTHON=.venv/bin/python; make setup (or pip install -c constraints.txt -r requirements.txt) installs it"

log() {
    echo "[train_parser] $*" >&2
}

# Everything that determines the model; a finished OUTPUT_DIR must match it.
signature() {
    echo "spacy $SPACY_VERSION"
    echo "config $(sha256sum <"$CONFIG" | cut -d' ' -f1)"
    echo "train $(sha256sum <"$TRAIN" | cut -d' ' -f1)"
    echo "dev $(sha256sum <"$DEV" | cut -d' ' -f1)"
    local test
    for test in "${TESTS[@]}"; do
        echo "test $(sha256sum <"$test" | cut -d' ' -f1) $(basename "$test")"
    done
    echo "lang $LANG_CODE max_steps $MAX_STEPS eval_frequency $EVAL_FREQUENCY seed $SEED n_sents $N_SENTS"
    echo "overrides ${OVERRIDES[*]}"
}
SIGNATURE=$(signature)

print_scores() {
    "$PYTHON" - "$1" <<'EOF'
import json, sys
metrics = json.load(open(sys.argv[1]))
for model, sets in metrics["scores"].items():
    for name, scores in sets.items():
        print(f"[train_parser] {model} on {name}: UAS {scores['uas']:.2f}  LAS {scores['las']:.2f}  ({scores['file']})")
print(f"[train_parser] {metrics['steps']} steps, {metrics['train_seconds']:.0f} s of training", flush=True)
EOF
}

if [ -e "$OUTPUT_DIR" ]; then
    if [ -f "$OUTPUT_DIR/metrics.json" ] && [ -f "$OUTPUT_DIR/signature.txt" ] && [ -d "$OUTPUT_DIR/model-best" ]; then
        if [ "$(cat "$OUTPUT_DIR/signature.txt")" = "$SIGNATURE" ]; then
            log "$OUTPUT_DIR: up to date"
            print_scores "$OUTPUT_DIR/metrics.json" >&2
            exit 0
        fi
        die "$OUTPUT_DIR was trained from other files or settings (see $OUTPUT_DIR/signature.txt); remove it or choose another OUTPUT_DIR"
    fi
    die "$OUTPUT_DIR exists and is not a finished train_parser.sh output; remove it or choose another OUTPUT_DIR"
fi

WORK=$OUTPUT_DIR.partial
if [ -d "$WORK" ] && [ "$(cat "$WORK/signature.txt" 2>/dev/null)" != "$SIGNATURE" ]; then
    log "$WORK: left by a run with other files or settings; starting over"
    rm -rf "$WORK"
fi
mkdir -p "$WORK/corpus"
printf '%s\n' "$SIGNATURE" >"$WORK/signature.txt"

# CoNLL-U -> WORK/corpus/NAME.spacy (via a temporary folder: spacy convert names its output after the input).
convert() {
    local src=$1 name=$2
    local dst=$WORK/corpus/$name.spacy
    if [ -f "$dst" ]; then
        log "convert $src: done before"
        return 0
    fi
    local tmp=$WORK/corpus/$name.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp"
    log "convert $src"
    "$PYTHON" -m spacy convert "$src" "$tmp" --converter conllu --n-sents "$N_SENTS" --file-type spacy >&2 \
        || die "spacy convert failed on $src (is it CoNLL-U?)"
    local out=("$tmp"/*.spacy)
    [ -f "${out[0]}" ] || die "spacy convert wrote no .spacy file for $src (is it CoNLL-U?)"
    mv "${out[0]}" "$dst"
    rm -rf "$tmp"
}
convert "$TRAIN" train
convert "$DEV" dev
EVAL_SETS=("dev=$WORK/corpus/dev.spacy=$DEV")
for i in "${!TESTS[@]}"; do
    convert "${TESTS[$i]}" "test$i"
    EVAL_SETS+=("test$i=$WORK/corpus/test$i.spacy=${TESTS[$i]}")
done

if [ -f "$WORK/training.done" ]; then
    log "training: done before"
else
    rm -rf "$WORK/training" "$WORK/model-best" "$WORK/model-last"
    log "spacy train: $MAX_STEPS steps (evaluating every $EVAL_FREQUENCY), log in $WORK/train.log"
    start=$SECONDS
    if ! "$PYTHON" -m spacy train "$CONFIG" --output "$WORK/training" --gpu-id "$GPU_ID" \
        --paths.train "$WORK/corpus/train.spacy" --paths.dev "$WORK/corpus/dev.spacy" --nlp.lang "$LANG_CODE" \
        --training.max_steps "$MAX_STEPS" --training.eval_frequency "$EVAL_FREQUENCY" --system.seed "$SEED" \
        "${OVERRIDES[@]}" 2>&1 | tee "$WORK/train.log" >&2; then
        die "spacy train failed (see $WORK/train.log)"
    fi
    [ -d "$WORK/training/model-best" ] && [ -d "$WORK/training/model-last" ] \
        || die "spacy train wrote no model-best/model-last in $WORK/training (see $WORK/train.log)"
    mv "$WORK/training/model-best" "$WORK/training/model-last" "$WORK/"
    rm -rf "$WORK/training"
    echo "$((SECONDS - start))" >"$WORK/training.done"
fi

log "evaluating (gold tokenisation)"
"$PYTHON" - "$WORK" "$MAX_STEPS" "$GPU_ID" "${EVAL_SETS[@]}" <<'EOF' || die "evaluation failed"
import json, os, sys
from pathlib import Path
from spacy.cli.evaluate import evaluate

work, steps, gpu_id, sets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
scores = {}
for model in ("model-best", "model-last"):
    scores[model] = {}
    for entry in sets:
        name, data, source = entry.split("=", 2)
        result = evaluate(os.path.join(work, model), Path(data), use_gpu=gpu_id, gold_preproc=True)
        if result.get("dep_uas") is None:
            sys.exit(f"error: spaCy's evaluation of {model} on {source} has no dep_uas (no parser?)")
        scores[model][name] = {"file": os.path.abspath(source), "uas": 100 * result["dep_uas"],
                               "las": 100 * result["dep_las"]}
metrics = {"scores": scores, "steps": steps,
           "train_seconds": float(open(os.path.join(work, "training.done")).read()),
           "note": "UAS/LAS in %, spaCy's scorer, gold tokenisation, punctuation included"}
partial = os.path.join(work, "metrics.json.partial")
with open(partial, "w") as f:
    json.dump(metrics, f, indent=2)
    f.write("\n")
os.replace(partial, os.path.join(work, "metrics.json"))
EOF

cp "$CONFIG" "$WORK/config.cfg"
rm -rf "$WORK/corpus" "$WORK/training.done"
mv "$WORK" "$OUTPUT_DIR"
print_scores "$OUTPUT_DIR/metrics.json" >&2
log "ready: $OUTPUT_DIR/model-best"
