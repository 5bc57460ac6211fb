"""Shared by the scoring scripts: keep a result as JSON."""
import json
import os
from typing import Optional


def save(result: dict, path: Optional[str]) -> dict:
    """Write ``result`` to ``path`` (atomically) when a path is given; return it."""
    if path:
        with open(path + ".partial", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(path + ".partial", path)
    return result
