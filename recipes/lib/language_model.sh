# Language-model recipes (sourced by recipes/<dataset>/{train,evaluate}.sh
# after the dataset's config.sh). See recipes/lib/common.sh for the overrides.
# Defaults (a dataset's config.sh sets what differs): fairseq's
# examples/language_model settings for transformer_lm on WikiText-103 (Adam
# (0.9, 0.98) in common.sh, lr 5e-4, inverse sqrt with 4,000 warm-up updates,
# weight decay 0.01, dropout 0.1, 512 tokens per sample, 2,048 tokens per batch
# and 32,768 per update, 50,000 updates; eval-lm with a 400-token context).
: "${MAX_TOKENS:=2048}" "${TOKENS_PER_UPDATE:=32768}" "${MAX_UPDATE:=50000}" "${TOKENS_PER_SAMPLE:=512}"
: "${LR:=5e-4}" "${WARMUP:=4000}" "${WEIGHT_DECAY:=0.01}" "${DROPOUT:=0.1}" "${CLIP_NORM:=0.0}"
: "${SAVE_INTERVAL_UPDATES:=0}" "${AVERAGE_LAST:=0}" "${CONTEXT_WINDOW:=400}" "${GEN_MAX_TOKENS:=4096}"
# BET(SG) language models have no preset of their own (the BET(SF) preset
# trained with the pointer loss): SYNTAX_HINTS=1 keeps their checkpoints apart,
# in checkpoints/<dataset>/<preset>_sg (train.sh and evaluate.sh alike).
if [ "${SYNTAX_HINTS:-0}" = 1 ]; then
    SAVE_SUFFIX=_sg
fi
# shellcheck source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=../lib/syntax_hints.sh
source "$(dirname "${BASH_SOURCE[0]}")/syntax_hints.sh"
profile_preset mixed_transformer_lm_cpu_small

train_lm() {  # [PRESET] [fairseq-train flags...]
    start_recipe "$@"
    own_data_budget "$DATA_BIN/train" || return
    if [ "${EVAL_BLEU:-0}" != 0 ]; then  # not silently ignored: a language model has no BLEU
        echo "[recipe] error: EVAL_BLEU=$EVAL_BLEU: valid BLEU is for the translation recipes; $DATASET trains" \
            "a language model, whose checkpoint_best.pt is chosen by the valid loss" >&2
        return 2
    fi
    local task=(--task language_modeling) criterion=(--criterion cross_entropy)
    if [ "${SYNTAX_HINTS:-0}" = 1 ]; then  # BET(SG): hints of the words from syntax_hints.sh
        if [ -n "${NO_SYNTAX_HINTS_REASON:-}" ]; then
            echo "[recipe] error: SYNTAX_HINTS=1: $NO_SYNTAX_HINTS_REASON" >&2
            return 2
        fi
        syntax_hints_training "syntax hints of the words ($DATA_BIN/{train,valid}.hints)"
        # label smoothing 0: the token loss is cross_entropy's, as without SYNTAX_HINTS
        task=(--task language_modeling_with_syntax --syntax-hints required)
        criterion=("${POINTER_CRITERION[@]}" --label-smoothing 0)
    fi
    common_train_args
    run_training "${task[@]}" --share-decoder-input-output-embed \
        --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none "${criterion[@]}"
}

# supernet.sh: the weight-sharing language-model supernet (mixed_supertransformer_lm, docs/search.md,
# "The language-model supernet") over SEARCH_SPACE (default search_spaces/$SUPERNET_SPACE.yaml, the data set's space) with
# --task supernet_language_modeling: SUPERNET_SAMPLING (sandwich: the largest, the smallest and
# SANDWICH_RANDOM sampled sub-networks per update; random: one sampled), validation of the largest and
# the smallest; the data set's language-model settings otherwise (train.sh's).
train_lm_supernet() {  # [fairseq-train flags...]
    DEFAULT_PRESET=mixed_supertransformer_lm
    start_recipe "$@"
    check_supernet_recipe mixed_supertransformer_lm || return
    common_train_args
    # --find-unused-parameters: as train_supernet (lib/translation.sh): data-parallel supernet updates need it
    run_training --task supernet_language_modeling --search-space "$SEARCH_SPACE" --find-unused-parameters \
        --supernet-sampling "${SUPERNET_SAMPLING:-sandwich}" --supernet-sandwich-random "${SANDWICH_RANDOM:-2}" \
        --share-decoder-input-output-embed --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none \
        --criterion cross_entropy
}

# The hint dataset prefix of a split, as the language_modeling_with_syntax task
# reads it (fairseq_plugins/data/syntax_hints.py, hint_dataset_prefix).
hint_prefix() {  # SPLIT
    echo "$DATA_BIN/$1.hints"
}

# BET(SG) syntax hints of every split (train, valid, test) of a word-level
# corpus, parsed with $SPACY_MODEL from the text fairseq-preprocess binarised
# ($WORK_DIR/text/<split>.txt: one line of the corpus per line, its tokens as
# words, --bpe none), written next to the binaries as
# $DATA_BIN/<split>.hints.{bin,idx,info.json}. Flags go to
# data_prep/syntax_hints.py (e.g. --n-process 4); finished datasets are not
# redone (the tool checks its input and model fingerprints).
syntax_hints_lm() {  # [data_prep/syntax_hints.py flags...]
    syntax_hints_help "$@"
    syntax_hints_setup "the corpus's language (English for WikiText)"
    local unit
    unit=$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1])).get('unit'))" "$DATA_BIN/prepare.json")
    if [ "$unit" != word ]; then
        echo "[recipe] error: $DATA_BIN is modelled per $unit, not per word: syntax hints need words to parse" \
            "(BET(SG) applies to word-level data such as WikiText)" >&2
        return 2
    fi
    write_syntax_hints "$(printf 'train\t%s\nvalid\t%s\ntest\t%s\n' "$WORK_DIR/text/train.txt" \
        "$WORK_DIR/text/valid.txt" "$WORK_DIR/text/test.txt")" "$@"
}

# fairseq-eval-lm on the test set (or $SUBSETS) with a sliding context window;
# prints perplexity (word-level data) or bits per character (byte-level data).
evaluate_lm() {  # [PRESET] [fairseq-eval-lm flags...]
    start_recipe "$@"
    local checkpoint out subset unit log
    for subset in ${SUBSETS:-test}; do  # fairseq-eval-lm would report a perplexity over nothing
        if ! [ -s "$DATA_BIN/$subset.bin" ]; then
            echo "error: $DATA_BIN/$subset.bin is missing or empty: the $subset split has no tokens to evaluate" \
                "(SUBSETS=${SUBSETS:-test})" >&2
            exit 2
        fi
    done
    checkpoint=$(select_checkpoint)
    out=${OUT_DIR:-$SAVE_DIR/evaluate}
    mkdir -p "$out"
    unit=$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['unit'])" "$DATA_BIN/prepare.json")
    for subset in ${SUBSETS:-test}; do
        log="$out/eval-lm-$subset.txt"
        # shellcheck disable=SC2086
        fairseq_cli eval_lm "$DATA_BIN" --user-dir "$USER_DIR" --task language_modeling --path "$checkpoint" \
            --gen-subset "$subset" --tokens-per-sample "$TOKENS_PER_SAMPLE" --context-window "$CONTEXT_WINDOW" \
            --max-tokens "$GEN_MAX_TOKENS" --required-batch-size-multiple 1 "${EVAL_DEVICE_ARGS[@]}" \
            ${GEN_EXTRA_ARGS:-} "${USER_ARGS[@]}" > "$log" 2>&1 || { tail -n 30 "$log" >&2; return 1; }
        "$PYTHON" "$RECIPES_DIR/lib/lm_report.py" "$log" --unit "$unit" --subset "$subset" --dataset "$(basename "$DATA_BIN")" \
            --checkpoint "$checkpoint" --json "$out/score-$subset.json" | tee "$out/score-$subset.txt"
    done
}
