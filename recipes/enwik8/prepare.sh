#!/usr/bin/env bash
# enwik8: download the release (or use --raw-dir DIR) and prepare it into $DATA_BIN.
# Usage: recipes/enwik8/prepare.sh [--raw-dir DIR] [python -m data_prep.enwik8 flags, see --help]
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
prepare_dataset "$@"
