"""How subword tokens mark words (``syntax_hints.subword_words``), apart from the hint files' torch and fairseq
imports so that the hint tool's command line (data_prep/syntax_hints.py) can name them in ``--help``."""
BPE_STYLES = ("subword-nmt", "sentencepiece", "none")
SUBWORD_NMT_CONTINUATION = "@@"
SENTENCEPIECE_WORD_START = "\u2581"
