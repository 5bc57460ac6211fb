# WMT14 en-de (newstest2013 valid, newstest2014 test), default preset
# mformer_wmt_en_de, with the mixed-attention paper's settings (lr 7e-4, 4,000
# warm-up updates, weight decay 0.1, label smoothing 0.1, beam 4, length
# penalty 0.6, average of the last ten checkpoints; see recipes/lib/wmt.sh).
# Scores: tokenized BLEU with compound splitting (how WMT14 en-de numbers are
# published) and sacreBLEU (= sacrebleu -t wmt14/full -l en-de).
# shellcheck source=../lib/profile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/profile.sh"
DATASET=wmt14_en_de
PREPARE_MODULE=data_prep.wmt14_en_de
DEFAULT_PRESET=mformer_wmt_en_de
: "${SCORE_ARGS:=--compound-split}"
# shellcheck source=../lib/wmt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/wmt.sh"
