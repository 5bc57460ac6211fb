"""``make demo``: train small models of several presets on a generated
translation task through fairseq's own CLIs, beam-decode the test set and
print one row per preset. Offline, on CPU.

    python -m fairseq_plugins.cli.demo [--work-dir demo_runs] [--max-update 400] [--quick]

``--quick`` runs the same steps for two of the presets, on less data, with a
few updates (the test suite runs it so that the demo keeps working); its BLEU
is far from 100.

Run again after an interruption, it resumes: a preset trained to the end is
not trained again, one interrupted continues from its last checkpoint
(fairseq-train resumes from checkpoint_last.pt); a preset's folder is started
afresh only when its settings have changed.
"""
import argparse
import json
import logging
import os
import shutil
import sys
import threading
import time

from tqdm import tqdm

from ..files import atomic_directory, atomic_output
from .pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, count_parameters, generate, train

# (named, not __name__: run with -m, this module is __main__)
logger = logging.getLogger("fairseq_plugins.cli.demo")

# (row label, architecture, extra options): every row is a registered preset
# shrunk to d = 64 (and 2 decoder layers), or the base architecture with a flag.
DEMO_ROWS = [
    ("softmax baseline", "mixed_transformer_iwslt_de_en", ["--encoder-layers", "2", "--decoder-layers", "2"]),
    ("cosFormer everywhere", "cosformer_iwslt_de_en", ["--encoder-layers", "2", "--decoder-layers", "2"]),
    ("cosFormer decoder self-attn only", "mixed_transformer_iwslt_de_en",
     ["--encoder-layers", "2", "--decoder-layers", "2", "--decoder-attention-kinds", "cosformer"]),
    ("mFormer (cosFormer in enc. layers 2, 4)", "mformer_iwslt_de_en", ["--decoder-layers", "2"]),
]

# sentence pairs per split of the generated task (cli/synthetic.py)
FULL_SPLITS = {"train": 3000, "valid": 100, "test": 100}
QUICK_SPLITS = {"train": 300, "valid": 20, "test": 20}
QUICK_MAX_UPDATE = 10
# --quick trains one softmax and one cosFormer model: every subprocess costs
# seconds of imports (the test suite checks that the other rows' models build)
QUICK_ROWS = DEMO_ROWS[:2]


# not on a terminal: a line at least this often while a preset trains
PROGRESS_LINE_SECONDS = 30
# fairseq's log interval during the demo's training: how often the update count is known
DEMO_LOG_INTERVAL = 10


class LineProgress:
    """Progress for a log (not a terminal): one logged line every ``interval`` seconds with the update count
    fairseq last logged, so that a long quiet step still says that it runs (``update`` as tqdm's)."""

    def __init__(self, label: str, total: int, interval: float = PROGRESS_LINE_SECONDS, start: int = 0):
        self.label, self.total, self.interval = label, total, interval
        self.n, self.started = start, time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def update(self, count: int) -> None:
        self.n += count

    def line(self) -> None:
        logger.info("%s: update %d/%d, %.0f s", self.label, self.n, self.total, time.monotonic() - self.started)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.line()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def update_progress(label: str, total: int, file=None, start: int = 0, interval: float = PROGRESS_LINE_SECONDS):
    """When ``file`` (default stderr) is a terminal, a bar of training updates on it (tqdm); otherwise
    (`make demo 2> log`) no bar but a logged line every ``interval`` seconds."""
    stream = file or sys.stderr
    if stream.isatty():
        return tqdm(total=total, initial=start, desc=f"  {label}", unit="update", leave=False, file=stream,
                    dynamic_ncols=True)
    return LineProgress(label, total, interval=interval, start=start)


def row_settings(arch: str, options: list, data_bin: str, max_update: int) -> dict:
    """What a preset's folder was trained with (``row.json``): another architecture, options or data
    (the work folder's data-bin or data-bin-quick) make its checkpoints another model's; ``max_update`` may
    grow (training continues)."""
    return {"arch": arch, "options": list(options), "data": os.path.basename(os.path.normpath(data_bin)), "max_update": max_update}


def checkpoint_updates(checkpoint: str) -> int:
    """The updates a fairseq checkpoint was saved after (0: none)."""
    if not os.path.exists(checkpoint):
        return 0
    import torch

    from .. import register

    register()  # safe globals for weights-only loading

    state = torch.load(checkpoint, map_location="cpu")
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def prepare_row(save_dir: str, settings: dict):
    """A preset's folder for these settings: (the finished row's result, or None; the updates to resume
    from). A folder of other settings (or a finished run of more updates) is started afresh."""
    settings_path, result_path = os.path.join(save_dir, "row.json"), os.path.join(save_dir, "result.json")
    previous = json.load(open(settings_path)) if os.path.exists(settings_path) else None
    if previous is not None:
        same_model = {k: v for k, v in previous.items() if k != "max_update"} == \
            {k: v for k, v in settings.items() if k != "max_update"}
        if same_model and os.path.exists(result_path) and previous["max_update"] == settings["max_update"]:
            return json.load(open(result_path)), settings["max_update"]
        updates = checkpoint_updates(os.path.join(save_dir, "checkpoint_last.pt")) if same_model else None
        if updates is None or updates > settings["max_update"]:
            shutil.rmtree(save_dir)
            previous = None
    if previous is None:  # (a folder without row.json: an older demo's, of unknown settings)
        shutil.rmtree(save_dir, ignore_errors=True)
        os.makedirs(save_dir)
        updates = 0
    with atomic_output(settings_path) as f:
        json.dump(settings, f)
    if os.path.exists(result_path):
        os.remove(result_path)
    return None, updates


def closing_lines(quick: bool, beam: int, test_sentences: int, max_update: int) -> list:
    meaning = (f"BLEU: fairseq-generate --beam {beam} on the {test_sentences} generated test sentences; the toy task maps "
               "every source word to one target word, keeping the order, so about 100 BLEU means a preset has solved it.")
    if quick:
        meaning += (f" --quick trains {len(QUICK_ROWS)} presets for {max_update} updates: its BLEU says that "
                    "the steps run, not how well; `make demo` trains all of them.")
    return [
        meaning,
        "Next: `make test` runs the test suite; `recipes/README.md` trains and scores these presets on real data "
        "(e.g. recipes/multi30k/prepare.sh, then recipes/multi30k/train.sh cosformer_iwslt_de_en).",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", default="demo_runs", help="where data, checkpoints and logs go (default: demo_runs)")
    parser.add_argument("--max-update", type=int, default=None,
                        help=f"training updates per preset (default: 400; --quick: {QUICK_MAX_UPDATE})")
    parser.add_argument("--beam", type=int, default=5, help="beam size for fairseq-generate (default: 5)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: the first {len(QUICK_ROWS)} presets, {QUICK_SPLITS['train']} training pairs, "
                             f"{QUICK_MAX_UPDATE} updates each")
    args = parser.parse_args(argv)
    from ..command_line import configure_logging

    configure_logging()
    max_update = args.max_update if args.max_update is not None else (QUICK_MAX_UPDATE if args.quick else 400)
    if max_update < 1:
        parser.error(f"--max-update must be >= 1, got {max_update}")
    if args.beam < 1:
        parser.error(f"--beam must be >= 1, got {args.beam}")

    from .synthetic import binarize_translation, write_translation_task

    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    splits = QUICK_SPLITS if args.quick else FULL_SPLITS
    demo_rows = QUICK_ROWS if args.quick else DEMO_ROWS
    # the quick data set is smaller: kept in its own folder so that neither run reuses the other's
    data_bin = os.path.join(args.work_dir, "data-bin-quick" if args.quick else "data-bin")
    logger.info("synthetic word-mapping translation task, %d presets, %d updates each, CPU%s", len(demo_rows),
                max_update, " (--quick)" if args.quick else "")
    if not os.path.exists(os.path.join(data_bin, "dict.src.txt")):
        logger.info("generating and binarising data (fairseq-preprocess) ...")
        raw_dir = write_translation_task(os.path.join(args.work_dir, "raw-quick" if args.quick else "raw"), splits=splits)
        with atomic_directory(data_bin) as partial_bin:
            binarize_translation(raw_dir, partial_bin)

    rows = []
    for label, arch, extra in demo_rows:
        save_dir = os.path.join(args.work_dir, "checkpoints-quick" if args.quick else "checkpoints",
                                label.split(" (")[0].replace(" ", "_").replace(".", ""))
        options = TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + extra
        finished, done = prepare_row(save_dir, row_settings(arch, options, data_bin, max_update))
        checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
        if finished is not None:
            seconds = finished["train_seconds"]
            logger.info("%s (%s): trained before (%d updates, %s); beam search ...", label, arch, max_update, save_dir)
        else:
            resumed = f", resuming after update {done}" if done else ""
            logger.info("%s (%s): training %d updates%s, then beam search ...", label, arch, max_update, resumed)
            with update_progress(label, max_update, start=done) as bar:
                result = train(data_bin, save_dir, arch, options + ["--log-interval", str(DEMO_LOG_INTERVAL)],
                               max_update=max_update, on_update=lambda n: bar.update(min(n, max_update) - bar.n))
            seconds = result.seconds
            with atomic_output(os.path.join(save_dir, "result.json")) as f:
                json.dump({"train_seconds": seconds}, f)
        # targets are as long as their sources: the bound only stops an untrained
        # model (--quick) from decoding 200 tokens per sentence
        decoded = generate(data_bin, checkpoint, beam=args.beam, extra=["--max-len-a", "1.2", "--max-len-b", "10"])
        logger.info("%s: BLEU %.2f (train %.0f s, decode %.1f s)", label, decoded.bleu, seconds, decoded.seconds)
        rows.append((label, arch, decoded.bleu, count_parameters(checkpoint), seconds, decoded.seconds))

    header = ("preset", "architecture", f"BLEU (beam {args.beam})", "parameters", "train time", "decode time")
    table = [header] + [(l, a, f"{b:.2f}", f"{p:,}", f"{t:.0f} s", f"{d:.1f} s") for l, a, b, p, t, d in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(f"\nCheckpoints and logs: {os.path.abspath(args.work_dir)}")
    for line in closing_lines(args.quick, args.beam, splits["test"], max_update):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
