#!/usr/bin/env bash
# Trainings on a lent GPU, many at once, within one call of the device tool (10 minutes), stopped cleanly
# at TIME_LIMIT seconds (SIGTERM: the trainings under way stop, every finished row's JSON is kept; the
# next call trains what is left). Every row float32 on the GPU (FP16=0), JOBS at once. BENCH picks the driver:
#
#   quality (default): benchmarks/quality.py --device cuda --jobs JOBS (bench-quality's rows)
#     WORK_DIR=work_dirs/bench_quality bash benchmarks/gpu_rows.sh OUT_DIR --suites multi30k_converged
#   search: benchmarks/search_multi30k.py --device cuda --jobs JOBS --quality-work-dir WORK_DIR (the search's
#     from-scratch rows, which train in bench-quality's folder; its stage results, committed, say which)
#     BENCH=search WORK_DIR=work_dirs/bench_quality bash benchmarks/gpu_rows.sh OUT_DIR --stages train
#   convergence: benchmarks/convergence.py --device cuda --jobs JOBS (a convergence ladder's rungs side by side;
#     their results in CONVERGENCE_RESULTS, default docs/records/data/convergence)
#     BENCH=convergence WORK_DIR=work_dirs/convergence bash benchmarks/gpu_rows.sh OUT_DIR --suite multi30k \
#         --rung 1000 --rung 2000 --rung 4000 --rung 8000
#
# WORK_DIR must hold the prepared data (data-bin/, data/, and for BET(SG) the parser and hints), made here
# by a CPU run of the same suites (`--report-only` prepares without training), and is carried to the device.
# The rows' results (WORK_DIR/results, bench-quality's records RECORDS (default docs/records/data/quality:
# copy the archive's records/. there and commit), for the search its --results folder, SEARCH_RESULTS, for a
# ladder CONVERGENCE_RESULTS) are
# packed into one archive, OUT_DIR/rows.tar.gz, also when the limit is reached (a lent GPU machine returns
# only a few files), beside the driver's log and report. The rows at the
# convergence budget need docs/records/data/convergence (committed).
set -uo pipefail
OUT_DIR=${1:?usage: WORK_DIR=DIR bash benchmarks/gpu_rows.sh OUT_DIR [flags of the BENCH driver...]}
shift
: "${WORK_DIR:?WORK_DIR: the bench-quality work folder with the prepared data (carried to the device)}"
: "${PYTHON:=python3}" "${JOBS:=12}" "${TIME_LIMIT:=540}" "${BENCH:=quality}"
: "${SEARCH_RESULTS:=docs/records/data/search_multi30k_converged}" "${RECORDS:=docs/records/data/quality}"
: "${CONVERGENCE_RESULTS:=docs/records/data/convergence}"
case $JOBS in ''|*[!0-9]*|0) echo "error: JOBS=$JOBS: expected a positive number of rows at once" >&2; exit 2 ;; esac
case $TIME_LIMIT in ''|*[!0-9]*|0) echo "error: TIME_LIMIT=$TIME_LIMIT: expected a positive number of seconds" >&2; exit 2 ;; esac
case $BENCH in quality|search|convergence) ;; *) echo "error: BENCH=$BENCH: expected quality, search or convergence" >&2; exit 2 ;; esac
[ -d "$WORK_DIR/data-bin" ] || { echo "error: WORK_DIR=$WORK_DIR has no data-bin/: prepare the suites on the CPU first" >&2; exit 2; }
OUT_DIR=$(realpath -m "$OUT_DIR") WORK_DIR=$(realpath -m "$WORK_DIR")
mkdir -p "$OUT_DIR"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export PYTHONUNBUFFERED=1
if [ "$BENCH" = quality ]; then
    command=(benchmarks/quality.py --work-dir "$WORK_DIR" --records "$RECORDS" --output "$OUT_DIR/results.md")
elif [ "$BENCH" = convergence ]; then
    command=(benchmarks/convergence.py --work-dir "$WORK_DIR" --results "$CONVERGENCE_RESULTS" --output "$OUT_DIR/convergence.md")
else
    # (the search's own work folder is WORK_DIR too: the train stage needs only the prepared data)
    command=(benchmarks/search_multi30k.py --work-dir "$WORK_DIR" --quality-work-dir "$WORK_DIR"
             --results "$SEARCH_RESULTS" --output "$OUT_DIR/search.md")
fi
started=$(date +%s)
timeout --signal=TERM --kill-after=30 "$TIME_LIMIT" "$PYTHON" "${command[@]}" --device cuda --jobs "$JOBS" \
    --allow-dirty "$@" > "$OUT_DIR/$BENCH.log" 2>&1
status=$?
echo "${command[0]}: exit $status after $(( $(date +%s) - started )) s (124: TIME_LIMIT reached)" >> "$OUT_DIR/$BENCH.log"
# one archive (a lent machine returns few files): results/ (the work folder's), records/ (bench-quality's),
# search_results/ (the search's) or convergence_results/ (the ladder's); unpack with tar xzf OUT_DIR/rows.tar.gz, then copy records/. into RECORDS
staging=$(mktemp -d)
[ -d "$WORK_DIR/results" ] && cp -r "$WORK_DIR/results" "$staging/results"
[ "$BENCH" = quality ] && [ -d "$RECORDS" ] && cp -r "$RECORDS" "$staging/records"
[ "$BENCH" = search ] && [ -d "$SEARCH_RESULTS" ] && cp -r "$SEARCH_RESULTS" "$staging/search_results"
[ "$BENCH" = convergence ] && [ -d "$CONVERGENCE_RESULTS" ] && cp -r "$CONVERGENCE_RESULTS" "$staging/convergence_results"
tar czf "$OUT_DIR/rows.tar.gz" -C "$staging" . && rm -rf "$staging"
tail -n 5 "$OUT_DIR/$BENCH.log"
