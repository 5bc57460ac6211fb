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
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

train_lm() {  # [PRESET] [fairseq-train flags...]
    start_recipe "$@"
    common_train_args
    run_training --task language_modeling --share-decoder-input-output-embed \
        --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none --criterion cross_entropy
}

# fairseq-eval-lm on the test set (or $SUBSETS) with a sliding context window;
# prints perplexity (word-level data) or bits per character (byte-level data).
evaluate_lm() {  # [PRESET] [fairseq-eval-lm flags...]
    start_recipe "$@"
    local checkpoint out subset unit log
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
