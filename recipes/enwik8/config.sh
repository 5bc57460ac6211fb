# enwik8, one token per byte (Transformer-XL split 90M/5M/5M), reported in bits
# per character. Transformer-XL's batch of 22 x 512 tokens per update, 512
# tokens per sample, lr 2.5e-4 (their values) with fairseq's inverse sqrt
# schedule and 4,000 warm-up updates, dropout 0.1, 400,000 updates (their
# 12-layer run); evaluation with a 384-byte context window.
# Any byte file works the same way: prepare.sh --input-file FILE with
# DATA_BIN=... (e.g. tiny Shakespeare, see docs/records/first_runs.md).
# No BET(SG): bytes are not words, there is nothing for a dependency parser
# to parse (SYNTAX_HINTS=1 is an error; BET(SF) presets work as any other).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
profile_defaults cpu MAX_TOKENS=4096 TOKENS_PER_UPDATE=4096 MAX_UPDATE=5000 WARMUP=500  # PROFILE=cpu (our choice): 5,000 updates of 4,096 bytes
DATASET=enwik8
NO_SYNTAX_HINTS_REASON="enwik8 is modelled one token per byte, so there are no words for a dependency parser and no \
BET(SG) syntax hints (data_prep/syntax_hints.py maps subwords to words, not bytes); train BET(SF) here \
(bet_sf_lm_enwik8, without SYNTAX_HINTS), or BET(SG) on word-level data (recipes/wikitext103, recipes/wikitext2)"
PREPARE_MODULE=data_prep.enwik8
DEFAULT_PRESET=mixed_transformer_lm
: "${MAX_TOKENS:=11264}" "${TOKENS_PER_UPDATE:=11264}" "${MAX_UPDATE:=400000}"
: "${LR:=2.5e-4}" "${WEIGHT_DECAY:=0.0}" "${CLIP_NORM:=0.25}" "${CONTEXT_WINDOW:=384}" "${GEN_MAX_TOKENS:=8192}"
# shellcheck source=../lib/language_model.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/language_model.sh"
