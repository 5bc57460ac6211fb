#!/usr/bin/env bash
# trains the best architecture from scratch with the supernet's training options
# (recorded paths: "$CHECKOUT" stands for the checkout the search ran in)
fairseq-train "$CHECKOUT"/work_dirs/supernet_ranking/data-bin/multi30k --user-dir fairseq_plugins --task translation --arch mixed_transformer --architecture-file "$CHECKOUT"/benchmarks/results/search_multi30k/evolve_softmax_x0.6/best.json --source-lang de --target-lang en --share-decoder-input-output-embed --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.0001 --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 400 --max-tokens 4096 --max-update 2000 --update-freq 1 --seed 1 "$@"
