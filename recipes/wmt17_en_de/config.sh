# WMT17 en-de (newstest2016 valid, newstest2017 test), default preset
# mixed_transformer (transformer base sizes; a bet_* preset for the BET paper),
# with the WMT14 recipe's settings (recipes/lib/wmt.sh).
# Scores: tokenized BLEU and sacreBLEU (= sacrebleu -t wmt17 -l en-de).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
DATASET=wmt17_en_de
PREPARE_MODULE=data_prep.wmt17_en_de
DEFAULT_PRESET=mixed_transformer
# shellcheck source=../lib/wmt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/wmt.sh"
