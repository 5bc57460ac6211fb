# Translation recipes (sourced by recipes/<dataset>/{train,generate}.sh after
# the dataset's config.sh). See recipes/lib/common.sh for the overrides.
# Defaults (a dataset's config.sh sets what differs): fairseq's IWSLT14
# example (Adam (0.9, 0.98) in common.sh, lr 5e-4, inverse sqrt with 4,000
# warm-up updates, weight decay 1e-4, label smoothing 0.1, 4,096 tokens per
# update), checkpoint_best.pt, beam 5.
: "${MAX_TOKENS:=4096}" "${TOKENS_PER_UPDATE:=4096}" "${LR:=5e-4}" "${WARMUP:=4000}" "${WEIGHT_DECAY:=0.0001}"
: "${LABEL_SMOOTHING:=0.1}" "${CLIP_NORM:=0.0}" "${SAVE_INTERVAL_UPDATES:=0}" "${AVERAGE_LAST:=0}"
: "${BEAM:=5}" "${LENPEN:=1.0}" "${GEN_MAX_TOKENS:=8000}"
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

train_translation() {  # [PRESET] [fairseq-train flags...]
    start_recipe "$@"
    common_train_args
    local share=(--share-all-embeddings)
    if [ "${SHARE_EMBEDDINGS:-all}" = decoder ]; then
        share=(--share-decoder-input-output-embed)
    fi
    run_training --task translation --source-lang "$SRC" --target-lang "$TGT" "${share[@]}" \
        --criterion label_smoothed_cross_entropy --label-smoothing "$LABEL_SMOOTHING"
}

# Beam search on every test subset of $DATA_BIN/testsets.tsv (or $SUBSETS),
# then tokenized BLEU and sacreBLEU on detokenised output (recipes/lib/score_translation.py).
generate_translation() {  # [PRESET] [fairseq-generate flags...]
    start_recipe "$@"
    local checkpoint out subset remove_bpe
    checkpoint=$(select_checkpoint)
    out=${OUT_DIR:-$SAVE_DIR/generate}
    mkdir -p "$out"
    remove_bpe=$("$PYTHON" -c "import json, sys; print('sentencepiece' if json.load(open(sys.argv[1])).get('bpe') == 'sentencepiece' else '@@ ')" "$DATA_BIN/prepare.json")
    : "${SUBSETS:=$(cut -f1 "$DATA_BIN/testsets.tsv" | tr '\n' ' ')}"
    for subset in $SUBSETS; do
        echo "[recipe] $DATASET $SRC-$TGT $subset ($(grep -P "^$subset\t" "$DATA_BIN/testsets.tsv" | cut -f2)): $checkpoint, beam $BEAM, lenpen $LENPEN" >&2
        # shellcheck disable=SC2086
        fairseq_cli generate "$DATA_BIN" --user-dir "$USER_DIR" --task translation --source-lang "$SRC" --target-lang "$TGT" \
            --path "$checkpoint" --gen-subset "$subset" --beam "$BEAM" --lenpen "$LENPEN" --remove-bpe "$remove_bpe" \
            --max-tokens "$GEN_MAX_TOKENS" --required-batch-size-multiple 1 "${EVAL_DEVICE_ARGS[@]}" \
            ${GEN_EXTRA_ARGS:-} "${USER_ARGS[@]}" > "$out/generate-$subset.txt" 2>&1 \
            || { tail -n 30 "$out/generate-$subset.txt" >&2; return 1; }
        # shellcheck disable=SC2086
        "$PYTHON" "$RECIPES_DIR/lib/score_translation.py" "$out/generate-$subset.txt" --data-bin "$DATA_BIN" \
            --subset "$subset" --lang "$TGT" --json "$out/score-$subset.json" ${SCORE_ARGS:-} | tee "$out/score-$subset.txt"
    done
}
