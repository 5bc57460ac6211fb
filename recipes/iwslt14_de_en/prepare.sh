#!/usr/bin/env bash
# IWSLT14 German-English: download the release (or use --raw-dir DIR) and prepare it into $DATA_BIN.
# Usage: recipes/iwslt14_de_en/prepare.sh [--raw-dir DIR] [python -m data_prep.iwslt14 flags, see --help]
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
prepare_dataset "$@"
