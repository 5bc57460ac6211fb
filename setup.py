"""fairseq_plugins: new attention layers (cosFormer, mixed attention, ...) for fairseq.

Install with `make setup` (see README): torch and fairseq-fixed must be installed
in a special order, so no dependencies are declared here on purpose; declaring
fairseq-fixed would make pip resolve its torchaudio requirement and replace the
CPU torch with a multi-GB CUDA build.
"""
from setuptools import find_packages, setup

setup(
    name="fairseq_plugins",
    version="0.1.0",
    description="Attention kinds (cosFormer, mixed attention, Extractors, Bird-Eye) for fairseq",
    packages=find_packages(include=["fairseq_plugins", "fairseq_plugins.*"]),
    # the presets' hydra config files (fairseq-hydra-train --config-dir .../fairseq_plugins/config)
    package_data={"fairseq_plugins": ["config/model/*.yaml"]},
    python_requires=">=3.11,<3.12",
    install_requires=[],
    entry_points={
        "console_scripts": [
            "fairseq-plugins-cpu-train = fairseq_plugins.cli.cpu_distributed_train:main",
            "fairseq-plugins-demo = fairseq_plugins.cli.demo:main",
            "fairseq-plugins-attention = fairseq_plugins.analysis.cli:main",
        ]
    },
)
