"""``make demo``: train small models of several presets on a generated
translation task through fairseq's own CLIs, beam-decode the test set and
print one row per preset. Offline, a few minutes on 2 CPU cores.

    python -m fairseq_plugins.cli.demo [--work-dir demo_runs] [--max-update 400]
"""
import argparse
import os
import shutil
import sys
import time

from .pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, count_parameters, generate, train

# (row label, architecture, extra options): every row is a registered preset
# shrunk to d = 64 (and 2 decoder layers), or the base architecture with a flag.
DEMO_ROWS = [
    ("softmax baseline", "mixed_transformer_iwslt_de_en", ["--encoder-layers", "2", "--decoder-layers", "2"]),
    ("cosFormer everywhere", "cosformer_iwslt_de_en", ["--encoder-layers", "2", "--decoder-layers", "2"]),
    ("cosFormer decoder self-attn only", "mixed_transformer_iwslt_de_en",
     ["--encoder-layers", "2", "--decoder-layers", "2", "--decoder-attention-kinds", "cosformer"]),
    ("mFormer (cosFormer in enc. layers 2, 4)", "mformer_iwslt_de_en", ["--decoder-layers", "2"]),
]


def progress_bar(label: str, total: int):
    start = time.time()

    def show(done: int):
        width = 30
        filled = int(width * min(done, total) / total)
        sys.stdout.write(f"\r  {label:<42} [{'#' * filled}{'.' * (width - filled)}] {done:>4}/{total} updates  {time.time() - start:5.0f}s")
        sys.stdout.flush()

    return show


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", default="demo_runs", help="where data, checkpoints and logs go (default: demo_runs)")
    parser.add_argument("--max-update", type=int, default=400, help="training updates per preset (default: 400)")
    parser.add_argument("--beam", type=int, default=5, help="beam size for fairseq-generate (default: 5)")
    args = parser.parse_args(argv)
    if args.max_update < 1:
        parser.error("--max-update must be >= 1")

    from ..data.synthetic import binarize_translation, write_translation_task

    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    data_bin = os.path.join(args.work_dir, "data-bin")
    print(f"fairseq_plugins demo: synthetic word-mapping translation task, {len(DEMO_ROWS)} presets, CPU")
    if not os.path.exists(os.path.join(data_bin, "dict.src.txt")):
        print("  generating and binarising data (fairseq-preprocess) ...", flush=True)
        raw_dir = write_translation_task(os.path.join(args.work_dir, "raw"))
        tmp_bin = data_bin + ".tmp"
        shutil.rmtree(tmp_bin, ignore_errors=True)
        binarize_translation(raw_dir, tmp_bin)
        os.replace(tmp_bin, data_bin)

    rows = []
    for label, arch, extra in DEMO_ROWS:
        save_dir = os.path.join(args.work_dir, "checkpoints", label.split(" (")[0].replace(" ", "_").replace(".", ""))
        shutil.rmtree(save_dir, ignore_errors=True)
        show = progress_bar(label, args.max_update)
        show(0)
        result = train(data_bin, save_dir, arch, TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + extra, max_update=args.max_update, on_update=show)
        show(args.max_update)
        decoded = generate(data_bin, result.checkpoint, beam=args.beam)
        print(f"  BLEU {decoded.bleu:6.2f}", flush=True)
        rows.append((label, arch, decoded.bleu, count_parameters(result.checkpoint), result.seconds, decoded.seconds))

    header = ("preset", "architecture", f"BLEU (beam {args.beam})", "parameters", "train time", "decode time")
    table = [header] + [(l, a, f"{b:.2f}", f"{p:,}", f"{t:.0f} s", f"{d:.1f} s") for l, a, b, p, t, d in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for i, row in enumerate(table):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(f"\nCheckpoints and logs: {os.path.abspath(args.work_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
