#!/usr/bin/env bash
# WikiText-2: fairseq-eval-lm on the test set: perplexity per word.
# Usage: recipes/wikitext2/evaluate.sh [PRESET] [fairseq-eval-lm flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
evaluate_lm "$@"
