#!/usr/bin/env bash
# WikiText-103: fairseq-eval-lm on the test set: perplexity per word.
# Usage: recipes/wikitext103/evaluate.sh [PRESET] [fairseq-eval-lm flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
evaluate_lm "$@"
