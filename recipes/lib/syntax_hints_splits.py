"""data_prep/syntax_hints.py for several splits in one process (fairseq and
spaCy are imported once, not once per split), as recipes/lib/syntax_hints.sh
calls it:

    python recipes/lib/syntax_hints_splits.py SUBSET TEXT PREFIX [SUBSET TEXT PREFIX ...] -- [syntax_hints.py flags]

Every (SUBSET, TEXT, PREFIX) becomes ``syntax_hints.py --input TEXT --output
PREFIX FLAGS``, in order; the first failure stops the run with that tool's
message and exit status.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv):
    if "--" in argv:
        at = argv.index("--")
        triples, flags = argv[:at], argv[at + 1:]
    else:
        triples, flags = argv, []
    if not triples or len(triples) % 3:
        print("usage: syntax_hints_splits.py SUBSET TEXT PREFIX [SUBSET TEXT PREFIX ...] -- [syntax_hints.py flags]",
              file=sys.stderr)
        return 2
    from data_prep import syntax_hints

    for k in range(0, len(triples), 3):
        subset, text, prefix = triples[k:k + 3]
        print(f"[recipe] syntax hints of {subset} ({text}) -> {prefix}", file=sys.stderr, flush=True)
        syntax_hints.main(["--input", text, "--output", prefix, *flags])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
