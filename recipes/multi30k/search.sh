#!/usr/bin/env bash
# Multi30k (task 1): the architecture search of the mixed-attention paper, at CPU size, stage by stage
# (recipes/lib/search.sh: supernet, collect, rank, prune, evolve, train, generate; STAGES selects,
# every stage resumes). The supernet is supernet.sh's (search_spaces/multi30k_cpu.yaml, the sandwich
# rule); 300 inherited losses and 300 latencies (beam 5, 30 source tokens and 30 decoder steps, batch 1,
# LATENCY_THREADS=2 threads on this machine's CPU); no pruning (PRUNE_KEEP=0: the CPU space is small);
# evolution with Hardware-Aware Transformers' settings under the budgets: FLOPS_FRACTIONS=0.75 of the
# largest architecture's FLOPs by default, or LATENCY_BUDGETS measured on your machine (e.g. 0.5x and
# 0.75x the latency of a softmax preset by `python -m fairseq_plugins.search cost --latency` on the
# supernet: run STAGES=supernet first); the found architectures trained with train.sh's
# settings (TRAIN_PRESET=mixed_transformer_iwslt_de_en with --architecture-file) and scored by generate.sh.
# Usage: [LATENCY_BUDGETS=40,60] recipes/multi30k/search.sh [supernet fairseq-train flags...]   (--help)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=multi30k_cpu
source "$(dirname "${BASH_SOURCE[0]}")/../lib/search.sh"
run_search "$@"
