#!/usr/bin/env bash
# WMT14 English-German: train a preset with this data set's settings (config.sh).
# Usage: recipes/wmt14_en_de/train.sh [PRESET] [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
train_translation "$@"
