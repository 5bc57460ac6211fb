#!/usr/bin/env bash
# The Python packages a lent GPU machine needs besides its own torch, for a device with no network:
#
#   bash benchmarks/gpu_env.sh download work_dirs/gpu_wheels      # here: cp312 wheels into the folder
#   source benchmarks/gpu_env.sh install work_dirs/gpu_wheels     # on the device (the folder carried):
#                                                                 # pip install --no-deps --target, PYTHONPATH
#
# What travels: fairseq-fixed and the pure-Python or binary packages its training, generation and our
# scoring import (the device's torch, numpy and triton are its own), and fla-core for the cosFormer
# speed comparison (optional there). The versions are requirements.txt's where it pins them.
set -uo pipefail
GPU_PYTHON_VERSION=${GPU_PYTHON_VERSION:-3.12}
GPU_PLATFORM=${GPU_PLATFORM:-manylinux_2_28_x86_64}
GPU_PACKAGES=(fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 sacremoses==0.2.0
              sacrebleu==2.6.0 regex==2026.11.15 PyYAML==6.0.4 tqdm==4.70.1 portalocker tabulate colorama lxml
              click==8.5.1 joblib fla-core einops)

gpu_env_usage() {
    echo "usage: bash benchmarks/gpu_env.sh download DIR | source benchmarks/gpu_env.sh install DIR" >&2
}

gpu_env_download() {  # DIR
    local dir=$1
    mkdir -p "$dir" || return 2
    # --no-deps: the list above is the closure we need; anything else (torch, numpy, triton) is the device's
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$GPU_PYTHON_VERSION" \
        --platform "$GPU_PLATFORM" --platform manylinux2014_x86_64 --platform any -d "$dir" "${GPU_PACKAGES[@]}" || return 1
    # antlr4-python3-runtime 4.9.3 (omegaconf's) has no wheel on the registry: build one (pure Python)
    python3 -m pip wheel --quiet --no-deps -w "$dir" antlr4-python3-runtime==4.9.3 || return 1
    ls "$dir"
}

gpu_env_install() {  # DIR
    local dir
    dir=$(realpath -m "$1")
    [ -n "$(ls "$dir"/*.whl 2>/dev/null)" ] || { echo "error: $dir has no wheels: run 'bash benchmarks/gpu_env.sh download $1' where there is a network" >&2; return 2; }
    python3 -m pip install --quiet --no-deps --target "$dir/site" "$dir"/*.whl || return 1
    export PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$dir/site/bin:$PATH"
}

if [ $# -ne 2 ] || { [ "$1" != download ] && [ "$1" != install ]; }; then
    gpu_env_usage
    # sourced: return; run: exit
    return 2 2>/dev/null || exit 2
fi
"gpu_env_$1" "$2"
