#!/usr/bin/env bash
# Multi30k (task 1): beam search on the test sets, tokenized BLEU and sacreBLEU (with signature).
# Usage: recipes/multi30k/generate.sh [PRESET] [fairseq-generate flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
generate_translation "$@"
