"""Tasks. Importing this package registers them with fairseq."""
from . import translation_with_syntax, language_modeling_with_syntax  # noqa: F401  (registration side effects)
