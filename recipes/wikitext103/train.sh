#!/usr/bin/env bash
# WikiText-103: train a preset with this data set's settings (config.sh).
# Usage: recipes/wikitext103/train.sh [PRESET] [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
train_lm "$@"
