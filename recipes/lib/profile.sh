# PROFILE: the defaults a recipe starts from (sourced by every dataset's config.sh before its own
# defaults; a variable set in the environment always wins).
#   gpu (default)  the data set's published settings (config.sh), sized for GPUs
#   cpu            a run that fits a CPU in minutes to an hour: the small CPU preset
#                  (mixed_transformer_cpu_small, mixed_transformer_lm_cpu_small), NUM_GPUS=0, a
#                  checkpoint every SAVE_INTERVAL_UPDATES=250 updates (a killed run resumes from the
#                  last one: fairseq-train continues from checkpoint_last.pt), a log line every 25
#                  updates, and the data set's CPU budget (its config.sh: fewer updates and warm-up)
# Your own data (DATA_BIN an existing folder other than the data set's default): checkpoints go to
# checkpoints/<basename of DATA_BIN>/<preset>, and unless MAX_UPDATE is set the budget is
# OWN_DATA_EPOCHS (default 20) passes over its training tokens, at most the data set's MAX_UPDATE,
# with WARMUP at most a tenth of it (own_data_budget).
: "${PROFILE:=gpu}"
case $PROFILE in
    gpu | cpu) ;;
    *)
        echo "error: PROFILE=$PROFILE: expected gpu (the data set's settings) or cpu (a small preset and budget for a CPU)" >&2
        exit 2
        ;;
esac
# what the environment set, before any default: the own-data budget leaves these alone
PROFILE_USER_MAX_UPDATE=${MAX_UPDATE:-}
PROFILE_USER_WARMUP=${WARMUP:-}

profile_defaults() {  # PROFILE NAME=VALUE...: the profile's defaults, for variables not set yet
    local profile=$1 assignment name
    shift
    [ "$PROFILE" = "$profile" ] || return 0
    for assignment in "$@"; do
        name=${assignment%%=*}
        [ -n "${!name:-}" ] || printf -v "$name" '%s' "${assignment#*=}"
    done
}

profile_defaults cpu NUM_GPUS=0 SAVE_INTERVAL_UPDATES=250 LOG_INTERVAL=25

# The preset a recipe trains when none is named: the CPU preset of the model's type (translation or
# language model) under PROFILE=cpu.
profile_preset() {  # CPU_PRESET
    if [ "$PROFILE" = cpu ]; then
        DEFAULT_PRESET=$1
    fi
}

# DATA_BIN is the user's own prepared data: an existing folder other than the data set's default.
own_data() {
    [ "$DATA_BIN" != "$REPO_ROOT/work_dirs/data-bin/${DATA_NAME:-$DATASET}" ] && [ -d "$DATA_BIN" ]
}

# The folder under checkpoints/ a run saves into: the data set's (SAVE_NAME or DATASET), or for your
# own data the name of its folder, so that it never mixes with (or resumes from) the data set's runs.
save_name() {
    if own_data; then
        basename "$DATA_BIN"
    else
        echo "${SAVE_NAME:-$DATASET}"
    fi
}

# Your own data: MAX_UPDATE (unless set) = OWN_DATA_EPOCHS passes over the training tokens of the
# binarised split (the .idx file of TRAIN_PREFIX), at most the data set's budget; WARMUP (unless set)
# at most a tenth of it. The data set's budget is for its own size (enwik8: 400,000 updates of 11,264
# bytes, 50 passes over 90M bytes), far too many for a small file.
own_data_budget() {  # TRAIN_PREFIX (e.g. $DATA_BIN/train, $DATA_BIN/train.de-en.en)
    own_data && [ -z "$PROFILE_USER_MAX_UPDATE" ] && [ -f "$1.idx" ] || return 0
    local tokens updates
    tokens=$("$PYTHON" "$RECIPES_DIR/lib/indexed_tokens.py" "$1.idx") || return 2
    updates=$(((${OWN_DATA_EPOCHS:-20} * tokens + TOKENS_PER_UPDATE - 1) / TOKENS_PER_UPDATE))
    [ "$updates" -ge 1 ] || updates=1
    [ "$updates" -le "$MAX_UPDATE" ] || updates=$MAX_UPDATE
    MAX_UPDATE=$updates
    if [ -z "$PROFILE_USER_WARMUP" ] && [ "$WARMUP" -gt $((MAX_UPDATE / 10)) ]; then
        WARMUP=$((MAX_UPDATE / 10 > 0 ? MAX_UPDATE / 10 : 1))
    fi
    echo "[recipe] your data ($DATA_BIN): $tokens training tokens; MAX_UPDATE=$MAX_UPDATE" \
        "(OWN_DATA_EPOCHS=${OWN_DATA_EPOCHS:-20} passes of TOKENS_PER_UPDATE=$TOKENS_PER_UPDATE, at most the recipe's)," \
        "WARMUP=$WARMUP; checkpoints in $SAVE_DIR (set MAX_UPDATE, WARMUP or SAVE_DIR to choose)" >&2
}
