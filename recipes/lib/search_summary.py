"""A search stage's result as a person reads it: the JSON line `python -m fairseq_plugins.search <stage>`
prints (kept as it is in a file under SEARCH_DIR/stages/) as a two-column table of its values, nested
keys joined with dots, lists shown by their length (the files hold them in full).

    python recipes/lib/search_summary.py STAGE_NAME FILE.json
"""
import json
import sys


def rows(value, prefix=""):
    """(key, text) of every scalar in ``value``; lists and long texts shortened."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from rows(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        if value and all(not isinstance(item, (dict, list)) for item in value) and len(value) <= 8:
            yield prefix, ", ".join(map(str, value))
        else:
            yield prefix, f"[{len(value)} entries]"
    elif isinstance(value, float):
        yield prefix, format(value, ".6g")
    else:
        yield prefix, str(value)


def table(name: str, result: dict) -> str:
    lines = list(rows(result))
    width = max((len(key) for key, _ in lines), default=0)
    return "\n".join([f"[recipe] search: {name}"] + [f"  {key.ljust(width)}  {text}" for key, text in lines])


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: search_summary.py STAGE_NAME FILE.json", file=sys.stderr)
        return 2
    name, path = args
    with open(path, encoding="utf-8") as f:
        results = [line for line in f.read().splitlines() if line.startswith("{")]
    if not results:
        print(f"error: {path}: no result line (the stage's output is kept there as it was printed)", file=sys.stderr)
        return 2
    print(table(name, json.loads(results[-1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
