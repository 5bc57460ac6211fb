#!/usr/bin/env bash
# IWSLT14 German-English: train a preset with this data set's settings (config.sh).
# Usage: recipes/iwslt14_de_en/train.sh [PRESET] [fairseq-train flags...]   (--help: all overrides)
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
train_translation "$@"
