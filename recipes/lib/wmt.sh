# WMT en-de settings (sourced by recipes/wmt14_en_de and wmt17_en_de config.sh):
# the mixed-attention (mFormer) paper's supplement: lr 7e-4, 4,000 warm-up
# updates, weight decay 0.1, label smoothing 0.1, beam 4, length penalty 0.6,
# the average of the last ten checkpoints. Our choices where it gives nothing:
# about 25,000 tokens per update (Vaswani et al.), 300,000 updates, a
# checkpoint every 1,000 updates, all embeddings shared, the preset's dropout.
SRC=en
TGT=de
# PROFILE=cpu: a short run for trying the pipeline, far from the paper's scores
profile_defaults cpu TOKENS_PER_UPDATE=4096 MAX_UPDATE=6000 WARMUP=1000 AVERAGE_LAST=2
: "${TOKENS_PER_UPDATE:=25000}" "${MAX_UPDATE:=300000}" "${LR:=7e-4}" "${WARMUP:=4000}" "${WEIGHT_DECAY:=0.1}"
: "${SAVE_INTERVAL_UPDATES:=1000}" "${AVERAGE_LAST:=10}" "${BEAM:=4}" "${LENPEN:=0.6}" "${SHARE_EMBEDDINGS:=all}"
# shellcheck source=../lib/translation.sh
source "$(dirname "${BASH_SOURCE[0]}")/translation.sh"
