#!/usr/bin/env bash
# WikiText-2: train the weight-sharing language-model supernet (mixed_supertransformer_lm) over
# search_spaces/wikitext2_cpu.yaml, a space that trains on 2 CPU cores, with this data set's settings
# (config.sh) and the sandwich rule (SUPERNET_SAMPLING, SANDWICH_RANDOM).
# Usage: recipes/wikitext2/supernet.sh [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=wikitext2_cpu
train_lm_supernet "$@"
