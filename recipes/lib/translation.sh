# Translation recipes (sourced by recipes/<dataset>/{train,generate}.sh after
# the dataset's config.sh). See recipes/lib/common.sh for the overrides.
# Defaults (a dataset's config.sh sets what differs): fairseq's IWSLT14
# example (Adam (0.9, 0.98) in common.sh, lr 5e-4, inverse sqrt with 4,000
# warm-up updates, weight decay 1e-4, label smoothing 0.1, 4,096 tokens per
# update), checkpoint_best.pt, beam 5.
: "${MAX_TOKENS:=4096}" "${TOKENS_PER_UPDATE:=4096}" "${LR:=5e-4}" "${WARMUP:=4000}" "${WEIGHT_DECAY:=0.0001}"
: "${LABEL_SMOOTHING:=0.1}" "${CLIP_NORM:=0.0}" "${SAVE_INTERVAL_UPDATES:=0}" "${AVERAGE_LAST:=0}"
: "${BEAM:=5}" "${LENPEN:=1.0}" "${GEN_MAX_TOKENS:=8000}"
# shellcheck source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=../lib/syntax_hints.sh
source "$(dirname "${BASH_SOURCE[0]}")/syntax_hints.sh"
profile_preset mixed_transformer_cpu_small
# The output length cap of generate.sh and of EVAL_BLEU's validation alike: at most
# MAX_LEN_A x source length + MAX_LEN_B tokens (fairseq's --max-len-a/--max-len-b).
: "${MAX_LEN_A:=1.2}" "${MAX_LEN_B:=10}"

train_translation() {  # [PRESET] [fairseq-train flags...]
    start_recipe "$@"
    own_data_budget "$DATA_BIN/train.$SRC-$TGT.$TGT" || return
    common_train_args
    local share=(--share-all-embeddings)
    if [ "${SHARE_EMBEDDINGS:-all}" = decoder ]; then
        share=(--share-decoder-input-output-embed)
    fi
    local task=(--task translation) criterion=(--criterion label_smoothed_cross_entropy)
    if [ "${SYNTAX_HINTS:-0}" = 1 ]; then  # BET(SG): hints of $TGT from syntax_hints.sh
        syntax_hints_training "syntax hints of $TGT ($DATA_BIN/*.$SRC-$TGT.$TGT.hints)"
        task=(--task translation_with_syntax --syntax-hints required)
        criterion=("${POINTER_CRITERION[@]}")
    fi
    local eval_bleu=()
    if [ "${EVAL_BLEU:-0}" = 1 ]; then
        eval_bleu_args || return
        eval_bleu=("${EVAL_BLEU_ARGS[@]}")
    elif [ "${EVAL_BLEU:-0}" != 0 ]; then
        echo "[recipe] error: EVAL_BLEU=$EVAL_BLEU: expected 1 (select checkpoint_best.pt by valid BLEU) or 0" >&2
        return 2
    fi
    run_training "${task[@]}" --source-lang "$SRC" --target-lang "$TGT" "${share[@]}" \
        "${criterion[@]}" --label-smoothing "$LABEL_SMOOTHING" "${eval_bleu[@]}"
}

# supernet.sh: the weight-sharing supernet (mixed_supertransformer, docs/search.md, "The supernet") over
# SEARCH_SPACE (default search_spaces/$SUPERNET_SPACE.yaml, the data set's space) with --task
# supernet_translation: SUPERNET_SAMPLING (sandwich: the largest and the smallest once per attention
# kind, with every sub-layer of that kind, and SANDWICH_RANDOM sampled sub-networks per update, the mean of their losses; random: one sampled), validation of the
# largest and the smallest; SUPERNET_ARGS (an array set by the data set's supernet.sh): its own
# fairseq-train flags. Checkpoints: checkpoints/<dataset>/mixed_supertransformer by default.
train_supernet() {  # [fairseq-train flags...]
    DEFAULT_PRESET=mixed_supertransformer
    [ -n "${SUPERNET_ARGS+set}" ] || SUPERNET_ARGS=()
    start_recipe "$@"
    check_supernet_recipe mixed_supertransformer || return
    common_train_args
    local share=(--share-all-embeddings)
    if [ "${SHARE_EMBEDDINGS:-all}" = decoder ]; then
        share=(--share-decoder-input-output-embed)
    fi
    # --find-unused-parameters: a sub-network leaves containers unused, which PyTorch's DistributedDataParallel
    # (fairseq's default on GPUs) must be told (fairseq_plugins/search/supernet_tasks.py); without data-parallel
    # workers it changes nothing
    run_training --task supernet_translation --search-space "$SEARCH_SPACE" --find-unused-parameters \
        --supernet-sampling "${SUPERNET_SAMPLING:-sandwich}" --supernet-sandwich-random "${SANDWICH_RANDOM:-2}" \
        --source-lang "$SRC" --target-lang "$TGT" "${share[@]}" \
        --criterion label_smoothed_cross_entropy --label-smoothing "$LABEL_SMOOTHING" "${SUPERNET_ARGS[@]}"
}

# The subword style of $DATA_BIN: the bpe of its prepare.json (data_prep's preparations; no field is
# subword-nmt), or subword-nmt for binaries of your own, which have none (docs/own-data.md makes them
# with subword-nmt).
subword_style() {
    local settings="$DATA_BIN/prepare.json"
    if [ -f "$settings" ]; then
        "$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1])).get('bpe', 'subword-nmt'))" "$settings"
    else
        echo subword-nmt
    fi
}

# EVAL_BLEU=1 (fairseq's IWSLT14 example): fairseq-train beam-decodes the valid set at every
# validation and keeps checkpoint_best.pt by that BLEU. Decoded as generate.sh decodes (BEAM,
# LENPEN; output length at most MAX_LEN_A x source + MAX_LEN_B, as generate.sh's) and detokenised as score_translation.py
# does for sacreBLEU: subword-nmt output without its "@@ " and Moses-detokenised in $TGT,
# sentencepiece output decoded and left as it is.
eval_bleu_args() {  # sets EVAL_BLEU_ARGS
    local settings="$DATA_BIN/prepare.json" bpe
    if [ ! -d "$DATA_BIN" ]; then
        echo "[recipe] error: EVAL_BLEU=1 needs the binaries' subword style, and DATA_BIN=$DATA_BIN does not exist:" \
            "run recipes/$DATASET/prepare.sh first (or set DATA_BIN to your own binaries)" >&2
        return 2
    fi
    bpe=$(subword_style)
    EVAL_BLEU_ARGS=(--eval-bleu
        --eval-bleu-args "{\"beam\": $BEAM, \"lenpen\": $LENPEN, \"max_len_a\": $MAX_LEN_A, \"max_len_b\": $MAX_LEN_B}"
        --best-checkpoint-metric bleu --maximize-best-checkpoint-metric)
    case $bpe in
        sentencepiece) EVAL_BLEU_ARGS+=(--eval-bleu-remove-bpe sentencepiece --eval-bleu-detok space) ;;
        subword-nmt) EVAL_BLEU_ARGS+=(--eval-bleu-remove-bpe "@@ " --eval-bleu-detok moses
                                      --eval-bleu-detok-args "{\"target_lang\": \"$TGT\"}") ;;
        *) echo "[recipe] error: EVAL_BLEU=1: bpe '$bpe' in $settings, expected subword-nmt or sentencepiece" >&2
           return 2 ;;
    esac
}

# The hint dataset prefix of a fairseq subset, as the translation_with_syntax task
# reads it (fairseq_plugins/data/syntax_hints.py, hint_dataset_prefix).
hint_prefix() {  # SUBSET
    echo "$DATA_BIN/$1.$SRC-$TGT.$TGT.hints"
}

# BET(SG) syntax hints of the target side ($TGT) of every split: train, valid and
# every test subset of $DATA_BIN/testsets.tsv (test = the first test set, test1,
# test2, ... the others), parsed from the BPE'd text the preparation binarised
# ($WORK_DIR/bpe/<split or test set name>.$TGT) with $SPACY_MODEL, written next to
# the binaries as $DATA_BIN/<subset>.$SRC-$TGT.$TGT.hints.{bin,idx,info.json}.
# Flags go to data_prep/syntax_hints.py (e.g. --n-process 4); finished datasets
# are not redone (the tool checks its input and model fingerprints).
syntax_hints_translation() {  # [data_prep/syntax_hints.py flags...]
    syntax_hints_help "$@"
    syntax_hints_setup "$TGT" testsets.tsv
    # fairseq subset <TAB> the text it was binarised from: train, valid, then the test sets
    local pairs
    pairs=$(printf 'train\ttrain\nvalid\tvalid\n'; cat "$DATA_BIN/testsets.tsv")
    pairs=$(awk -F '\t' -v dir="$WORK_DIR/bpe" -v lang="$TGT" 'NF { print $1 "\t" dir "/" $2 "." lang }' <<< "$pairs")
    write_syntax_hints "$pairs" "$@"
}

# Beam search on every test subset of $DATA_BIN/testsets.tsv (or $SUBSETS; binaries of your own, which
# have no testsets.tsv: test), then tokenized BLEU and sacreBLEU on detokenised output
# (recipes/lib/score_translation.py; sacreBLEU needs the untokenised references in $DATA_BIN/refs/).
generate_translation() {  # [PRESET] [fairseq-generate flags...]
    start_recipe "$@"
    local checkpoint out subset source_name remove_bpe testsets="$DATA_BIN/testsets.tsv"
    if [ -f "$testsets" ]; then
        : "${SUBSETS:=$(cut -f1 "$testsets" | tr '\n' ' ')}"
    else
        : "${SUBSETS:=test}"
    fi
    # every subset needs its binaries (valid, or a split of testsets.tsv): say which is missing before anything
    # runs (AVERAGE_LAST's averaging included)
    for subset in $SUBSETS; do
        if [ ! -f "$DATA_BIN/$subset.$SRC-$TGT.$SRC.idx" ] && [ ! -f "$DATA_BIN/$subset.$TGT-$SRC.$SRC.idx" ]; then
            echo "[recipe] error: SUBSETS=\"$SUBSETS\": $DATA_BIN has no binaries of '$subset' ($SRC-$TGT);" \
                "expected valid or a split of $testsets" >&2
            return 2
        fi
    done
    checkpoint=$(select_checkpoint)
    out=${OUT_DIR:-$SAVE_DIR/generate}
    mkdir -p "$out"
    if [ "$(subword_style)" = sentencepiece ]; then remove_bpe=sentencepiece; else remove_bpe='@@ '; fi
    for subset in $SUBSETS; do
        # the split's source (testsets.tsv's second column), for the log; other splits go by their own name
        source_name=$subset
        [ ! -f "$testsets" ] || source_name=$(awk -F '\t' -v s="$subset" '$1 == s { print $2 }' "$testsets")
        [ -n "$source_name" ] || source_name=$subset
        echo "[recipe] $DATASET $SRC-$TGT $subset ($source_name): $checkpoint, beam $BEAM, lenpen $LENPEN" >&2
        # shellcheck disable=SC2086
        fairseq_cli generate "$DATA_BIN" --user-dir "$USER_DIR" --task translation --source-lang "$SRC" --target-lang "$TGT" \
            --path "$checkpoint" --gen-subset "$subset" --beam "$BEAM" --lenpen "$LENPEN" --remove-bpe "$remove_bpe" \
            --max-len-a "$MAX_LEN_A" --max-len-b "$MAX_LEN_B" \
            --max-tokens "$GEN_MAX_TOKENS" --required-batch-size-multiple 1 "${EVAL_DEVICE_ARGS[@]}" \
            ${GEN_EXTRA_ARGS:-} "${USER_ARGS[@]}" > "$out/generate-$subset.txt" 2>&1 \
            || { tail -n 30 "$out/generate-$subset.txt" >&2; return 1; }
        # shellcheck disable=SC2086
        "$PYTHON" "$RECIPES_DIR/lib/score_translation.py" "$out/generate-$subset.txt" --data-bin "$DATA_BIN" \
            --subset "$subset" --lang "$TGT" --json "$out/score-$subset.json" ${SCORE_ARGS:-} | tee "$out/score-$subset.txt"
    done
}
