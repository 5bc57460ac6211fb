# BET(SG) syntax hints, shared by the translation and the language-model recipes
# (sourced by recipes/lib/translation.sh and recipes/lib/language_model.sh after
# common.sh). The caller defines hint_prefix SUBSET: the prefix under which its
# fairseq task reads the hints of a subset (fairseq_plugins/data/syntax_hints.py,
# hint_dataset_prefix). See recipes/README.md, "BET(SG) syntax hints".

# syntax_hints.sh --help: the script's header, the settings, the overrides and
# data_prep/syntax_hints.py's flags; then exits.
syntax_hints_help() {  # "$@" of syntax_hints.sh
    if wants_help "$@"; then
        recipe_help
        echo
        "$PYTHON" "$REPO_ROOT/data_prep/syntax_hints.py" --help
        exit 0
    fi
}

# Checks SPACY_MODEL and that $DATA_BIN is prepared (prepare.json and the other
# files named), and sets HINTS_BPE (default: the "bpe" of $DATA_BIN/prepare.json,
# "none" when it has none, as for word-level language-model data).
syntax_hints_setup() {  # LANGUAGE_OR_TEXT_PARSED [other file in $DATA_BIN...]
    local what=$1 file bpe
    shift
    if [ -z "${SPACY_MODEL:-}" ]; then
        echo "[recipe] error: set SPACY_MODEL to a spaCy pipeline with a dependency parser for $what (a folder such" \
            "as OUTPUT_DIR/model-best of data_prep/train_parser.sh, or an installed package name)" >&2
        return 2
    fi
    for file in prepare.json "$@"; do
        if [ ! -f "$DATA_BIN/$file" ]; then
            echo "[recipe] error: $DATA_BIN is not prepared (no $file); run recipes/$DATASET/prepare.sh first" >&2
            return 2
        fi
    done
    bpe=$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1])).get('bpe') or 'none')" "$DATA_BIN/prepare.json")
    : "${HINTS_BPE:=$bpe}"
}

# Runs data_prep/syntax_hints.py on the text each subset was binarised from:
# one "SUBSET<TAB>TEXT FILE" line per subset in PAIRS, output $(hint_prefix SUBSET),
# with --spacy-model $SPACY_MODEL --bpe $HINTS_BPE and the flags given. Every text
# is checked before any is parsed; all subsets run in one process
# (recipes/lib/syntax_hints_splits.py: fairseq and spaCy are imported once). The
# tool skips datasets that are up to date (input and model fingerprints).
write_syntax_hints() {  # PAIRS [syntax_hints.py flags...]
    local pairs=$1 subset text splits=()
    shift
    while IFS=$'\t' read -r subset text; do
        [ -n "$subset" ] || continue
        if [ ! -f "$text" ]; then
            echo "[recipe] error: $text (the text subset $subset was binarised from) is missing; WORK_DIR must be" \
                "the preparation's work folder (rerun recipes/$DATASET/prepare.sh)" >&2
            return 2
        fi
        splits+=("$subset" "$text" "$(hint_prefix "$subset")")
    done <<< "$pairs"
    echo "[recipe] syntax hints of $((${#splits[@]} / 3)) subsets with --spacy-model $SPACY_MODEL --bpe $HINTS_BPE" >&2
    "$PYTHON" "$RECIPES_DIR/lib/syntax_hints_splits.py" "${splits[@]}" -- \
        --spacy-model "$SPACY_MODEL" --bpe "$HINTS_BPE" "$@" < /dev/null
}

# train.sh with SYNTAX_HINTS=1: stops with a message naming syntax_hints.sh when
# the training hints are missing (not checked with DRY_RUN=1), and sets
# POINTER_CRITERION to the pointer criterion's flags (the caller adds the
# label smoothing).
syntax_hints_training() {  # DESCRIPTION of the hints, for the log
    local hints
    hints=$(hint_prefix train)
    if [ "${DRY_RUN:-0}" != 1 ] && [ ! -f "$hints.idx" ]; then
        echo "[recipe] error: SYNTAX_HINTS=1 but $hints.bin/.idx is missing; write the hints first with" \
            "SPACY_MODEL=... recipes/$DATASET/syntax_hints.sh (see recipes/README.md, BET(SG))" >&2
        return 1
    fi
    # shellcheck disable=SC2034  # read by the caller
    POINTER_CRITERION=(--criterion label_smoothed_cross_entropy_with_pointer --pointer-loss-weight "${POINTER_LOSS_WEIGHT:-1.0}")
    echo "[recipe] BET(SG): $1, pointer loss weight ${POINTER_LOSS_WEIGHT:-1.0}" >&2
}
