#!/usr/bin/env bash
# WMT14 English-German: BET(SG) syntax hints of the target side of every split (train, valid, test sets), next to the binaries.
# Usage: SPACY_MODEL=PARSER recipes/wmt14_en_de/syntax_hints.sh [data_prep/syntax_hints.py flags]   (--help: all overrides)
# Then: SYNTAX_HINTS=1 recipes/wmt14_en_de/train.sh [PRESET] (translation_with_syntax + the pointer loss).
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
syntax_hints_translation "$@"
