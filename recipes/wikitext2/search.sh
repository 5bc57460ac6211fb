#!/usr/bin/env bash
# WikiText-2: the architecture search of a language model, at CPU size, stage by stage
# (recipes/lib/search.sh: supernet, collect, rank, prune, evolve, train, generate; STAGES selects,
# every stage resumes). The supernet is supernet.sh's (search_spaces/wikitext2_cpu.yaml, the sandwich
# rule); 300 inherited losses and 300 latencies: a language model's latency is sampling
# LATENCY_TARGET_LENGTH tokens (default 30) one at a time, on one pinned core, beside the space's
# largest architecture as the reference; each record also holds the tokens per second of scoring and
# of sampling at that context. Budgets: LATENCY_BUDGETS (milliseconds), RELATIVE_LATENCY_BUDGETS
# (fractions of the reference's latency) or FLOPS_BUDGETS. The found architectures are trained with
# train.sh's settings (TRAIN_PRESET=mixed_transformer_lm_tiny with --architecture-file) and scored by
# evaluate.sh (perplexity on the test set).
# Usage: RELATIVE_LATENCY_BUDGETS=0.5,0.75 recipes/wikitext2/search.sh [supernet fairseq-train flags...]   (--help)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=wikitext2_cpu
DEFAULT_PRESET=mixed_transformer_lm_tiny
SEARCH_EVALUATE=evaluate.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/search.sh"
run_search "$@"
