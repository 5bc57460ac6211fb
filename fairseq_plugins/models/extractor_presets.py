"""Presets for the Extractors (Zhe Chen 2023, "Attention Is Not All You Need
Anymore"): language models in the paper's setting and IWSLT translation models
whose decoder self-attention is an Extractor.

Language models, from the paper: d = 128, context window l = 128 (train with
``--tokens-per-sample 128``; the lags follow it), pre-layer-norm, learned
positions, ReLU FFN; the paper's 5000-token BPE vocabulary is a matter of data
preparation (e.g. a sentencepiece BPE model with vocab_size 5000 before
fairseq-preprocess). Our choices where the paper's text does not give the
values (its Table 1): 4 layers, FFN width 512 (4 d), shared input/output
embeddings, fairseq's LM defaults otherwise (dropout 0.1). The softmax
baselines have the same sizes with 1 or 32 heads.

Translation: ``mixed_transformer_iwslt_de_en`` with every decoder layer's
self-attention replaced by an Extractor; our choice of lags is 128 (at most
``--max-target-positions``), longer than nearly every IWSLT target sentence.
Every value is a default: command-line options override it.
"""
from .architecture import register_preset

from .mixed_transformer import mixed_transformer_iwslt_de_en
from .mixed_transformer_lm import mixed_transformer_lm_base

EXTRACTOR_KINDS = ("she", "he", "we", "me")
PAPER_LAGS = 128


def _default(args, name, value):
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def _default_lags(args, lags: int = PAPER_LAGS):
    """l = 128, or the model's positions where they are fewer (the lags may not exceed them)."""
    positions = getattr(args, "max_target_positions", None) or getattr(args, "tokens_per_sample", None)
    _default(args, "extractor_lags", min(lags, int(positions)) if positions else lags)


def extractor_paper_lm(args):
    """The paper's language-model setting (see the module docstring for which values are ours)."""
    _default(args, "decoder_embed_dim", 128)
    _default(args, "decoder_layers", 4)  # ours
    _default(args, "decoder_ffn_embed_dim", 512)  # ours
    _default(args, "decoder_learned_pos", True)
    _default(args, "activation_fn", "relu")
    _default(args, "share_decoder_input_output_embed", True)  # ours
    args.decoder_normalize_before = True  # pre-layer-norm (fairseq's LMs force it too)
    mixed_transformer_lm_base(args)


def _register_extractor_presets(kind: str):
    name = f"extractor_{kind}"

    def lm(args):
        _default(args, "decoder_attention_kinds", name)
        _default_lags(args)
        extractor_paper_lm(args)

    def iwslt(args):
        _default(args, "decoder_attention_kinds", name)
        _default_lags(args)
        mixed_transformer_iwslt_de_en(args)

    lm.__doc__ = f"The paper's LM setting with {name} in every layer (l = 128)."
    iwslt.__doc__ = f"mixed_transformer_iwslt_de_en with {name} as every decoder layer's self-attention (l = 128)."
    register_preset("mixed_transformer_lm", f"{name}_lm")(lm)
    register_preset("mixed_transformer", f"{name}_iwslt_de_en")(iwslt)


for _kind in EXTRACTOR_KINDS:
    _register_extractor_presets(_kind)


@register_preset("mixed_transformer_lm", "softmax_1head_lm")
def softmax_1head_lm(args):
    """Softmax baseline of the paper's LM setting with 1 head."""
    _default(args, "decoder_attention_kinds", "softmax")
    _default(args, "decoder_attention_heads", 1)
    extractor_paper_lm(args)


@register_preset("mixed_transformer_lm", "softmax_32head_lm")
def softmax_32head_lm(args):
    """Softmax baseline of the paper's LM setting with 32 heads (head dimension 4)."""
    _default(args, "decoder_attention_kinds", "softmax")
    _default(args, "decoder_attention_heads", 32)
    extractor_paper_lm(args)
