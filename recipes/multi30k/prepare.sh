#!/usr/bin/env bash
# Multi30k (task 1): download the release (or use --raw-dir DIR) and prepare it into $DATA_BIN.
# Usage: recipes/multi30k/prepare.sh [--raw-dir DIR] [python -m data_prep.multi30k flags, see --help]
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
prepare_dataset "$@"
