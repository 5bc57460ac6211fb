# WikiText-2, word level: the WikiText-103 settings (fairseq's transformer_lm
# example) with less data per update and fewer updates, our choice for a
# corpus of 2M tokens: 8,192 tokens per update, 20,000 updates, dropout 0.3;
# evaluation with a 400-token context window, perplexity per word (token).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
profile_defaults cpu MAX_UPDATE=3000 WARMUP=300  # PROFILE=cpu (our choice): 3,000 updates of 8,192 tokens
DATASET=wikitext2
DATA_NAME=wikitext-2
PREPARE_MODULE=data_prep.wikitext2
DEFAULT_PRESET=mixed_transformer_lm
: "${TOKENS_PER_UPDATE:=8192}" "${MAX_UPDATE:=20000}" "${DROPOUT:=0.3}"
# shellcheck source=../lib/language_model.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/language_model.sh"
