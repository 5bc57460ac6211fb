#!/usr/bin/env bash
# enwik8: train a preset with this data set's settings (config.sh).
# Usage: recipes/enwik8/train.sh [PRESET] [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
train_lm "$@"
