#!/usr/bin/env bash
# bench-quality's rows on a lent GPU, many at once, within one call of the device tool (10 minutes):
# benchmarks/quality.py --device cuda --jobs JOBS (every row float32 on the GPU, FP16=0), stopped cleanly
# at TIME_LIMIT seconds (SIGTERM: the trainings under way stop, every finished row's JSON is kept; the
# next call trains what is left). The rows' results are copied to OUT_DIR as they are, so that they come
# back even when the limit is reached.
#
#   WORK_DIR=work_dirs/bench_quality bash benchmarks/gpu_rows.sh OUT_DIR --suites multi30k_converged
#
# WORK_DIR must hold the prepared data (data-bin/, data/, and for BET(SG) the parser and hints), made here
# by a CPU run of the same suites (`--report-only` prepares without training), and is carried to the device.
# The suites at the convergence budget need docs/records/data/convergence (committed).
set -uo pipefail
OUT_DIR=${1:?usage: WORK_DIR=DIR bash benchmarks/gpu_rows.sh OUT_DIR [benchmarks/quality.py flags...]}
shift
: "${WORK_DIR:?WORK_DIR: the bench-quality work folder with the prepared data (carried to the device)}"
: "${PYTHON:=python3}" "${JOBS:=12}" "${TIME_LIMIT:=540}"
case $JOBS in ''|*[!0-9]*|0) echo "error: JOBS=$JOBS: expected a positive number of rows at once" >&2; exit 2 ;; esac
case $TIME_LIMIT in ''|*[!0-9]*|0) echo "error: TIME_LIMIT=$TIME_LIMIT: expected a positive number of seconds" >&2; exit 2 ;; esac
[ -d "$WORK_DIR/data-bin" ] || { echo "error: WORK_DIR=$WORK_DIR has no data-bin/: prepare the suites on the CPU first" >&2; exit 2; }
OUT_DIR=$(realpath -m "$OUT_DIR") WORK_DIR=$(realpath -m "$WORK_DIR")
mkdir -p "$OUT_DIR"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export PYTHONUNBUFFERED=1
started=$(date +%s)
timeout --signal=TERM --kill-after=30 "$TIME_LIMIT" "$PYTHON" benchmarks/quality.py --device cuda --jobs "$JOBS" \
    --work-dir "$WORK_DIR" --output "$OUT_DIR/results.md" --allow-dirty "$@" > "$OUT_DIR/quality.log" 2>&1
status=$?
echo "benchmarks/quality.py: exit $status after $(( $(date +%s) - started )) s (124: TIME_LIMIT reached)" >> "$OUT_DIR/quality.log"
cp -r "$WORK_DIR/results" "$OUT_DIR/" 2>/dev/null
tail -n 5 "$OUT_DIR/quality.log"
