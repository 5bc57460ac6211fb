"""Presets for the Bird-Eye Transformer (Sha et al. 2022, "Bird-Eye
Transformers for Text Generation Models") and its diagonal ablations.

BET(SF) puts the ``bet`` attention kind (eqs. 6-10: key scores R, diagonal-free
mask) in every decoder layer's self-attention. BET(SG) is the same model
trained with the syntax-guided pointer loss (eq. 5): the architecture is
BET(SF)'s, the difference is the task and criterion::

    fairseq-train DATA --arch bet_sg_iwslt_de_en --task translation_with_syntax \\
        --criterion label_smoothed_cross_entropy_with_pointer ...

(our reading: the pointer loss supervises the re-weighted distribution A' of
eq. 9; ``--decoder-attention-kinds softmax --softmax-diag-free`` trains plain
attention with the same loss). Every preset has a ``*_no_diag_free`` twin with
the ordinary causal mask in the second softmax (the paper's ablation of the
diagonal-free mask); that twin *sets* ``--bet-no-diag-free``.

Sizes: translation presets use fairseq's ``transformer_iwslt_de_en`` and
``transformer_wmt_en_de`` (Transformer base) sizes. Language models: the
paper's hidden size (300 for WikiText-2/103, 512 for enwik8); ours: 6 layers, 6
heads and FFN 1200 at d = 300; 12 layers, 8 heads and FFN 2048 at d = 512;
pre-layer-norm and shared input/output embeddings. ``bet_baseline_lm_*`` are
the softmax baselines of the same sizes. The ``*_diag_iwslt_de_en`` presets
are the paper's diagonal ablations on plain softmax attention: diag-free,
"Reduced Diag" (x0.2) and "Magnified Diag" (x2.0).
Every value is a default: command-line options override it.
"""
from fairseq.models.transformer import base_architecture

from .architecture import register_preset
from .mixed_transformer import mixed_transformer_iwslt_de_en
from .layout import set_layout_defaults
from .mixed_transformer_lm import mixed_transformer_lm_base


def _default(args, name, value):
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def _bet_decoder(args, diag_free: bool):
    _default(args, "decoder_attention_kinds", "bet")
    if not diag_free:
        args.bet_no_diag_free = True


def _register_pair(model: str, name: str, build, doc: str):
    """Register ``name`` (diag-free mask) and ``name_no_diag_free``."""

    def with_mask(args):
        _bet_decoder(args, diag_free=True)
        build(args)

    def without_mask(args):
        _bet_decoder(args, diag_free=False)
        build(args)

    with_mask.__doc__ = doc
    without_mask.__doc__ = doc + " Ablation: ordinary causal mask instead of the diagonal-free mask."
    register_preset(model, name)(with_mask)
    register_preset(model, f"{name}_no_diag_free")(without_mask)


def _wmt_en_de(args):
    set_layout_defaults(args)
    base_architecture(args)


def _lm_sizes(embed_dim: int, layers: int, heads: int, ffn: int):
    def build(args):
        _default(args, "decoder_embed_dim", embed_dim)
        _default(args, "decoder_layers", layers)
        _default(args, "decoder_attention_heads", heads)
        _default(args, "decoder_ffn_embed_dim", ffn)
        _default(args, "share_decoder_input_output_embed", True)
        args.decoder_normalize_before = True
        mixed_transformer_lm_base(args)

    return build


_lm_wikitext = _lm_sizes(300, 6, 6, 1200)
_lm_enwik8 = _lm_sizes(512, 12, 8, 2048)

_register_pair(
    "mixed_transformer", "bet_sf_iwslt_de_en", mixed_transformer_iwslt_de_en,
    "BET(SF): transformer_iwslt_de_en sizes, bet in every decoder layer's self-attention.",
)
_register_pair(
    "mixed_transformer", "bet_sg_iwslt_de_en", mixed_transformer_iwslt_de_en,
    "BET(SG): the BET(SF) IWSLT model, to train with --task translation_with_syntax "
    "--criterion label_smoothed_cross_entropy_with_pointer.",
)
_register_pair(
    "mixed_transformer", "bet_sf_wmt_en_de", _wmt_en_de,
    "BET(SF): Transformer base sizes (transformer_wmt_en_de), bet in every decoder layer's self-attention.",
)
_register_pair(
    "mixed_transformer", "bet_sg_wmt_en_de", _wmt_en_de,
    "BET(SG): the BET(SF) WMT model, to train with --task translation_with_syntax "
    "--criterion label_smoothed_cross_entropy_with_pointer.",
)
_register_pair(
    "mixed_transformer_lm", "bet_sf_lm_wikitext", _lm_wikitext,
    "BET(SF) language model for WikiText-2/103: d = 300 (paper); 6 layers, 6 heads, FFN 1200 (ours).",
)
_register_pair(
    "mixed_transformer_lm", "bet_sf_lm_enwik8", _lm_enwik8,
    "BET(SF) character language model for enwik8: d = 512 (paper); 12 layers, 8 heads, FFN 2048 (ours).",
)


@register_preset("mixed_transformer_lm", "bet_baseline_lm_wikitext")
def bet_baseline_lm_wikitext(args):
    """Softmax baseline of bet_sf_lm_wikitext (same sizes)."""
    _default(args, "decoder_attention_kinds", "softmax")
    _lm_wikitext(args)


@register_preset("mixed_transformer_lm", "bet_baseline_lm_enwik8")
def bet_baseline_lm_enwik8(args):
    """Softmax baseline of bet_sf_lm_enwik8 (same sizes)."""
    _default(args, "decoder_attention_kinds", "softmax")
    _lm_enwik8(args)


@register_preset("mixed_transformer", "diag_free_iwslt_de_en")
def diag_free_iwslt_de_en(args):
    """Softmax decoder self-attention with the diagonal-free mask (BET's ablation)."""
    args.softmax_diag_free = True
    mixed_transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "reduced_diag_iwslt_de_en")
def reduced_diag_iwslt_de_en(args):
    """Softmax decoder self-attention with the diagonal of Q K^T scaled by 0.2 ("Reduced Diag")."""
    _default(args, "softmax_diag_scale", 0.2)
    mixed_transformer_iwslt_de_en(args)


@register_preset("mixed_transformer", "magnified_diag_iwslt_de_en")
def magnified_diag_iwslt_de_en(args):
    """Softmax decoder self-attention with the diagonal of Q K^T scaled by 2.0 ("Magnified Diag")."""
    _default(args, "softmax_diag_scale", 2.0)
    mixed_transformer_iwslt_de_en(args)
