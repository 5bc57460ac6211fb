"""WikiText-103, word level (see data_prep/wikitext.py): ``python -m data_prep.wikitext103 [--raw-dir DIR]``."""
from typing import Optional, Sequence

from .wikitext import main_for


def main(argv: Optional[Sequence[str]] = None) -> str:
    return main_for("103", argv)


if __name__ == "__main__":
    main()
