# WikiText-103, word level, with fairseq's examples/language_model settings
# for transformer_lm: Adam (0.9, 0.98), lr 5e-4, inverse sqrt with 4,000
# warm-up updates, weight decay 0.01, dropout 0.1, 512 tokens per sample,
# 2,048 tokens per batch x 16 = 32,768 tokens per update, 50,000 updates;
# evaluation with a 400-token context window, perplexity per word (token).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
profile_defaults cpu TOKENS_PER_UPDATE=8192 MAX_UPDATE=5000 WARMUP=500  # PROFILE=cpu (our choice): 5,000 updates of 8,192 tokens
DATASET=wikitext103
DATA_NAME=wikitext-103
PREPARE_MODULE=data_prep.wikitext103
DEFAULT_PRESET=mixed_transformer_lm
# shellcheck source=../lib/language_model.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/language_model.sh"
