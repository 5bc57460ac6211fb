#!/usr/bin/env bash
# WikiText-103: BET(SG) syntax hints of the words of every split (train, valid, test), next to the binaries.
# Usage: SPACY_MODEL=PARSER recipes/wikitext103/syntax_hints.sh [data_prep/syntax_hints.py flags]   (--help: all overrides)
# Then: SYNTAX_HINTS=1 recipes/wikitext103/train.sh [PRESET] (language_modeling_with_syntax + the pointer loss).
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"
syntax_hints_lm "$@"
