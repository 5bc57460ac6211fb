#!/usr/bin/env bash
# IWSLT14 German-English: BET(SG) syntax hints of the target side of every split (train, valid, test sets), next to the binaries.
# Usage: SPACY_MODEL=PARSER recipes/iwslt14_de_en/syntax_hints.sh [data_prep/syntax_hints.py flags]   (--help: all overrides)
# Then: SYNTAX_HINTS=1 recipes/iwslt14_de_en/train.sh [PRESET] (translation_with_syntax + the pointer loss).
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
syntax_hints_translation "$@"
