#!/usr/bin/env bash
# WikiText-103: download the release (or use --raw-dir DIR) and prepare it into $DATA_BIN.
# Usage: recipes/wikitext103/prepare.sh [--raw-dir DIR] [python -m data_prep.wikitext103 flags, see --help]
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
prepare_dataset "$@"
