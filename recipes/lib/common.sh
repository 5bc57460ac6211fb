# Shared by every recipe script (sourced, not run). See recipes/README.md.
#
# Overrides, as environment variables (flags after PRESET go to fairseq as they are
# and win over everything here):
#   DATA_BIN            binarised data            (default work_dirs/data-bin/<dataset>)
#   WORK_DIR            downloads, intermediate files (default work_dirs/data/<basename of DATA_BIN>)
#   SAVE_DIR            checkpoints               (default checkpoints/<dataset>/<preset>; Multi30k:
#                       checkpoints/multi30k.<SRC>-<TGT>/<preset>; language models with
#                       SYNTAX_HINTS=1: checkpoints/<dataset>/<preset>_sg; your own DATA_BIN:
#                       checkpoints/<basename of DATA_BIN>/<preset>)
#   PROFILE             gpu (default: the data set's settings) or cpu (the small CPU preset, NUM_GPUS=0,
#                       a checkpoint every 250 updates, the data set's CPU budget; lib/profile.sh)
#   OWN_DATA_EPOCHS     your own DATA_BIN without MAX_UPDATE: the budget is this many passes over its
#                       training tokens (default 20), at most the data set's MAX_UPDATE; WARMUP at
#                       most a tenth of it
#   NUM_GPUS            GPUs to train on          (default: all visible; 0 = CPU)
#   CPU_PROCS           CPU data-parallel ranks   (default 1; >1 uses fairseq-plugins-cpu-train: torchrun)
#   CPU_MALLOC          CPU runs: keep (default: freed memory stays in the process, glibc's
#                       MALLOC_MMAP_MAX_=0 and MALLOC_TRIM_THRESHOLD_ unless set) or glibc (its defaults)
#   FP16                1 = --fp16 on GPU         (default 1 on GPU)
#   MAX_TOKENS          tokens per batch per GPU/process
#   TOKENS_PER_UPDATE   target tokens per update; UPDATE_FREQ defaults to
#                       ceil(TOKENS_PER_UPDATE / (MAX_TOKENS x GPUs or processes)), at least 1;
#                       when MAX_TOKENS x workers x UPDATE_FREQ differs from it (rounding, many
#                       GPUs) a warning gives the effective number
#   UPDATE_FREQ         gradient accumulation steps (overrides the above)
#   MAX_UPDATE LR WARMUP WEIGHT_DECAY DROPOUT LABEL_SMOOTHING CLIP_NORM SEED
#   LR_SCHEDULER        inverse_sqrt (default: warm-up to LR, then 1/sqrt(update)) or cosine (warm-up
#                       to LR, then a cosine to MIN_LR at MAX_UPDATE, default 1e-7: HAT's supernets)
#   BATCH_MULTIPLE      training's --required-batch-size-multiple (default 1: fairseq's
#                       default 8 drops the last partial batch, also of the valid set)
#   SAVE_INTERVAL_UPDATES  save a checkpoint every N updates (0 = per epoch only)
#   KEEP_INTERVAL_UPDATES  update checkpoints to keep (default AVERAGE_LAST, at least 1)
#   LOG_INTERVAL        --log-interval in updates (default 100)
#   DATA_WORKERS        --num-workers of training (default 1; 0 = load in the main process)
#   AVERAGE_LAST        generate/evaluate with the average of the last N update
#                       checkpoints (0 = checkpoint_best.pt)
#   CHECKPOINT          evaluate this checkpoint instead
#   EXTRA_ARGS          more fairseq-train flags (word-split)
#   GEN_EXTRA_ARGS      more fairseq-generate / fairseq-eval-lm flags (word-split)
#   BEAM LENPEN GEN_MAX_TOKENS SUBSETS   generation (translation)
#   MAX_LEN_A MAX_LEN_B output length cap of generate.sh and EVAL_BLEU's validation alike: at most
#                       MAX_LEN_A x source length + MAX_LEN_B tokens (default 1.2 and 10)
#   OUT_DIR             generate/evaluate outputs (default $SAVE_DIR/generate, $SAVE_DIR/evaluate)
#   SCORE_ARGS          more recipes/lib/score_translation.py flags (WMT14 en-de: --compound-split)
#   SHARE_EMBEDDINGS    translation: all (--share-all-embeddings) or decoder
#                       (--share-decoder-input-output-embed)
#   TOKENS_PER_SAMPLE CONTEXT_WINDOW     language models
#   SYNTAX_HINTS        1 = BET(SG): --task translation_with_syntax (word-level language models:
#                       language_modeling_with_syntax) --syntax-hints required --criterion
#                       label_smoothed_cross_entropy_with_pointer (language models: --label-smoothing 0);
#                       the hints come from SPACY_MODEL=PARSER recipes/<dataset>/syntax_hints.sh
#                       (HINTS_BPE: default prepare.json's bpe, none for word-level text); not for enwik8
#   POINTER_LOSS_WEIGHT the pointer loss's lambda_p with SYNTAX_HINTS=1 (default 1.0)
#   TENSORBOARD_DIR     TensorBoard logs (tensorboardX): each run writes to
#                       $TENSORBOARD_DIR/<SAVE_DIR made relative, without its leading checkpoints/>,
#                       e.g. TENSORBOARD_DIR=tensorboard: tensorboard/<dataset>/<preset>
#   EVAL_BLEU           1 = translation: BLEU on the valid set at every validation (fairseq's
#                       --eval-bleu, beam BEAM, detokenised as generate.sh scores it) and
#                       checkpoint_best.pt chosen by it instead of the valid loss
#   SEARCH_SPACE        supernet.sh: the search space file (default: the data set's, search_spaces/)
#   SUPERNET_SAMPLING   supernet.sh: random (one sampled sub-network per update) or sandwich (the
#                       largest and the smallest once per attention kind, and SANDWICH_RANDOM
#                       sampled ones, default 2)
#   SEARCH_DIR STAGES   search.sh: its folder (default checkpoints/<dataset>/search) and stages (default
#                       supernet,collect,rank,prune,evolve,train,generate); recipes/lib/search.sh says more
#   LOSS_SAMPLES LATENCY_SAMPLES SEARCH_SEED   search.sh collect: architectures (300 each), seed
#   LATENCY_BEAM LATENCY_SOURCE_LENGTH LATENCY_TARGET_LENGTH LATENCY_THREADS LATENCY_DEVICE
#   LATENCY_WARMUP LATENCY_REPEATS LATENCY_ROUNDS LATENCY_PROCESSES LATENCY_IN_TURN LATENCY_REFERENCE
#   LATENCY_MAX_SPREAD  search.sh latency measurement (LATENCY_PROCESSES pinned processes per architecture,
#                       default 3, each interleaving it with the reference; the medians over them;
#                       LATENCY_IN_TURN architectures measured together, their processes in turn, default 10)
#   PRUNE_KEEP          search.sh: fields the pruned space leaves free (0: no pruning)
#   LATENCY_BUDGETS RELATIVE_LATENCY_BUDGETS FLOPS_BUDGETS FLOPS_FRACTIONS FITNESS EVOLVE_ARGS   search.sh
#                       evolve: budgets (ms, fractions of the reference's latency, GFLOPs, fractions of the
#                       largest architecture's FLOPs, default 0.75 when none is given; comma-separated),
#                       ranker or supernet fitness, more `search evolve` flags (last: they win)
#   LATENCY_CONFIRM     search.sh evolve: the fittest final candidates measured under a latency budget (5)
#   TRAIN_PRESET        search.sh: the preset the found architectures are trained with
#   SEARCH_TINY TINY_MAX_UPDATE   search.sh: 1 = every stage at its smallest size (TINY_MAX_UPDATE updates
#                       per training, default 20; a trial of the pipeline in minutes, in .../search_tiny)
#   PYTHON              interpreter with fairseq (default: python on PATH)
#   DRY_RUN             1 = print the fairseq-train command instead of running it
set -euo pipefail
shopt -s inherit_errexit

RECIPES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(dirname "$RECIPES_DIR")
USER_DIR="$REPO_ROOT/fairseq_plugins"
PYTHON=${PYTHON:-python}
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# Run one of fairseq's CLIs (train, generate, eval_lm, preprocess) with $PYTHON.
fairseq_cli() {
    local tool=$1
    shift
    "$PYTHON" -c "import sys; from fairseq_cli.$tool import cli_main; sys.exit(cli_main())" "$@"
}

recipe_help() {  # the calling script's header, the data set's settings, then the overrides above
    # (shellcheck directives are comments for the linter, not help)
    sed -n '2,/^[^#]/{/^# shellcheck /d;/^#/s/^# \{0,1\}//p}' "$0"
    echo
    sed -n '1,/^[^#]/{/^# shellcheck /d;/^#/s/^# \{0,1\}//p}' "$(dirname "$0")/config.sh"
    echo
    sed -n '3,/^set /{/^# shellcheck /d;/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

wants_help() {
    for arg in "$@"; do
        if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
            return 0
        fi
    done
    return 1
}

# CPU runs: glibc gives every freed block above its mmap threshold (activations, logits: tens of MB) back
# to the kernel and page-faults it in again, zeroed, at the next step: a Multi30k supernet update spent a
# third of its CPU time in the kernel that way. CPU_MALLOC=keep keeps freed memory in the process (no
# mmap for large blocks, no trimming of the heap), so the process stays at its peak memory; glibc = its
# defaults. Values of the two variables already in the environment win.
cpu_malloc_setup() {
    case "${CPU_MALLOC:-keep}" in
        keep)
            export MALLOC_MMAP_MAX_="${MALLOC_MMAP_MAX_-0}"
            export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_-68719476736}"
            ;;
        glibc) ;;
        *)
            echo "error: CPU_MALLOC must be keep or glibc, got '$CPU_MALLOC'" >&2
            exit 2
            ;;
    esac
}

# Sets DEVICE_ARGS (training), EVAL_DEVICE_ARGS (generate/eval-lm), LAUNCH
# (command prefix) and WORKERS (data-parallel ranks); CPU runs: cpu_malloc_setup.
device_setup() {
    : "${NUM_GPUS:=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)}"
    : "${CPU_PROCS:=1}"
    LAUNCH=(fairseq_cli train)
    [ "$NUM_GPUS" -gt 0 ] || cpu_malloc_setup
    if [ "$NUM_GPUS" -gt 0 ]; then
        DEVICE_ARGS=(--distributed-world-size "$NUM_GPUS")
        EVAL_DEVICE_ARGS=()
        if [ "${FP16:-1}" = 1 ]; then
            DEVICE_ARGS+=(--fp16)
            EVAL_DEVICE_ARGS+=(--fp16)
        fi
        WORKERS=$NUM_GPUS
    elif [ "$CPU_PROCS" -gt 1 ]; then
        LAUNCH=("$PYTHON" -m fairseq_plugins.cli.cpu_distributed_train --nprocs "$CPU_PROCS" --)
        DEVICE_ARGS=()
        EVAL_DEVICE_ARGS=(--cpu)
        WORKERS=$CPU_PROCS
    else
        DEVICE_ARGS=(--cpu)
        EVAL_DEVICE_ARGS=(--cpu)
        WORKERS=1
    fi
    local per_step=$((MAX_TOKENS * WORKERS))
    UPDATE_FREQ_SOURCE="set by UPDATE_FREQ"
    if [ -z "${UPDATE_FREQ:-}" ]; then
        UPDATE_FREQ=$(((TOKENS_PER_UPDATE + per_step - 1) / per_step))
        UPDATE_FREQ_SOURCE="ceil(TOKENS_PER_UPDATE / (MAX_TOKENS x workers)), at least 1"
    fi
    # The batch the optimiser sees (at most: batches are filled up to MAX_TOKENS).
    EFFECTIVE_TOKENS=$((per_step * UPDATE_FREQ))
}

# Training: a warning when rounding (or UPDATE_FREQ, or more workers than the
# target needs) makes the tokens per update differ from TOKENS_PER_UPDATE.
warn_tokens_per_update() {
    if [ "$EFFECTIVE_TOKENS" -ne "$TOKENS_PER_UPDATE" ]; then
        local unit=NUM_GPUS
        [ "$NUM_GPUS" -gt 0 ] || unit=CPU_PROCS
        echo "[recipe] warning: tokens per update = MAX_TOKENS=$MAX_TOKENS x $unit=$WORKERS x UPDATE_FREQ=$UPDATE_FREQ" \
            "($UPDATE_FREQ_SOURCE) = $EFFECTIVE_TOKENS, not TOKENS_PER_UPDATE=$TOKENS_PER_UPDATE (the recipe's setting," \
            "for which its learning rate and warm-up were chosen); choose MAX_TOKENS so that MAX_TOKENS x $unit divides" \
            "TOKENS_PER_UPDATE to keep it, or accept the different batch" >&2
    fi
}

# A numeric setting that bash arithmetic or fairseq would misread (MAX_TOKENS=4k, UPDATE_FREQ=0, 08):
# one error line naming the variable, exit 2, before anything runs.
require_whole_number() {  # NAME LEAST: $NAME, when set, is a whole number >= LEAST
    local name=$1 least=$2
    local value=${!name-}
    [ -n "$value" ] || return 0
    if ! [[ $value =~ ^(0|[1-9][0-9]*)$ ]] || [ "$value" -lt "$least" ]; then
        echo "error: $name=$value: expected a whole number of at least $least" >&2
        exit 2
    fi
}

check_numeric_settings() {
    local name
    for name in MAX_TOKENS TOKENS_PER_UPDATE MAX_UPDATE UPDATE_FREQ CPU_PROCS TOKENS_PER_SAMPLE GEN_MAX_TOKENS BEAM \
        LOG_INTERVAL KEEP_INTERVAL_UPDATES SANDWICH_RANDOM LOSS_SAMPLES LATENCY_SAMPLES LATENCY_CONFIRM; do
        require_whole_number "$name" 1
    done
    for name in NUM_GPUS SAVE_INTERVAL_UPDATES AVERAGE_LAST CONTEXT_WINDOW DATA_WORKERS WARMUP PRUNE_KEEP; do
        require_whole_number "$name" 0
    done
    if [ -n "${CONTEXT_WINDOW:-}" ] && [ -n "${TOKENS_PER_SAMPLE:-}" ] && [ "$CONTEXT_WINDOW" -ge "$TOKENS_PER_SAMPLE" ]; then
        echo "error: CONTEXT_WINDOW=$CONTEXT_WINDOW: expected less than TOKENS_PER_SAMPLE=$TOKENS_PER_SAMPLE (fairseq-eval-lm" \
            "scores TOKENS_PER_SAMPLE - CONTEXT_WINDOW tokens per block)" >&2
        exit 2
    fi
}

# Every train/generate/evaluate script starts here: --help (prints and exits),
# else PRESET and USER_ARGS from the arguments, the numeric settings checked, and the devices.
start_recipe() {
    if wants_help "$@"; then
        recipe_help
        exit 0
    fi
    parse_preset "$@"
    check_numeric_settings
    device_setup
}

# True (0) when $SAVE_DIR/checkpoint_last.pt has reached MAX_UPDATE already: fairseq-train would do one
# more update and overwrite it. Not when the flags set their own --max-update or --restore-file (theirs
# win), nor when the checkpoint cannot be read (fairseq-train then says why).
training_finished() {
    local last="$SAVE_DIR/checkpoint_last.pt" done_updates
    [ -f "$last" ] || return 1
    case " ${USER_ARGS[*]} ${EXTRA_ARGS:-} " in
        *" --max-update"* | *" --restore-file"* | *" --finetune-from-model"*) return 1 ;;
    esac
    done_updates=$("$PYTHON" -c 'import sys, torch, fairseq_plugins.checkpoint_compat
state = torch.load(sys.argv[1], map_location="cpu", mmap=True)
print((state.get("optimizer_history") or [{}])[-1].get("num_updates", 0))' "$last" 2>/dev/null) || return 1
    if [[ $done_updates =~ ^[0-9]+$ ]] && [ "$done_updates" -ge "$MAX_UPDATE" ]; then
        echo "[recipe] $last is at update $done_updates, MAX_UPDATE=$MAX_UPDATE: this training is finished, nothing to do" \
            "(raise MAX_UPDATE to train on, or give another SAVE_DIR)" >&2
        return 0
    fi
    return 1
}

# The checkpoint to evaluate: $CHECKPOINT, else the average of the last
# $AVERAGE_LAST update checkpoints (written once), else checkpoint_best.pt
# (checkpoint_last.pt when there is no best).
select_checkpoint() {
    if [ -n "${CHECKPOINT:-}" ]; then
        echo "$CHECKPOINT"
    elif [ "${AVERAGE_LAST:-0}" -gt 0 ]; then
        local averaged="$SAVE_DIR/checkpoint_avg_last${AVERAGE_LAST}.pt"
        "$PYTHON" "$RECIPES_DIR/lib/average_checkpoints.py" --dir "$SAVE_DIR" --last "$AVERAGE_LAST" --output "$averaged" >&2 || return 1
        echo "$averaged"
    elif [ -f "$SAVE_DIR/checkpoint_best.pt" ]; then
        echo "$SAVE_DIR/checkpoint_best.pt"
    else
        echo "$SAVE_DIR/checkpoint_last.pt"
    fi
}

# prepare.sh: the dataset's data_prep module with --dest $DATA_BIN --work-dir $WORK_DIR and the given flags.
prepare_dataset() {
    if wants_help "$@"; then
        "$PYTHON" -m "$PREPARE_MODULE" --help
        return 0
    fi
    "$PYTHON" -m "$PREPARE_MODULE" --dest "$DATA_BIN" --work-dir "$WORK_DIR" "$@"
}

# supernet.sh's checks (translation.sh's train_supernet, language_model.sh's train_lm_supernet), after
# start_recipe: the preset is the supernet ARCH (flags only), SEARCH_SPACE exists (default the data
# set's, search_spaces/$SUPERNET_SPACE.yaml), and no SYNTAX_HINTS or EVAL_BLEU.
check_supernet_recipe() {  # ARCH
    if [ "$PRESET" != "$1" ]; then
        echo "[recipe] error: supernet.sh trains $1 over SEARCH_SPACE; '$PRESET' is not a flag" \
            "(give fairseq-train flags only, a space with SEARCH_SPACE=FILE)" >&2
        return 2
    fi
    : "${SEARCH_SPACE:=$REPO_ROOT/search_spaces/$SUPERNET_SPACE.yaml}"
    if [ ! -f "$SEARCH_SPACE" ]; then
        echo "[recipe] error: SEARCH_SPACE=$SEARCH_SPACE: no such file (a search space YAML, see search_spaces/)" >&2
        return 2
    fi
    local option
    for option in SYNTAX_HINTS EVAL_BLEU; do
        if [ "${!option:-0}" != 0 ]; then
            echo "[recipe] error: $option=${!option}: not supported by supernet.sh (a supernet has no single model to" \
                "beam-search or to point with; evaluate sub-networks with python -m fairseq_plugins.search evaluate)" >&2
            return 2
        fi
    done
}

# Training flags shared by translation and language models.
common_train_args() {
    case ${LR_SCHEDULER:-inverse_sqrt} in
        inverse_sqrt) SCHEDULER_ARGS=(--lr-scheduler inverse_sqrt) ;;
        cosine) SCHEDULER_ARGS=(--lr-scheduler cosine --min-lr "${MIN_LR:-1e-07}") ;;
        *) echo "[recipe] error: LR_SCHEDULER=$LR_SCHEDULER: expected inverse_sqrt or cosine" >&2
           return 2 ;;
    esac
    echo "[recipe] $WORKERS $( [ "$NUM_GPUS" -gt 0 ] && echo GPU || echo CPU) worker(s), --max-tokens $MAX_TOKENS --update-freq $UPDATE_FREQ" \
        "(up to $EFFECTIVE_TOKENS tokens per update; TOKENS_PER_UPDATE=$TOKENS_PER_UPDATE)" >&2
    warn_tokens_per_update
    if [ "$WARMUP" -ge "$MAX_UPDATE" ]; then  # e.g. MAX_UPDATE set small, the recipe's warm-up kept
        echo "[recipe] warning: WARMUP=$WARMUP is not below MAX_UPDATE=$MAX_UPDATE: the learning rate never" \
            "reaches LR=$LR (set WARMUP, e.g. WARMUP=$((MAX_UPDATE / 10)))" >&2
    fi
    TRAIN_ARGS=(
        "$DATA_BIN" --user-dir "$USER_DIR" --arch "$PRESET" --save-dir "$SAVE_DIR" --seed "${SEED:-1}"
        --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm "$CLIP_NORM" --weight-decay "$WEIGHT_DECAY"
        --lr "$LR" "${SCHEDULER_ARGS[@]}" --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
        --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
        --required-batch-size-multiple "${BATCH_MULTIPLE:-1}"
        --log-format simple --log-interval "${LOG_INTERVAL:-100}" --num-workers "${DATA_WORKERS:-1}"
    )
    if [ -n "${DROPOUT:-}" ]; then
        TRAIN_ARGS+=(--dropout "$DROPOUT")
    fi
    if [ "${SAVE_INTERVAL_UPDATES:-0}" -gt 0 ]; then
        local keep=$((${AVERAGE_LAST:-0} > 0 ? ${AVERAGE_LAST:-0} : 1))
        TRAIN_ARGS+=(--save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "${KEEP_INTERVAL_UPDATES:-$keep}")
    fi
    if [ -n "${TENSORBOARD_DIR:-}" ]; then
        TRAIN_ARGS+=(--tensorboard-logdir "$TENSORBOARD_DIR/$(tensorboard_run_name)")
    fi
}

# One TensorBoard run per checkpoint folder, so that `tensorboard --logdir $TENSORBOARD_DIR`
# shows every run apart: SAVE_DIR relative to the repository (or the current directory),
# without its leading checkpoints/ (default SAVE_DIR: <dataset>/<preset>).
tensorboard_run_name() {
    local run=$SAVE_DIR
    run=${run#"$REPO_ROOT"/}
    run=${run#"$PWD"/}
    run=${run#./}
    run=${run#/}
    echo "${run#checkpoints/}"
}

run_training() {  # common_train_args + task flags ($@), logged to $SAVE_DIR/train.log; DRY_RUN=1 prints it
    # shellcheck disable=SC2086,SC2206  # EXTRA_ARGS is word-split on purpose
    local command=("${LAUNCH[@]}" "${TRAIN_ARGS[@]}" "$@" "${DEVICE_ARGS[@]}" ${EXTRA_ARGS:-} "${USER_ARGS[@]}")
    if [ "${DRY_RUN:-0}" = 1 ]; then
        if [ "${command[0]}" = fairseq_cli ]; then
            command=(fairseq-train "${command[@]:2}")
        fi
        printf '%q ' "${command[@]}"
        echo
        return 0
    fi
    if training_finished; then
        return 0
    fi
    mkdir -p "$SAVE_DIR"
    "${command[@]}" 2>&1 | tee -a "$SAVE_DIR/train.log"
}

parse_preset() {  # PRESET from $1 (or DEFAULT_PRESET), the rest into USER_ARGS
    PRESET=$DEFAULT_PRESET
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        PRESET=$1
        shift
    fi
    USER_ARGS=("$@")
    : "${SAVE_DIR:=$REPO_ROOT/checkpoints/$(save_name)/$PRESET${SAVE_SUFFIX:-}}"  # (save_name: lib/profile.sh)
}

: "${DATA_BIN:=$REPO_ROOT/work_dirs/data-bin/${DATA_NAME:-$DATASET}}"
: "${WORK_DIR:=$REPO_ROOT/work_dirs/data/$(basename "$DATA_BIN")}"
