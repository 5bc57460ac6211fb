#!/usr/bin/env bash
# IWSLT14 German-English: beam search on the test sets, tokenized BLEU and sacreBLEU (with signature).
# Usage: recipes/iwslt14_de_en/generate.sh [PRESET] [fairseq-generate flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
generate_translation "$@"
