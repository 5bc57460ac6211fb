"""fairseq_plugins: new attention layers (cosFormer, mixed attention, ...) for fairseq.

Install with `make setup` (see README): torch and fairseq-fixed are installed first and in a special
way (a CPU torch wheel; fairseq-fixed built with --no-deps, since its metadata names torchaudio, which
would make pip replace the CPU torch with a multi-GB CUDA build). Neither is declared here for that
reason, and nothing declared here asks for torch; `make setup` installs with -c constraints.txt, which
pins torch==2.13.0, so pip can never replace it.

Declared here, each at the version requirements.txt pins (read from it: one list of versions):
the runtime requirements (fairseq's own, which its --no-deps install leaves out, and data_prep's text
tools), and the heavy optional parts as extras:

    pip install -c constraints.txt -c requirements.txt -e ".[search,syntax,analysis,tensorboard,test]"

search: the architecture search's ranking and evolution (fairseq_plugins/search); syntax: spaCy for
BET(SG) syntax hints (data_prep/syntax_hints.py); analysis: attention heatmaps (fairseq_plugins/analysis);
tensorboard: TENSORBOARD_DIR of the recipes; test: the test suite. `make setup` installs every extra
(EXTRAS=... chooses).
"""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

# fairseq-fixed's runtime requirements without torch, torchaudio and its build tools, and what the
# plugin and data_prep use at every step (hub, recipes: Moses, subword-nmt, sentencepiece, YAML spaces)
RUNTIME = ["numpy", "cffi", "hydra-core", "omegaconf", "regex", "sacrebleu", "tqdm", "bitarray", "scikit-learn",
           "packaging", "PyYAML", "sacremoses", "subword-nmt", "sentencepiece"]
EXTRAS = {
    "search": ["scipy", "lightgbm", "optuna"],
    "syntax": ["spacy"],
    "analysis": ["matplotlib"],
    "tensorboard": ["tensorboardX", "protobuf"],
    "test": ["pytest", "pytest-xdist"],
}


def pinned(names):
    """``name==version`` as requirements.txt (numpy: constraints.txt) pins each of ``names``."""
    pins = {}
    for file_name in ("requirements.txt", "constraints.txt"):
        with open(os.path.join(HERE, file_name), encoding="utf-8") as f:
            for line in f:
                match = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line.strip())
                if match:
                    pins.setdefault(match.group(1).lower(), match.group(0))
    missing = [name for name in names if name.lower() not in pins]
    if missing:
        raise SystemExit(f"setup.py: {', '.join(missing)} not pinned in requirements.txt")
    return [pins[name.lower()] for name in names]


setup(
    name="fairseq_plugins",
    version="0.1.0",
    description="Attention kinds (cosFormer, mixed attention, Extractors, Bird-Eye) for fairseq",
    packages=find_packages(include=["fairseq_plugins", "fairseq_plugins.*"]),
    # the presets' hydra config files (fairseq-hydra-train --config-dir .../fairseq_plugins/config)
    package_data={"fairseq_plugins": ["config/model/*.yaml"]},
    python_requires=">=3.11,<3.12",
    install_requires=pinned(RUNTIME),
    extras_require={extra: pinned(names) for extra, names in EXTRAS.items()},
    entry_points={
        "console_scripts": [
            "fairseq-plugins-cpu-train = fairseq_plugins.cli.cpu_distributed_train:main",
            "fairseq-plugins-demo = fairseq_plugins.cli.demo:main",
            "fairseq-plugins-attention = fairseq_plugins.analysis.cli:main",
        ]
    },
)
