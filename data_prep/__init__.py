"""Turn public releases into fairseq binaries with each community's standard
preparation: ``python -m data_prep.<dataset> [--raw-dir DIR] [--dest DIR]``
for iwslt14, wmt14_en_de, wmt17_en_de, multi30k, wikitext103, wikitext2 and
enwik8 (``--help`` on each). Shared machinery: ``common`` (downloads with
retries and mirrors, checksums, atomic outputs, resumable steps), ``text``
(Moses, cleaning, BPE), ``translation`` and ``language_model`` (the two
paths)."""
