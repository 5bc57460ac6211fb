#!/usr/bin/env bash
# Multi30k (task 1): train a preset with this data set's settings (config.sh).
# Usage: recipes/multi30k/train.sh [PRESET] [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
train_translation "$@"
