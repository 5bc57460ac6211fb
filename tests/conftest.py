"""One compute thread for every test and every process a test starts.

Trained results (the BLEU and perplexity bars of the end-to-end tests) depend on
the number of intra-op threads: a sum split over 2 threads is added in another
order than over 1, and a few hundred updates later the model differs (the BET(SG)
test reached 92.29 BLEU on 1 thread and 84.34 on 2 at the same seed). With one
thread everywhere the suite is deterministic on a given CPU kind whatever the
machine's core count or load, and `make test` runs test files side by side
(pytest-xdist, one file per worker) instead of threads fighting over the cores.
Set before anything starts a subprocess; the test's own process is set below.
"""
import os

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import torch  # noqa: E402  (after the variables: a fresh OpenMP pool reads them)

torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A folder with small dictionaries for translation (src, tgt) and language models (dict.txt): what
    fairseq's tasks read to build a model."""
    path = tmp_path_factory.mktemp("dicts")
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        (path / name).write_text("".join(f"w{i} 10\n" for i in range(12)))
    return str(path)


# Longest files first (tools/record_test_durations.py writes the table): `make test` hands files to its
# workers in collection order (--no-loadscope-reorder), so the long trainings start at once and the short
# files fill in around them, instead of one worker training alone at the end.
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")


def pytest_collection_modifyitems(session, config, items):
    import json

    try:
        with open(DURATIONS, encoding="utf-8") as f:
            seconds = json.load(f)
    except FileNotFoundError:
        return
    root = str(config.rootpath)
    # (a stable sort: a file's tests keep their order; files missing from the table keep theirs, after the rest)
    def order(item):
        name = os.path.relpath(str(item.path), root).replace(os.sep, "/")
        return (name not in seconds, -seconds.get(name, 0.0))

    items.sort(key=order)
