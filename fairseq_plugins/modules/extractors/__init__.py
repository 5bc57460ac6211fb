"""The Extractor kinds (Chen 2023): ``naive.py`` (tensor-level reference, eqs.
23-29), ``conv.py`` (the extraction as a causal convolution: direct, FFT, one
decoding step; the cost rule), ``options.py`` (options and size checks),
``attention.py`` (the modules and their registration), ``costs.py``."""
from .attention import (  # noqa: F401
    Extractor,
    ExtractorHE,
    ExtractorME,
    ExtractorSHE,
    ExtractorWE,
    naive_extractor_he,
    naive_extractor_me,
    naive_extractor_she,
    naive_extractor_we,
)
from .conv import choose_conv_impl, direct_conv, extract, extract_last, fft_conv, fft_length  # noqa: F401
from .costs import (  # noqa: F401
    EXTRACTOR_KINDS,
    extractor,
    extractor_costs,
    extractor_parameters,
    extractor_step,
    extractor_training,
    fft_flops,
)
from .naive import naive_extractor  # noqa: F401
from .options import CONV_IMPLS, ExtractorMEOptions, ExtractorOptions, check_she_size, resolve_lags  # noqa: F401
