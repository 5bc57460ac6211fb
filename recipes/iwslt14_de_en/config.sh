# IWSLT14 de-en. Training: fairseq's examples/translation settings for
# transformer_iwslt_de_en (Adam (0.9, 0.98), lr 5e-4, inverse sqrt with 4,000
# warm-up updates, dropout 0.3, weight decay 1e-4, label smoothing 0.1, 4,096
# tokens per update, decoder input/output embeddings shared); MAX_UPDATE 50,000
# is our choice (fairseq's example gives none). Evaluation: checkpoint_best.pt,
# beam 5; tokenized BLEU (the number IWSLT14 papers report) and sacreBLEU on
# lower-cased detokenised output.
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
profile_defaults cpu MAX_UPDATE=6000 WARMUP=1000  # PROFILE=cpu (our choice): 6,000 updates of 4,096 tokens
DATASET=iwslt14_de_en
DATA_NAME=iwslt14.tokenized.de-en
PREPARE_MODULE=data_prep.iwslt14
DEFAULT_PRESET=mixed_transformer_iwslt_de_en
SRC=de
TGT=en
: "${MAX_UPDATE:=50000}" "${DROPOUT:=0.3}" "${SHARE_EMBEDDINGS:=decoder}"
# shellcheck source=../lib/translation.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/translation.sh"
