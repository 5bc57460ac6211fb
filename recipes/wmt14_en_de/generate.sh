#!/usr/bin/env bash
# WMT14 English-German: beam search on the test sets, tokenized BLEU and sacreBLEU (with signature).
# Usage: recipes/wmt14_en_de/generate.sh [PRESET] [fairseq-generate flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
generate_translation "$@"
