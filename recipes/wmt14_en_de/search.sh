#!/usr/bin/env bash
# WMT14 en-de: the architecture search of the mixed-attention paper with its space (Table 1,
# search_spaces/wmt14_en_de.yaml) and the settings of the search it extends (Hardware-Aware
# Transformers), stage by stage (recipes/lib/search.sh: supernet, collect, rank, prune, evolve, train,
# generate; STAGES selects, every stage resumes): supernet.sh's SuperTransformer (40,000 updates, GPU
# scale); inherited losses and latencies of 300 sampled architectures each (latency on LATENCY_DEVICE,
# default cuda:0 as the paper measures, beam 5, 30 + 30 tokens); the space pruned to its PRUNE_KEEP=8
# most important fields (the paper prunes by the ranker's feature importance); evolution with population
# 125, 25 parents, 50 mutations (p = 0.3), 50 crossovers, 30 iterations under LATENCY_BUDGETS (required,
# milliseconds on your device); the found architectures trained from scratch with train.sh's settings
# (TRAIN_PRESET=mformer_wmt_en_de, whose non-structure options are transformer_vaswani_wmt_en_de_big's; the
# file gives every layer) and scored by generate.sh.
# Usage: LATENCY_BUDGETS=100,150 recipes/wmt14_en_de/search.sh [supernet fairseq-train flags...]   (--help)
: "${LATENCY_DEVICE:=cuda:0}" "${PRUNE_KEEP:=8}"
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=wmt14_en_de
source "$(dirname "${BASH_SOURCE[0]}")/../lib/search.sh"
run_search "$@"
