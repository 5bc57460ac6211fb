"""Read fairseq-eval-lm's summary line ("Loss (base 2): L, Perplexity: P")
and report it in the unit of the data: perplexity per word for word-level
data (WikiText: per token, end-of-line symbols included, as fairseq and the
papers count), bits per character for byte-level data (enwik8 convention:
one token per byte, so the base-2 loss per token is bits per byte).

    python recipes/lib/lm_report.py eval-lm-test.txt --unit word|byte [--json out.json]
"""
import argparse
import re

from report import save  # recipes/lib/report.py (this script's folder is on sys.path)


def parse(log: str) -> dict:
    loss = re.search(r"Loss \(base 2\): ([0-9.]+), Perplexity: ([0-9.]+)", log)
    tokens = re.search(r"Evaluated ([0-9,]+) tokens", log)
    if not loss:
        raise SystemExit("error: fairseq-eval-lm printed no 'Loss (base 2): ..., Perplexity: ...' line")
    result = {"loss_base2": float(loss.group(1)), "perplexity": float(loss.group(2))}
    if tokens:
        result["tokens"] = int(tokens.group(1).replace(",", ""))
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--unit", choices=["word", "byte"], required=True)
    parser.add_argument("--subset", default="test")
    parser.add_argument("--dataset", default="")
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8") as f:
        result = parse(f.read())
    result.update(unit=args.unit, subset=args.subset, dataset=args.dataset, checkpoint=args.checkpoint)
    counted = f" over {result['tokens']} tokens" if "tokens" in result else ""
    if args.unit == "byte":
        result["bits_per_character"] = result["loss_base2"]
        print(f"{args.dataset} {args.subset}: {result['loss_base2']:.4f} bits per character (byte){counted}")
    else:
        print(f"{args.dataset} {args.subset}: perplexity {result['perplexity']:.2f} per word{counted}")
    return save(result, args.json)


if __name__ == "__main__":
    main()
