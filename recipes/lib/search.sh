# search.sh: the architecture search of the mixed-attention paper, stage by stage (sourced by
# recipes/<dataset>/search.sh after the data set's config.sh and translation.sh). Every stage reads
# the outputs of the ones before from SEARCH_DIR and is resumable: the supernet and the from-scratch
# trainings resume from their checkpoint_last.pt, collect continues its file, a finished evolution with
# the same inputs is not run again (one with other inputs is an error: remove its folder); rank and
# prune are rerun (seconds, deterministic).
#
#   supernet  supernet.sh (the data set's space and settings) into SEARCH_DIR/supernet
#   collect   inherited valid losses of LOSS_SAMPLES sampled architectures (loss.jsonl) and measured
#             latencies of LATENCY_SAMPLES (latency.jsonl; LATENCY_BEAM, LATENCY_SOURCE_LENGTH,
#             LATENCY_TARGET_LENGTH, LATENCY_DEVICE; the protocol of fairseq_plugins/search/latency.py:
#             LATENCY_PROCESSES processes (default 3), LATENCY_IN_TURN architectures (default 10) measured
#             together with their processes taken in turn, each process pinned to one core with
#             LATENCY_THREADS threads, each architecture interleaved with the reference LATENCY_REFERENCE (an
#             architecture JSON; default the space's largest) in LATENCY_ROUNDS block pairs (shared among
#             the processes) of LATENCY_REPEATS runs after LATENCY_WARMUP; milliseconds and relative latency,
#             the medians over the processes; measured again when the spread of its rounds' ratios exceeds
#             LATENCY_MAX_SPREAD), sampled with
#             SEARCH_SEED
#   rank      the pairwise rankers and pointwise baselines (ranker_loss/, ranker_latency/,
#             ranker_relative_latency/)
#   prune     with PRUNE_KEEP > 0: the space with the PRUNE_KEEP most important fields free (pruned.yaml),
#             which evolve then searches
#   evolve    one evolution per budget: LATENCY_BUDGETS (milliseconds, comma-separated, predicted by
#             the latency regressor and confirmed by measurement), RELATIVE_LATENCY_BUDGETS (fractions of
#             the reference's latency: what holds on a shared machine), FLOPS_BUDGETS (GFLOPs) and
#             FLOPS_FRACTIONS (fractions of the searched space's largest architecture's FLOPs; default 0.75
#             when no budget is given: needs no measurement beforehand), fitness FITNESS (ranker or
#             supernet); LATENCY_CONFIRM: the fittest final candidates measured under a latency budget
#             (default 5); EVOLVE_ARGS: more `search evolve` flags (word-split, last: they win; HAT's
#             settings by default, no early stop); an interrupted evolution resumes ->
#             evolve_latency_<X>ms/, evolve_relative_<X>x/, evolve_flops_<X>g/ and evolve_flops_<X>x/
#             (best.json, result.json, train_command.sh, whose --max-update is the data set's training
#             budget MAX_UPDATE, not the supernet's)
#   train     every found architecture trained from scratch: train.sh TRAIN_PRESET --architecture-file
#             best.json (the data set's training settings) into train_<budget>/
#   generate  generate.sh on each of those (evaluate.sh for a language model)
#
#   SEARCH_DIR  default checkpoints/<dataset>/search; STAGES  comma-separated subset of the above (default
#   all, in this order); the flags after search.sh go to the supernet's fairseq-train. Each search stage
#   prints its result as a table; the JSON it printed is kept in SEARCH_DIR/stages/<stage>.json.
#   SEARCH_TINY=1  every stage at the smallest size that still runs it (to try the pipeline in minutes, not
#   to find an architecture): TINY_MAX_UPDATE (default 20) updates of the supernet and of each training, 12
#   sampled architectures per collection, 3 timed latency runs, an evolution of 6 over 2 iterations, and its
#   own default SEARCH_DIR (checkpoints/<dataset>/search_tiny); variables set in the environment win.
SEARCH_STAGES=(supernet collect rank prune evolve train generate)

search_step() {  # run a command, or with DRY_RUN=1 print it
    if [ "${DRY_RUN:-0}" = 1 ]; then
        printf '%q ' "$@"
        echo
    else
        "$@"
    fi
}

# A search subcommand: its JSON result line kept in SEARCH_DIR/stages/NAME.json, a table of it printed
# (recipes/lib/search_summary.py); with DRY_RUN=1 the command printed instead.
search_json() {  # NAME command...
    local name=$1
    shift
    if [ "${DRY_RUN:-0}" = 1 ]; then
        search_step "$@"
        return
    fi
    mkdir -p "$SEARCH_DIR/stages"
    "$@" > "$SEARCH_DIR/stages/$name.json" || return
    "$PYTHON" "$RECIPES_DIR/lib/search_summary.py" "$name" "$SEARCH_DIR/stages/$name.json"
}

search_wants() {  # is stage $1 in STAGES?
    [[ ",$STAGES," == *",$1,"* ]]
}

search_budget_dirs() {  # the evolution folders of the budgets, one per line
    local budget latency=${LATENCY_BUDGETS:-} relative=${RELATIVE_LATENCY_BUDGETS:-} flops=${FLOPS_BUDGETS:-}
    local fractions=${FLOPS_FRACTIONS:-}
    for budget in ${latency//,/ }; do echo "$SEARCH_DIR/evolve_latency_${budget}ms"; done
    for budget in ${relative//,/ }; do echo "$SEARCH_DIR/evolve_relative_${budget}x"; done
    for budget in ${flops//,/ }; do echo "$SEARCH_DIR/evolve_flops_${budget}g"; done
    for budget in ${fractions//,/ }; do echo "$SEARCH_DIR/evolve_flops_${budget}x"; done
}

run_search() {  # [supernet fairseq-train flags...]
    if wants_help "$@"; then
        recipe_help
        sed -n '3,/^SEARCH_STAGES/{/^#/s/^# \{0,1\}//p}' "$RECIPES_DIR/lib/search.sh"
        exit 0
    fi
    local train_updates=$MAX_UPDATE tiny_env=()
    case ${SEARCH_TINY:-0} in
        0) ;;
        1)
            : "${TINY_MAX_UPDATE:=20}" "${SEARCH_DIR:=$REPO_ROOT/checkpoints/${SAVE_NAME:-$DATASET}/search_tiny}"
            : "${LOSS_SAMPLES:=12}" "${LATENCY_SAMPLES:=12}" "${LATENCY_WARMUP:=1}" "${LATENCY_REPEATS:=3}" "${LATENCY_ROUNDS:=2}"
            : "${LATENCY_PROCESSES:=1}"
            : "${LATENCY_MAX_SPREAD:=10}"
            local tiny_warmup=5  # unless WARMUP was set (it holds the data set's default by now: lib/profile.sh)
            [ -z "$PROFILE_USER_WARMUP" ] || tiny_warmup=$PROFILE_USER_WARMUP
            : "${EVOLVE_ARGS:=--population 6 --parents 2 --mutations 2 --crossovers 2 --iterations 2}"
            : "${LATENCY_CONFIRM:=1}"
            train_updates=$TINY_MAX_UPDATE
            # the supernet and the trainings are separate scripts: their budget goes with them
            tiny_env=(MAX_UPDATE="$TINY_MAX_UPDATE" WARMUP="$tiny_warmup" SAVE_INTERVAL_UPDATES=0)
            echo "[recipe] search: SEARCH_TINY=1: $TINY_MAX_UPDATE updates per training, $LOSS_SAMPLES + $LATENCY_SAMPLES" \
                "sampled architectures, a small evolution, in $SEARCH_DIR (a trial of the stages, not a search)" >&2
            ;;
        *)
            echo "[recipe] error: SEARCH_TINY=$SEARCH_TINY: expected 1 (every stage at its smallest size) or 0" >&2
            return 2
            ;;
    esac
    : "${SEARCH_DIR:=$REPO_ROOT/checkpoints/${SAVE_NAME:-$DATASET}/search}"
    : "${STAGES:=$(IFS=,; echo "${SEARCH_STAGES[*]}")}"
    : "${SEARCH_SPACE:=$REPO_ROOT/search_spaces/$SUPERNET_SPACE.yaml}"
    : "${TRAIN_PRESET:=$DEFAULT_PRESET}" "${FITNESS:=ranker}" "${SEARCH_SEED:=1}"
    : "${LOSS_SAMPLES:=300}" "${LATENCY_SAMPLES:=300}" "${LATENCY_BEAM:=5}" "${LATENCY_SOURCE_LENGTH:=30}"
    : "${LATENCY_TARGET_LENGTH:=30}" "${LATENCY_THREADS:=1}" "${LATENCY_DEVICE:=cpu}" "${PRUNE_KEEP:=0}"
    : "${LATENCY_WARMUP:=3}" "${LATENCY_REPEATS:=5}" "${LATENCY_ROUNDS:=6}" "${LATENCY_PROCESSES:=3}" "${LATENCY_MAX_SPREAD:=0.1}"
    : "${LATENCY_IN_TURN:=10}" "${LATENCY_CONFIRM:=5}"
    : "${SEARCH_EVALUATE:=generate.sh}"
    if ! [[ "$PRUNE_KEEP" =~ ^[0-9]+$ ]]; then
        echo "[recipe] error: PRUNE_KEEP=$PRUNE_KEEP: expected a number of fields (0: no pruning)" >&2
        return 2
    fi
    local stage known
    for stage in ${STAGES//,/ }; do
        known=0
        for known_stage in "${SEARCH_STAGES[@]}"; do [ "$stage" = "$known_stage" ] && known=1; done
        if [ "$known" = 0 ]; then
            echo "[recipe] error: STAGES=$STAGES: unknown stage '$stage' (stages: $(IFS=,; echo "${SEARCH_STAGES[*]}"))" >&2
            return 2
        fi
    done
    if [ -z "${LATENCY_BUDGETS:-}${RELATIVE_LATENCY_BUDGETS:-}${FLOPS_BUDGETS:-}${FLOPS_FRACTIONS:-}" ]; then
        # a budget that needs no measurement before the supernet exists: a share of the space's largest FLOPs
        FLOPS_FRACTIONS=0.75
        echo "[recipe] search: no budget given: FLOPS_FRACTIONS=$FLOPS_FRACTIONS (of the largest architecture's FLOPs;" \
            "LATENCY_BUDGETS=<ms,...>, RELATIVE_LATENCY_BUDGETS=<fractions of the reference's latency,...> or" \
            "FLOPS_BUDGETS=<GFLOPs,...> choose others)" >&2
    fi
    local here search checkpoint space latency_options length_options
    # the lengths costs and latencies are counted at; the latency measurement's settings (collect, and the
    # confirmation of a latency budget in evolve: the CLI refuses them where nothing is measured)
    length_options=(--source-length "$LATENCY_SOURCE_LENGTH" --target-length "$LATENCY_TARGET_LENGTH")
    latency_options=(--beam "$LATENCY_BEAM" --threads "$LATENCY_THREADS" --device "$LATENCY_DEVICE"
                     --warmup "$LATENCY_WARMUP" --repeats "$LATENCY_REPEATS" --rounds "$LATENCY_ROUNDS"
                     --processes "$LATENCY_PROCESSES" --in-turn "$LATENCY_IN_TURN")
    if [ -n "${LATENCY_REFERENCE:-}" ]; then
        latency_options+=(--reference "$LATENCY_REFERENCE")
    fi
    here=$(cd "$(dirname "$0")" && pwd)
    search=("$PYTHON" -m fairseq_plugins.search)
    checkpoint="$SEARCH_DIR/supernet/checkpoint_last.pt"
    [ "${DRY_RUN:-0}" = 1 ] || mkdir -p "$SEARCH_DIR"
    if search_wants supernet; then
        echo "[recipe] search: supernet -> $SEARCH_DIR/supernet" >&2
        search_step env "${tiny_env[@]}" SAVE_DIR="$SEARCH_DIR/supernet" SEARCH_SPACE="$SEARCH_SPACE" \
            bash "$here/supernet.sh" "$@" || return
    fi
    if [ "${DRY_RUN:-0}" != 1 ] && ! search_wants supernet && { search_wants collect || search_wants evolve; } \
        && [ ! -f "$checkpoint" ]; then
        echo "[recipe] error: $checkpoint: no supernet (run the supernet stage: STAGES=supernet,...)" >&2
        return 2
    fi
    if search_wants collect; then
        echo "[recipe] search: collect -> $SEARCH_DIR/loss.jsonl, $SEARCH_DIR/latency.jsonl" >&2
        search_json collect_loss "${search[@]}" collect --what loss --checkpoint "$checkpoint" --space "$SEARCH_SPACE" \
            -n "$LOSS_SAMPLES" --seed "$SEARCH_SEED" --output "$SEARCH_DIR/loss.jsonl" || return
        search_json collect_latency "${search[@]}" collect --what latency --checkpoint "$checkpoint" --space "$SEARCH_SPACE" \
            -n "$LATENCY_SAMPLES" --seed "$SEARCH_SEED" --output "$SEARCH_DIR/latency.jsonl" "${length_options[@]}" "${latency_options[@]}" \
            --max-spread "$LATENCY_MAX_SPREAD" || return
    fi
    if search_wants rank; then
        local target
        for target in loss latency relative_latency; do
            search_json "rank_$target" "${search[@]}" rank --data "$SEARCH_DIR/${target#relative_}.jsonl" --target "$target" \
                --output "$SEARCH_DIR/ranker_$target" --seed "$SEARCH_SEED" || return
        done
    fi
    space=$SEARCH_SPACE
    if [ "$PRUNE_KEEP" -gt 0 ]; then
        if search_wants prune; then
            search_json prune "${search[@]}" prune --space "$SEARCH_SPACE" --importance "$SEARCH_DIR/ranker_loss/importance.json" \
                --keep "$PRUNE_KEEP" --output "$SEARCH_DIR/pruned.yaml" || return
        fi
        space="$SEARCH_DIR/pruned.yaml"
    fi
    if search_wants evolve; then
        local budget output common measured latency=${LATENCY_BUDGETS:-} relative=${RELATIVE_LATENCY_BUDGETS:-}
        local flops=${FLOPS_BUDGETS:-} fractions=${FLOPS_FRACTIONS:-} ranker=()
        # (an option a search does not read is refused by it: the ranker only for its fitness, the measurement's
        # settings only for a latency budget, whose fittest candidates are measured)
        [ "$FITNESS" != ranker ] || ranker=(--ranker "$SEARCH_DIR/ranker_loss/ranker.txt")
        common=(--space "$space" --fitness "$FITNESS" "${ranker[@]}" --checkpoint "$checkpoint" "${length_options[@]}"
                --seed "$SEARCH_SEED" --train-max-update "$train_updates")
        measured=("${latency_options[@]}" --confirm "$LATENCY_CONFIRM")
        # (a search finished with the same inputs prints its result again without searching; EVOLVE_ARGS last: they win)
        # shellcheck disable=SC2086
        for budget in ${latency//,/ }; do
            search_json "evolve_latency_${budget}ms" "${search[@]}" evolve "${common[@]}" "${measured[@]}" --latency-ms "$budget" \
                --latency-predictor "$SEARCH_DIR/ranker_latency/regressor.txt" \
                --output "$SEARCH_DIR/evolve_latency_${budget}ms" ${EVOLVE_ARGS:-} || return
        done
        # shellcheck disable=SC2086
        for budget in ${relative//,/ }; do
            search_json "evolve_relative_${budget}x" "${search[@]}" evolve "${common[@]}" "${measured[@]}" \
                --relative-latency "$budget" --latency-predictor "$SEARCH_DIR/ranker_relative_latency/regressor.txt" \
                --output "$SEARCH_DIR/evolve_relative_${budget}x" ${EVOLVE_ARGS:-} || return
        done
        # shellcheck disable=SC2086
        for budget in ${flops//,/ }; do
            search_json "evolve_flops_${budget}g" "${search[@]}" evolve "${common[@]}" --flops "$budget" \
                --output "$SEARCH_DIR/evolve_flops_${budget}g" ${EVOLVE_ARGS:-} || return
        done
        # shellcheck disable=SC2086
        for budget in ${fractions//,/ }; do
            search_json "evolve_flops_${budget}x" "${search[@]}" evolve "${common[@]}" --flops-fraction "$budget" \
                --output "$SEARCH_DIR/evolve_flops_${budget}x" ${EVOLVE_ARGS:-} || return
        done
    fi
    local found name
    while read -r found; do
        [ -n "$found" ] || continue
        name=train_$(basename "$found" | sed 's/^evolve_//')
        if search_wants train; then
            if [ "${DRY_RUN:-0}" != 1 ] && [ ! -f "$found/result.json" ]; then
                echo "[recipe] error: $found/result.json: no finished search (run the evolve stage)" >&2
                return 2
            fi
            search_step env "${tiny_env[@]}" SAVE_DIR="$SEARCH_DIR/$name" bash "$here/train.sh" "$TRAIN_PRESET" \
                --architecture-file "$found/best.json" </dev/null || return
        fi
        if search_wants generate; then
            search_step env SAVE_DIR="$SEARCH_DIR/$name" bash "$here/$SEARCH_EVALUATE" "$TRAIN_PRESET" </dev/null || return
        fi
    done < <(search_budget_dirs)
}
