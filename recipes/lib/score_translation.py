"""Score a fairseq-generate output (run with --remove-bpe) two ways:

* tokenized BLEU: the hypotheses (H-) against fairseq's references (T-), both
  in the preparation's Moses tokens with BPE removed, no further tokenisation
  (``sacrebleu --tokenize none``, the same corpus BLEU as fairseq-score and
  multi-bleu.perl). ``--compound-split`` first splits hyphenated compounds
  (``a-b`` -> ``a ##AT##-##AT## b``) on both sides, as fairseq's
  compound_split_bleu.sh, which is how WMT14 en-de numbers are reported
  (Vaswani et al. 2017 and later). Only comparable between systems that
  share the preparation.
* sacreBLEU: hypotheses detokenised (Moses detokenizer, or as they are for
  sentencepiece) against the untokenised references the preparation saved in
  ``<data-bin>/refs/<subset>.<lang>``, with sacreBLEU's default 13a
  tokenisation; lower-cased when the preparation lower-cased (``case:lc`` in
  the signature). Printed with its signature.

    python recipes/lib/score_translation.py generate-test.txt --data-bin DIR --subset test --lang en [--compound-split]
"""
import argparse
import json
import os
import re
import sys
from typing import Dict, List, Tuple


def read_generate_output(path: str) -> Tuple[List[str], List[str]]:
    """(hypotheses, references) ordered by sentence id."""
    hypotheses: Dict[int, str] = {}
    references: Dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("H-"):
                sid, _, text = (line.split("\t") + ["", ""])[:3]
                hypotheses[int(sid[2:])] = text
            elif line.startswith("T-"):
                sid, text = (line.split("\t", 1) + [""])[:2]
                references[int(sid[2:])] = text
    if not hypotheses:
        raise SystemExit(f"error: no hypotheses (H- lines) in {path}")
    if sorted(hypotheses) != sorted(references):
        raise SystemExit(f"error: {path}: {len(hypotheses)} hypotheses but {len(references)} references")
    ids = sorted(hypotheses)
    return [hypotheses[i] for i in ids], [references[i] for i in ids]


def compound_split(line: str) -> str:
    """perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g' (fairseq's compound_split_bleu.sh)."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def detokenised(hypotheses: List[str], lang: str, sentencepiece: bool) -> List[str]:
    """The hypotheses sacreBLEU scores: Moses-detokenised, or as they are for sentencepiece output (also
    benchmarks/quality.py's paired bootstrap, which must resample exactly the scored text)."""
    if sentencepiece:
        return list(hypotheses)
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang=lang)
    return [detokenizer.detokenize(h.split()) for h in hypotheses]


def score(hypotheses: List[str], references: List[str], raw_references: List[str], lang: str, lowercase: bool,
          sentencepiece: bool, compound: bool) -> dict:
    import sacrebleu
    from sacremoses import MosesTokenizer

    result = {"sentences": len(hypotheses)}
    if sentencepiece:  # output is untokenised: tokenize both sides as the Moses preparation would
        tokenizer = MosesTokenizer(lang=lang)
        tokenized = lambda s: tokenizer.tokenize(s, aggressive_dash_splits=True, return_str=True)  # noqa: E731
        tok_hyp, tok_ref = [tokenized(h) for h in hypotheses], [tokenized(r) for r in raw_references]
    else:
        tok_hyp, tok_ref = hypotheses, references
    detok = detokenised(hypotheses, lang, sentencepiece)
    if compound:
        tok_hyp, tok_ref = [compound_split(h) for h in tok_hyp], [compound_split(r) for r in tok_ref]
    tokenized_bleu = sacrebleu.corpus_bleu(tok_hyp, [tok_ref], tokenize="none", force=True)
    result["tokenized_bleu"] = round(tokenized_bleu.score, 2)
    result["tokenized_bleu_detail"] = str(tokenized_bleu)
    result["compound_split"] = compound
    if raw_references is not None:
        if len(raw_references) != len(detok):
            raise SystemExit(f"error: {len(detok)} hypotheses but {len(raw_references)} raw references")
        metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
        sacre = metric.corpus_score(detok, [raw_references])
        result["sacrebleu"] = round(sacre.score, 2)
        result["sacrebleu_detail"] = str(sacre)
        result["sacrebleu_signature"] = str(metric.get_signature())
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("generate_output")
    parser.add_argument("--data-bin", required=True, help="the prepared data (refs/, prepare.json)")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--lang", required=True, help="target language")
    parser.add_argument("--compound-split", action="store_true", help="tokenized BLEU with compound splitting (WMT14 en-de)")
    parser.add_argument("--json", help="also write the scores here")
    args = parser.parse_args(argv)

    settings = {}
    settings_path = os.path.join(args.data_bin, "prepare.json")
    if os.path.exists(settings_path):
        with open(settings_path, encoding="utf-8") as f:
            settings = json.load(f)
    hypotheses, references = read_generate_output(args.generate_output)
    ref_path = os.path.join(args.data_bin, "refs", f"{args.subset}.{args.lang}")
    raw_references = None
    if os.path.exists(ref_path):
        with open(ref_path, encoding="utf-8") as f:
            raw_references = [line.rstrip("\n") for line in f]
    else:
        print(f"warning: {ref_path} is missing: no sacreBLEU (it scores the detokenised output against the "
              "untokenised references in that file, one line per test sentence)", file=sys.stderr)
    result = score(hypotheses, references, raw_references, args.lang, lowercase=bool(settings.get("lowercase")),
                   sentencepiece=settings.get("bpe") == "sentencepiece", compound=args.compound_split)
    result.update(subset=args.subset, generate_output=os.path.abspath(args.generate_output))
    label = "tokenized BLEU (Moses tokens, BPE removed" + (", compound splitting" if args.compound_split else "") + ")"
    print(f"{args.subset}: {label}: {result['tokenized_bleu']:.2f}    [{result['tokenized_bleu_detail']}]")
    if "sacrebleu" in result:
        print(f"{args.subset}: sacreBLEU (detokenised): {result['sacrebleu']:.2f}    [{result['sacrebleu_detail']}]")
        print(f"{args.subset}: sacreBLEU signature: {result['sacrebleu_signature']}")
    if args.json:
        from fairseq_plugins.files import write_json  # here, not on top: the package imports torch and fairseq (seconds)

        write_json(args.json, result, sort_keys=True)
    return result


if __name__ == "__main__":
    main()
