# Multi30k task 1, de-en by default (SRC=en TGT=de for en-de; one prepared
# folder serves both). No single standard exists for this data set; our
# settings are the IWSLT14 ones scaled to its size: Adam (0.9, 0.98), lr 5e-4,
# 2,000 warm-up updates, dropout 0.3, weight decay 1e-4, label smoothing 0.1,
# 4,096 tokens per update, 15,000 updates, decoder embeddings shared.
# Evaluation: checkpoint_best.pt, beam 5, on test_2016_flickr and every other
# test set the preparation found (test1..test3, see testsets.tsv).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
profile_defaults cpu MAX_UPDATE=4000 WARMUP=500  # PROFILE=cpu (our choice): 4,000 updates of 4,096 tokens
DATASET=multi30k
DATA_NAME=multi30k.de-en
PREPARE_MODULE=data_prep.multi30k
DEFAULT_PRESET=mixed_transformer_iwslt_de_en
: "${SRC:=de}" "${TGT:=en}"
SAVE_NAME=multi30k.$SRC-$TGT
: "${MAX_UPDATE:=15000}" "${WARMUP:=2000}" "${DROPOUT:=0.3}" "${SHARE_EMBEDDINGS:=decoder}"
# shellcheck source=../lib/translation.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/translation.sh"
