#!/usr/bin/env bash
# WMT14 English-German: download the release (or use --raw-dir DIR) and prepare it into $DATA_BIN.
# Usage: recipes/wmt14_en_de/prepare.sh [--raw-dir DIR] [python -m data_prep.wmt14_en_de flags, see --help]
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
prepare_dataset "$@"
