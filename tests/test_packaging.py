"""setup.py declares the runtime requirements and the heavy optional parts as extras, at the versions
requirements.txt pins, and never torch or fairseq (`make setup` installs those first, specially); the
Makefile's setup installs the package with every extra under constraints.txt (torch stays)."""
import os
import re
import runpy
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def declared():
    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="__main__")
    return setup.call_args.kwargs


def pins(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return {m.group(1).lower(): m.group(0) for m in re.finditer(r"^([A-Za-z0-9._-]+)==(\S+)$", f.read(), re.M)}


def test_requirements_and_extras_are_declared_at_the_pinned_versions():
    kwargs = declared()
    pinned = {**pins("requirements.txt"), **pins("constraints.txt")}
    runtime, extras = kwargs["install_requires"], kwargs["extras_require"]
    assert {"hydra-core", "sacrebleu", "sacremoses", "subword-nmt", "sentencepiece"} <= {r.split("==")[0] for r in runtime}
    assert set(extras) >= {"search", "syntax", "analysis", "tensorboard", "test"}
    assert "optuna" in " ".join(extras["search"]) and "spacy" in " ".join(extras["syntax"])
    assert "matplotlib" in " ".join(extras["analysis"]) and "pytest" in " ".join(extras["test"])
    everything = runtime + [r for names in extras.values() for r in names]
    for requirement in everything:
        assert requirement == pinned[requirement.split("==")[0].lower()], requirement
    # heavy parts are extras, not runtime requirements
    assert not {"spacy", "optuna", "lightgbm", "matplotlib", "pytest"} & {r.split("==")[0].lower() for r in runtime}
    # never torch (pip would replace the CPU wheel) nor fairseq (its metadata names torchaudio)
    assert not [r for r in everything if re.match(r"(torch|torchaudio|fairseq)", r, re.I)]


def test_make_setup_installs_every_extra_under_the_constraints():
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    extras = re.search(r"^EXTRAS \?= (\S+)$", makefile, re.M).group(1).split(",")
    assert sorted(extras) == sorted(declared()["extras_require"])
    install = [line for line in makefile.splitlines() if '-e ".[$(EXTRAS)]"' in line]
    assert len(install) == 1 and "-c constraints.txt" in install[0]
    assert "torch==2.13.0" in pins("constraints.txt").values()
