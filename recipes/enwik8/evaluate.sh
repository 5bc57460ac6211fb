#!/usr/bin/env bash
# enwik8: fairseq-eval-lm on the test set: bits per character.
# Usage: recipes/enwik8/evaluate.sh [PRESET] [fairseq-eval-lm flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
evaluate_lm "$@"
