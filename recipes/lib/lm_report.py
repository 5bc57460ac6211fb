"""Read fairseq-eval-lm's summary line ("Loss (base 2): L, Perplexity: P")
and report it in the unit of the data: perplexity per word for word-level
data (WikiText: per token, end-of-line symbols included, as fairseq and the
papers count), bits per character for byte-level data (enwik8 convention:
one token per byte, so the base-2 loss per token is bits per byte). A loss over
0 tokens (fairseq-eval-lm skipped every sample and printed perplexity 1.00) is
an error, and so is output without fairseq-eval-lm's token count.

    python recipes/lib/lm_report.py eval-lm-test.txt --unit word|byte [--json out.json]
"""
import argparse
import re


def parse(log: str, name: str = "the log") -> dict:
    """Loss, perplexity and token count of the output ``log`` (``name``: its file, for errors). A loss over
    no tokens is an error: fairseq-eval-lm reports loss 0 and perplexity 1.00 when it skipped every sample."""
    loss = re.search(r"Loss \(base 2\): ([0-9.]+), Perplexity: ([0-9.]+)", log)
    tokens = re.search(r"Evaluated ([0-9,]+) tokens", log)
    if not loss:
        raise SystemExit(f"error: {name}: fairseq-eval-lm printed no 'Loss (base 2): ..., Perplexity: ...' line")
    if not tokens:
        raise SystemExit(f"error: {name}: fairseq-eval-lm printed no 'Evaluated N tokens' line, so the loss may be over "
                         "nothing; pass the whole output of fairseq-eval-lm (its INFO lines included)")
    result = {"loss_base2": float(loss.group(1)), "perplexity": float(loss.group(2)),
              "tokens": int(tokens.group(1).replace(",", ""))}
    if result["tokens"] == 0:
        raise SystemExit(f"error: {name}: fairseq-eval-lm evaluated 0 tokens, so its '{loss.group(0)}' is over nothing; "
                         "every sample was skipped: check --gen-subset, and --tokens-per-sample and --max-tokens against "
                         "the data and the model's positions")
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
        result = parse(f.read(), args.log)
    result.update(unit=args.unit, subset=args.subset, dataset=args.dataset, checkpoint=args.checkpoint)
    counted = f" over {result['tokens']} tokens"
    if args.unit == "byte":
        result["bits_per_character"] = result["loss_base2"]
        print(f"{args.dataset} {args.subset}: {result['loss_base2']:.4f} bits per character (byte){counted}")
    else:
        print(f"{args.dataset} {args.subset}: perplexity {result['perplexity']:.2f} per word{counted}")
    if args.json:
        from fairseq_plugins.files import write_json  # here, not on top: the package imports torch and fairseq (seconds)

        write_json(args.json, result, sort_keys=True)
    return result


if __name__ == "__main__":
    main()
