#!/usr/bin/env bash
# WMT14 en-de: train the weight-sharing supernet (mixed_supertransformer) over the mixed-attention
# paper's search space (search_spaces/wmt14_en_de.yaml, its Table 1). The paper gives no supernet
# training settings of its own; these are those of the SuperTransformer of Hardware-Aware Transformers,
# whose search it extends (mit-han-lab/hardware-aware-transformers,
# configs/wmt14.en-de/supertransformer/space0.yml): 40,000 updates of 4,096 tokens x 16 x 8 GPUs
# (TOKENS_PER_UPDATE=524288), lr warmed up from 1e-7 to 1e-3 over 10,000 updates then a cosine down
# to 1e-7 (LR_SCHEDULER=cosine), dropout 0.3, attention dropout 0.1, no weight decay, label
# smoothing 0.1, all embeddings shared, one sampled sub-network per update (SUPERNET_SAMPLING=random).
# Usage: recipes/wmt14_en_de/supernet.sh [fairseq-train flags...]   (--help: all overrides)
# Then sample, evaluate, export and cost its sub-networks with python -m fairseq_plugins.search
# (docs/search.md, "The supernet"); generate.sh with CHECKPOINT=<exported .pt> beam-searches one.
: "${MAX_UPDATE:=40000}" "${TOKENS_PER_UPDATE:=524288}" "${LR:=1e-3}" "${WARMUP:=10000}" "${LR_SCHEDULER:=cosine}"
: "${DROPOUT:=0.3}" "${WEIGHT_DECAY:=0.0}" "${SUPERNET_SAMPLING:=random}"
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
SUPERNET_SPACE=wmt14_en_de
SUPERNET_ARGS=(--attention-dropout 0.1)
train_supernet "$@"
