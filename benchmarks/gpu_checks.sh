#!/usr/bin/env bash
# The checks of docs/records/gpu.md on one CUDA device, in one go (a lent GPU is short-lived: every
# part has its own time limit and writes its log to OUT_DIR as it goes, so what finished
# survives a part that did not).
#
#   DATA_BIN=work_dirs/data-bin/multi30k.de-en bash benchmarks/gpu_checks.sh OUT_DIR
#
# 1. benchmarks/device_check.py: every kind in every placement, float32 on the device against
#    float64 on the CPU, step-by-step decoding against the full pass, bf16 and fp16 autocast
#    at T = 200 (longer than every chunk and window).
# 2. At the same time (the GPU has room; nothing here is timed): the Multi30k recipe trains
#    PRESET (default cosformer_iwslt_de_en: cosFormer in every layer, decoder included) twice,
#    once with the recipe's GPU default --fp16 and once with --amp (FP16=0), MAX_UPDATE
#    updates each, then beam-searches test2016 with each (generate.sh, fp16 on the GPU; its
#    output follows the training log).
#    Also at the same time: benchmarks/cosformer_gpu.py --parts parity (and chunked and fused again at head
#    dimension 128, cosformer_parity_d128.md), every cosFormer algorithm
#    (chunked, fused Triton kernels, recurrent, fused step kernel; fla-core's chunk_linear_attn where it
#    imports) on the device in float32 and bfloat16 against the naive reference in float64 on the CPU.
# 2b. Alone, so that the timings are not disturbed: benchmarks/cosformer_gpu.py --parts train,decode
#    (one process per kind, 7 in all, each at most COSFORMER_TIMEOUT / 7 s; the cells a process finished
#    are kept when it is cut short): cosFormer fused vs chunked vs PyTorch's flash SDPA vs fla-core's
#    chunk_linear_attn(normalize=True) (where it imports), forward+backward at T = COSFORMER_LENGTHS in
#    bf16 and fp32; decoding per token at prefixes 128, 1024, 4096 at batch 1 and beam 5 x batch 32.
# 3. Alone: benchmarks/attention_speed.py --device cuda
#    (every kind against fairseq's softmax attention, PyTorch's fused kernel) at LENGTHS.
# Time limits (defaults) keep the whole run under 10 minutes: phase 1 at most TRAIN_TIMEOUT +
# GENERATE_TIMEOUT, then COSFORMER_TIMEOUT, then SPEED_TIMEOUT.
# Also in phase 1, when LM_DATA_BIN names a byte-level corpus prepared by recipes/enwik8/prepare.sh (e.g. tiny
# Shakespeare): a cosFormer language model (LM_PRESET with cosFormer in every layer) trained LM_UPDATES
# updates with --amp at T = LM_TOKENS_PER_SAMPLE (2048) through recipes/enwik8/train.sh (train_lm_amp.log).
# Needs: a CUDA device, this checkout's Python requirements (fairseq-fixed ...), and the
# Multi30k binaries of recipes/multi30k/prepare.sh in DATA_BIN; for cosFormer's fused kernels Triton
# (CUDA wheels of torch bring it; without it every cosFormer row of the fused path says why), and
# fla-core for its column (optional: "not measured" without it).
set -uo pipefail
OUT_DIR=${1:?usage: DATA_BIN=DIR bash benchmarks/gpu_checks.sh OUT_DIR}
: "${DATA_BIN:?DATA_BIN: the prepared Multi30k binaries (recipes/multi30k/prepare.sh)}"
: "${PYTHON:=python3}" "${PRESET:=cosformer_iwslt_de_en}" "${MAX_UPDATE:=1000}" "${LENGTHS:=1024,4096,16384}"
: "${CHECK_TIMEOUT:=220}" "${TRAIN_TIMEOUT:=200}" "${GENERATE_TIMEOUT:=80}" "${SPEED_TIMEOUT:=90}"
: "${COSFORMER_TIMEOUT:=175}" "${COSFORMER_LENGTHS:=1024,2048,4096,16384}"
: "${LM_DATA_BIN:=}" "${LM_PRESET:=mixed_transformer_lm_tiny}" "${LM_UPDATES:=200}" "${LM_TOKENS_PER_SAMPLE:=2048}"
OUT_DIR=$(realpath -m "$OUT_DIR") DATA_BIN=$(realpath -m "$DATA_BIN")
export PYTHON DATA_BIN PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    nproc
} > "$OUT_DIR/environment.txt" 2>&1
# Stop at once when the environment cannot run the checks (a lent GPU's minutes are few).
"$PYTHON" -c "import sys, torch, fairseq, fairseq_plugins; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'fairseq', fairseq.__version__, torch.cuda.get_device_name())" >> "$OUT_DIR/environment.txt" 2>&1 \
    || { tail -n 20 "$OUT_DIR/environment.txt"; exit 3; }

train_and_generate() {  # NAME FP16 [EXTRA_ARGS]
    local name=$1 fp16=$2 extra=${3:-}
    local save="$PWD/checkpoints/gpu_checks/$name"
    FP16=$fp16 EXTRA_ARGS="$extra --no-epoch-checkpoints" SAVE_DIR="$save" MAX_UPDATE=$MAX_UPDATE WARMUP=400 \
        LOG_INTERVAL=100 NUM_GPUS=1 timeout "$TRAIN_TIMEOUT" bash recipes/multi30k/train.sh "$PRESET" \
        > "$OUT_DIR/train_$name.log" 2>&1 || { echo "train $name: exit $?" >> "$OUT_DIR/train_$name.log"; return 1; }
    SAVE_DIR="$save" SUBSETS=test NUM_GPUS=1 FP16=1 OUT_DIR="$save/generate" timeout "$GENERATE_TIMEOUT" \
        bash recipes/multi30k/generate.sh "$PRESET" >> "$OUT_DIR/train_$name.log" 2>&1 \
        || echo "generate $name: exit $?" >> "$OUT_DIR/train_$name.log"
}

# ---- supernet on CUDA (issue 33): a few updates, then export of two sub-networks and their parity ----
# Beside phase 1: the Multi30k supernet (recipes/multi30k/supernet.sh, fp16) trains SUPERNET_UPDATES
# updates on CUDA, then `search export` writes two sub-networks (the largest with the second kind of
# every placement, cosFormer, and the smallest) and benchmarks/supernet_export_parity.py compares each
# on CUDA inside the supernet and exported (supernet.log, supernet_parity.jsonl); SUPERNET_TIMEOUT
# bounds the whole step.
: "${SUPERNET_UPDATES:=30}" "${SUPERNET_TIMEOUT:=240}"
supernet_check() {
    local save="$PWD/checkpoints/gpu_checks/supernet" log="$OUT_DIR/supernet.log"
    local deadline=$(( $(date +%s) + SUPERNET_TIMEOUT ))
    left() { local s=$(( deadline - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }  # (timeout 0 would mean none)
    rm -rf "$save"
    MAX_UPDATE=$SUPERNET_UPDATES WARMUP=10 LOG_INTERVAL=10 NUM_GPUS=1 SAVE_DIR="$save" EXTRA_ARGS="--no-epoch-checkpoints" \
        timeout "$SUPERNET_TIMEOUT" bash recipes/multi30k/supernet.sh > "$log" 2>&1 \
        || { echo "supernet: exit $?" >> "$log"; return 1; }
    # (the space the supernet recorded: whatever SEARCH_SPACE the recipe was given)
    "$PYTHON" -c "import sys; from fairseq_plugins.search.subnetworks import load_supernet; s = load_supernet(sys.argv[1])[0].space
open(sys.argv[2], 'w').write(s.extreme(True, 1).to_json()); open(sys.argv[3], 'w').write(s.extreme(False).to_json())" \
        "$save/checkpoint_last.pt" "$save/largest_second_kind.json" "$save/smallest.json" >> "$log" 2>&1 \
        || { echo "architectures: exit $?" >> "$log"; return 1; }
    local name pairs=()
    for name in largest_second_kind smallest; do
        timeout "$(left)" "$PYTHON" -m fairseq_plugins.search export --checkpoint "$save/checkpoint_last.pt" \
            --architecture "$save/$name.json" --output "$save/$name.pt" >> "$log" 2>&1 || { echo "export $name: exit $?" >> "$log"; return 1; }
        pairs+=(--pair "$save/$name.json" "$save/$name.pt")
    done
    timeout "$(left)" "$PYTHON" benchmarks/supernet_export_parity.py --checkpoint "$save/checkpoint_last.pt" \
        --device cuda "${pairs[@]}" > "$OUT_DIR/supernet_parity.jsonl" 2>> "$log"
    echo "supernet parity: exit $?" >> "$log"
}
supernet_check &
supernet=$!
# ---- end of the supernet step ----

started=$(date +%s)
timeout "$CHECK_TIMEOUT" "$PYTHON" benchmarks/device_check.py --device cuda > "$OUT_DIR/device_check.md" 2>&1 &
check=$!
train_and_generate fp16 1 &
fp16=$!
train_and_generate amp 0 --amp &
amp=$!
timeout "$CHECK_TIMEOUT" "$PYTHON" benchmarks/cosformer_gpu.py --device cuda --parts parity --timeout "$CHECK_TIMEOUT" \
    --output "$OUT_DIR/cosformer_parity.md" > "$OUT_DIR/cosformer_parity.log" 2>&1 &
parity=$!
# the fused kernels at head dimension 128 (Multi30k's iwslt presets: d = 512, 4 heads), where an H200 once
# refused the backward's shared memory (docs/records/gpu.md, section 4)
timeout "$CHECK_TIMEOUT" "$PYTHON" benchmarks/cosformer_gpu.py --device cuda --parts parity --paths chunked,fused \
    --heads 2 --head-dim 128 --timeout "$CHECK_TIMEOUT" --output "$OUT_DIR/cosformer_parity_d128.md" \
    > "$OUT_DIR/cosformer_parity_d128.log" 2>&1 &
parity128=$!
lm_amp() {  # a cosFormer LM, --amp, long blocks (issue: "a short fairseq-train --amp of a cosFormer LM at T = 2048")
    local log="$OUT_DIR/train_lm_amp.log"
    if [ -z "$LM_DATA_BIN" ]; then
        echo "not run: LM_DATA_BIN (a byte-level corpus of recipes/enwik8/prepare.sh) was not given" > "$log"
        return 0
    fi
    DATA_BIN=$(realpath -m "$LM_DATA_BIN") FP16=0 EXTRA_ARGS="--amp --no-epoch-checkpoints" NUM_GPUS=1 \
        SAVE_DIR="$PWD/checkpoints/gpu_checks/lm_amp" MAX_UPDATE="$LM_UPDATES" WARMUP=50 LOG_INTERVAL=20 \
        TOKENS_PER_SAMPLE="$LM_TOKENS_PER_SAMPLE" MAX_TOKENS=$(( 8 * LM_TOKENS_PER_SAMPLE )) \
        TOKENS_PER_UPDATE=$(( 8 * LM_TOKENS_PER_SAMPLE )) CONTEXT_WINDOW=$(( LM_TOKENS_PER_SAMPLE / 2 )) \
        timeout "$TRAIN_TIMEOUT" bash recipes/enwik8/train.sh "$LM_PRESET" --decoder-attention-kinds cosformer > "$log" 2>&1
    echo "lm --amp: exit $?" >> "$log"
}
lm_amp &
lm=$!
wait "$check"; echo "device_check: exit $? after $(( $(date +%s) - started )) s" >> "$OUT_DIR/device_check.md"
wait "$parity"; echo "cosformer parity: exit $? after $(( $(date +%s) - started )) s" >> "$OUT_DIR/cosformer_parity.log"
wait "$parity128"; echo "cosformer parity (head dimension 128): exit $? after $(( $(date +%s) - started )) s" >> "$OUT_DIR/cosformer_parity_d128.log"
wait "$fp16" "$amp" "$lm"
wait "$supernet"; echo "supernet step: exit $?" >> "$OUT_DIR/supernet.log"  # (the supernet step above)
echo "phase 1 (check + training): $(( $(date +%s) - started )) s" >> "$OUT_DIR/environment.txt"

started=$(date +%s)
timeout "$COSFORMER_TIMEOUT" "$PYTHON" benchmarks/cosformer_gpu.py --device cuda --parts train,decode \
    --lengths "$COSFORMER_LENGTHS" --prefixes 128,1024,4096 --beams 1,5x32 --timeout $(( COSFORMER_TIMEOUT / 7 - 1 )) \
    --output "$OUT_DIR/cosformer_speed_cuda.md" > "$OUT_DIR/cosformer_speed.log" 2>&1
echo "cosformer speed: exit $? after $(( $(date +%s) - started )) s" >> "$OUT_DIR/cosformer_speed.log"

started=$(date +%s)
timeout "$SPEED_TIMEOUT" "$PYTHON" benchmarks/attention_speed.py --device cuda --lengths "$LENGTHS" --sweep '' \
    --decode-prefixes 128,1024,4096 --output "$OUT_DIR/attention_speed_cuda.md" > "$OUT_DIR/attention_speed.log" 2>&1
echo "attention_speed: exit $? after $(( $(date +%s) - started )) s" >> "$OUT_DIR/attention_speed.log"
