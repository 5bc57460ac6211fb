#!/usr/bin/env bash
# Multi30k (task 1): train the weight-sharing supernet (mixed_supertransformer) over
# search_spaces/multi30k_cpu.yaml, a space that trains on 2 CPU cores, with this data
# set's settings (config.sh) and the sandwich rule (SUPERNET_SAMPLING, SANDWICH_RANDOM).
# Usage: recipes/multi30k/supernet.sh [fairseq-train flags...]   (--help: all overrides)
# Then sample, evaluate, export and cost its sub-networks with python -m fairseq_plugins.search
# (docs/search.md, "The supernet"); generate.sh with CHECKPOINT=<exported .pt> beam-searches one.
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=multi30k_cpu
train_supernet "$@"
