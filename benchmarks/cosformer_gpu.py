#!/usr/bin/env python
"""cosFormer's algorithms on a GPU: parity of every path, training speed against PyTorch's flash SDPA and
fla-core, decoding cost per token against softmax attention.

Three parts, each kind in one process of its own (``--worker``: a kind's cells share its warm-up and
compiled kernels instead of a fresh process per cell):

* **parity**: every algorithm of the one signature (``fairseq_plugins/modules/cosformer/algorithms.py``:
  chunked, fused, recurrent, fused_recurrent) and fla-core's ``chunk_linear_attn(normalize=True)`` on the
  device, float32 and bfloat16 inputs, against the naive reference in float64 on the CPU: output, final
  state and the gradients of q, k, v (largest error relative to the reference's largest entry);
* **train**: forward+backward of the attention core (B = 1, 8 heads, head dim 64; q, k, v given, no
  projections) per T, in bf16 and fp32 (TF32 off): cosFormer fused (bf16 inputs go in as they are; the
  kernels accumulate in float32), cosFormer chunked (gets float32, as the module under --amp), PyTorch SDPA
  causal (flash backend in bf16; fp32 has no flash kernel: PyTorch's default choice), fla-core
  ``chunk_linear_attn(q', k', v, normalize=True)`` on q' = [relu(q) cos, relu(q) sin] (k' likewise), the
  same function as cosFormer (only where ``fla`` imports; otherwise "not measured");
* **decode**: one decoder self-attention layer (d = 512, 8 heads) per generated token after a prefix of P
  tokens, at batch 1 and at beam 5 x batch 32 (160 rows, the beam reorder of the cache or state every
  step, as fairseq's search does): cosFormer fused (the fused step kernel), cosFormer torch (recurrent) and
  softmax (fairseq's MultiheadAttention key cache).

    python benchmarks/cosformer_gpu.py --device cuda --output OUT.md
    python benchmarks/cosformer_gpu.py --device cpu --lengths 32 --prefixes 8 --beams 1,2x2 --heads 2 --head-dim 16

On ``--device cpu`` the Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1, set here): a smoke
run of the script itself (tiny sizes), never a measurement. Exits 1 when a parity check fails.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

if __name__ == "__main__" and "cpu" in " ".join(sys.argv[1:]).replace("=", " ").split():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: the kernels run on CPU tensors

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if __package__ in (None, ""):  # run by path: make the checkout importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN_KINDS = ("cosformer_fused", "cosformer_chunked", "sdpa", "fla_chunk_linear_attn")
DECODE_KINDS = ("cosformer_fused", "cosformer_torch", "softmax")
PARITY_PATHS = ("chunked", "fused", "recurrent", "fused_recurrent", "fla_chunk_linear_attn")
PARITY_TOL = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 3e-3}  # relative to the reference's largest entry (bf16, fp16: the inputs' rounding)
ROW = "ROW "  # a worker's result line, printed as each cell finishes
EPS = 1e-6
PREFIX_PIECE = 256  # decoding: the prefix enters the cache or state this many tokens at a time


def emit(row):
    """Print one finished cell at once (``launch`` keeps the cells of a worker cut short by its time limit)."""
    print(ROW + json.dumps(row), flush=True)
    return row


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats):
    """Median seconds of ``repeats`` calls after one warm-up call (which compiles kernels)."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def core_inputs(batch, heads, length, dim, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, length, dim, generator=gen) for _ in range(3))
    angle = (torch.arange(length, dtype=torch.float64) * (math.pi / 2) / length).view(1, 1, length, 1).expand(batch, 1, length, 1)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v)] + [angle.to(device=device, dtype=torch.float32).contiguous()]


def fla_op():
    """fla-core's chunk_linear_attn, or the reason it is not measured."""
    try:
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception as exc:  # not installed, or no GPU build
        return None, f"not measured: fla-core does not import ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return chunk_linear_attn, None


def fla_cosformer(op, q, k, v, angle):
    """cosFormer as fla's normalised linear attention: q' = [relu(q) cos, relu(q) sin] (k' likewise), B,T,H,2D."""
    qf, kf = F.relu(q), F.relu(k)
    q2 = torch.cat([qf * torch.cos(angle), qf * torch.sin(angle)], dim=-1).transpose(1, 2)
    k2 = torch.cat([kf * torch.cos(angle), kf * torch.sin(angle)], dim=-1).transpose(1, 2)
    out = op(q2, k2, v.transpose(1, 2), scale=1.0, normalize=True)
    out = out[0] if isinstance(out, tuple) else out
    return out.transpose(1, 2)


def train_step(kind, q, k, v, angle, device):
    """A closure: forward+backward of ``kind`` on leaf copies of q, k, v (or the reason it cannot run)."""
    from fairseq_plugins.modules.cosformer.algorithms import ALGORITHMS

    horizon = q.size(2)
    if kind == "cosformer_chunked":
        q, k, v = (t.float() for t in (q, k, v))  # as the module under --amp: the attention in float32
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    if kind in ("cosformer_fused", "cosformer_chunked"):
        name = "fused" if kind == "cosformer_fused" else "chunked"

        def forward():
            return ALGORITHMS[name](*leaves, None, angle=angle, horizon=horizon, eps=EPS)[0]
    elif kind == "sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        flash = device.type == "cuda" and q.dtype != torch.float32  # fp32: no flash kernel, PyTorch's own choice

        def forward():
            if flash:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return F.scaled_dot_product_attention(*leaves, is_causal=True)
            return F.scaled_dot_product_attention(*leaves, is_causal=True)
    else:
        op, reason = fla_op()
        if op is None:
            return reason

        def forward():
            return fla_cosformer(op, *leaves, angle)

    def step():
        for t in leaves:
            t.grad = None
        out = forward()
        out.backward(torch.ones_like(out))

    return step


def worker_train(spec):
    device = torch.device(spec["device"])
    rows = []
    for dtype_name in spec["dtypes"]:
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
        for length in spec["lengths"]:
            q, k, v, angle = core_inputs(spec["batch"], spec["heads"], length, spec["head_dim"], dtype, device)
            try:
                step = train_step(spec["kind"], q, k, v, angle, device)
                result = step if isinstance(step, str) else timed(step, device, spec["repeats"])
            except Exception as exc:  # out of memory, a backend the dtype lacks: said in the report, the run goes on
                result = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
            if device.type == "cuda":
                torch.cuda.empty_cache()
            rows.append(emit({"dtype": dtype_name, "length": length, "result": result}))
    return rows


def decode_layer(kind, device, embed, heads, horizon):
    import argparse as _argparse

    from fairseq_plugins.modules import DECODER_SELF, build_attention

    options = {"cosformer_fused": "fused", "cosformer_torch": "chunked"}
    cfg = _argparse.Namespace(max_target_positions=horizon, max_source_positions=horizon, cosformer_max_positions=None,
                              cosformer_algorithm=options.get(kind, "auto"))
    torch.manual_seed(0)
    return build_attention("softmax" if kind == "softmax" else "cosformer", DECODER_SELF, embed, heads, cfg).to(device).eval()


def worker_decode(spec):
    """ms per generated token after each prefix, per batch configuration ("1", or "BEAMxBATCH")."""
    device = torch.device(spec["device"])
    rows = []
    horizon = max(spec["prefixes"]) + spec["steps"] + 2
    module = decode_layer(spec["kind"], device, spec["embed"], spec["heads"], horizon)
    for config in spec["beams"]:
        beam, batch = (int(x) for x in config.split("x")) if "x" in config else (1, int(config))
        rows_n = beam * batch
        for prefix in spec["prefixes"]:
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                x = torch.randn(prefix + spec["steps"] + 1, rows_n, spec["embed"], generator=gen).to(device)
                state = {}
                for t in range(0, prefix, PREFIX_PIECE):  # (a full pass of softmax's prefix holds B*H*P*P weights)
                    piece = x[t : min(t + PREFIX_PIECE, prefix)]
                    module(piece, piece, piece, incremental_state=state, need_weights=False)
                position = [prefix]

                def step():
                    t = position[0]
                    if beam > 1:  # fairseq's beam search: each row continues one of its sentence's beams
                        order = (torch.arange(batch, device=device).repeat_interleave(beam) * beam
                                 + torch.randint(0, beam, (rows_n,), device=device))
                        module.reorder_incremental_state(state, order)
                    module(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state, need_weights=False)
                    position[0] = t + 1

                step()  # warm-up (compiles the step kernel)
                sync(device)
                start = time.perf_counter()
                for _ in range(spec["steps"]):
                    step()
                sync(device)
                rows.append(emit({"config": config, "prefix": prefix, "result": (time.perf_counter() - start) / spec["steps"]}))
    return rows


def worker_parity(spec):
    """Largest relative errors of every path against the naive reference in float64 on the CPU."""
    from fairseq_plugins.modules.cosformer.algorithms import ALGORITHMS

    device = torch.device(spec["device"])
    batch, heads, length, dim = 2, 2, spec["length"], spec["head_dim"]
    q, k, v, angle = core_inputs(batch, heads, length, dim, torch.float64, torch.device("cpu"), seed=3)
    pad = torch.zeros(batch, length, dtype=torch.bool)
    pad[1, -length // 4:] = True
    upstream = torch.randn(batch, heads, length, dim, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    rows = []
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        # the reference sees the inputs as rounded to dtype
        ref_in = [t.to(dtype).double() for t in (q, k, v)]
        reference = _with_grads(lambda a, b, c: ALGORITHMS["naive"](a, b, c, None, angle=angle.double(), horizon=length,
                                                                     eps=EPS, key_padding_mask=pad), ref_in, upstream)
        for path in spec.get("paths", PARITY_PATHS):
            dev_in = [t.to(dtype).to(device) for t in (q, k, v)]
            if path == "fla_chunk_linear_attn":
                op, reason = fla_op()
                if op is None:
                    rows.append({"dtype": dtype_name, "path": path, "result": reason})
                    continue
                # fla has no key padding: compare the unpadded row only
                fn = lambda a, b, c: (fla_cosformer(op, a, b, c, angle.to(device)), None)  # noqa: E731
            else:
                fn = lambda a, b, c, _p=path: ALGORITHMS[_p](a, b, c, None, angle=angle.to(device), horizon=length, eps=EPS,  # noqa: E731
                                                             key_padding_mask=pad.to(device))
            try:
                got = _with_grads(fn, dev_in, upstream.to(device), grads=path != "fused_recurrent")
            except Exception as exc:
                rows.append({"dtype": dtype_name, "path": path, "result": f"failed: {type(exc).__name__}: {exc}"[:200]})
                continue
            keep = slice(0, 1) if path == "fla_chunk_linear_attn" else slice(None)
            real = (~pad)[keep, None, :, None].double()
            errors = {}
            for name, a, b in zip(("o", "final_state", "dq", "dk", "dv"), got, reference):
                if a is None:
                    continue
                a, b = a.double().cpu()[keep], b[keep]
                if name == "o":
                    a, b = a * real, b * real
                errors[name] = float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
            rows.append({"dtype": dtype_name, "path": path, "result": errors,
                         "ok": all(e < PARITY_TOL[dtype_name] for e in errors.values())})
    return rows


def _with_grads(fn, inputs, upstream, grads=True):
    leaves = [t.detach().clone().requires_grad_(grads) for t in inputs]
    with torch.set_grad_enabled(grads):
        out, final = fn(*leaves)
    if not grads:
        return [out.detach(), final.detach() if final is not None else None]
    g = torch.autograd.grad((out.double() * upstream.double()).sum(), leaves)
    return [out.detach(), final.detach() if final is not None else None] + list(g)


WORKERS = {"parity": worker_parity, "train": worker_train, "decode": worker_decode}


def launch(spec, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # the cells it finished count; the others say "not measured"
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rows = [json.loads(line[len(ROW):]) for line in out.splitlines() if line.startswith(ROW)]
        return rows if rows else f"timed out after {timeout} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("["):
            return json.loads(line)
    rows = [json.loads(line[len(ROW):]) for line in proc.stdout.splitlines() if line.startswith(ROW)]
    if rows:  # failed part-way: the cells it finished count
        return rows
    return f"no result (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}"[:300]


def fmt(result):
    if isinstance(result, str):
        return result
    return f"{result * 1e3:.3f} ms" if result >= 1e-3 else f"{result * 1e6:.0f} µs"


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda[:i], or cpu (a smoke run under Triton's interpreter)")
    parser.add_argument("--parts", default="parity,train,decode", help="comma-separated subset of parity,train,decode")
    parser.add_argument("--lengths", default="256,512,1024,2048,4096,8192,16384", help="T of the training part")
    parser.add_argument("--dtypes", default="bf16,fp32", help="of the training part")
    parser.add_argument("--prefixes", default="128,512,1024,2048,4096", help="decoding prefixes")
    parser.add_argument("--beams", default="1,5x32", help="decoding batch configurations: B, or BEAMxB (beam reorder every step)")
    parser.add_argument("--paths", default=",".join(PARITY_PATHS), help="of the parity part, a comma-separated subset of " + ",".join(PARITY_PATHS))
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per training cell (median)")
    parser.add_argument("--steps", type=int, default=50, help="timed decoding steps per prefix")
    parser.add_argument("--timeout", type=int, default=90, help="seconds per worker process (one per kind and part)")
    parser.add_argument("--output", help="also write the markdown report here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        if spec["device"].startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        print(json.dumps(WORKERS[spec["part"]](spec)))
        return 0
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        parser.error(f"--device {args.device}: {exc}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if device.type not in ("cuda", "cpu"):
        parser.error(f"--device must be cpu or cuda[:i], got {args.device}")
    parts = [p for p in args.parts.split(",") if p]
    paths = [p for p in args.paths.split(",") if p]
    if not paths or any(p not in PARITY_PATHS for p in paths):
        parser.error(f"--paths must be a non-empty subset of {','.join(PARITY_PATHS)}, got {args.paths}")
    if any(p not in WORKERS for p in parts):
        parser.error(f"--parts must be a subset of {','.join(WORKERS)}, got {args.parts}")
    for beam in args.beams.split(","):
        if not all(x.isdigit() for x in beam.split("x")) or beam.count("x") > 1:
            parser.error(f"--beams: B or BEAMxB, comma-separated, got {args.beams}")

    common = {"device": args.device, "heads": args.heads, "head_dim": args.head_dim}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (Triton interpreter: a smoke run, no timings to keep)"
    lines = [f"# cosFormer on {name}", "", f"`{' '.join(['python', 'benchmarks/cosformer_gpu.py'] + (argv if argv is not None else sys.argv[1:]))}`", ""]
    failed = False

    def flush():  # after every part: what finished survives a run cut short (a lent GPU's time limit)
        if args.output:
            tmp = args.output + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(tmp, args.output)

    if "parity" in parts:
        rows = launch({**common, "part": "parity", "length": 200 if device.type == "cuda" else 24, "paths": paths}, args.timeout)
        lines += [f"## Parity against the naive reference (float64, CPU): B = 2, 2 heads, head dimension {args.head_dim}", "", "| path | dtype | largest relative errors | ok |", "|---|---|---|---|"]
        if isinstance(rows, str):
            lines.append(f"| all | - | {rows} | no |")
            failed = True
        else:
            for row in rows:
                res = row["result"]
                text = res if isinstance(res, str) else ", ".join(f"{k} {v:.1e}" for k, v in res.items())
                ok = row.get("ok")
                # fla is an anchor, not ours: its errors are reported, not held against this run
                failed |= ok is False and row["path"] != "fla_chunk_linear_attn" or (isinstance(res, str) and res.startswith("failed") and row["path"] != "fla_chunk_linear_attn")
                lines.append(f"| {row['path']} | {row['dtype']} | {text} | {'-' if ok is None else ('yes' if ok else 'NO')} |")
        lines.append("")
        flush()
    if "train" in parts:
        lengths = _ints(args.lengths)
        results = {kind: launch({**common, "part": "train", "kind": kind, "lengths": lengths, "dtypes": args.dtypes.split(","),
                                 "batch": 1, "repeats": args.repeats}, args.timeout) for kind in TRAIN_KINDS}
        lines += [f"## Forward+backward, attention core (B = 1, {args.heads} heads, head dim {args.head_dim}), median of {args.repeats}", "",
                  "| dtype | T | " + " | ".join(TRAIN_KINDS) + " |", "|---|---|" + "---|" * len(TRAIN_KINDS)]
        for dtype in args.dtypes.split(","):
            for length in lengths:
                cells = []
                for kind in TRAIN_KINDS:
                    rows = results[kind]
                    if isinstance(rows, str):
                        cells.append(rows)
                        continue
                    cells.append(next((fmt(r["result"]) for r in rows if r["dtype"] == dtype and r["length"] == length), "not measured"))
                lines.append(f"| {dtype} | {length} | " + " | ".join(cells) + " |")
        lines.append("")
        flush()
    if "decode" in parts:
        prefixes, beams = _ints(args.prefixes), args.beams.split(",")
        results = {kind: launch({**common, "part": "decode", "kind": kind, "prefixes": prefixes, "beams": beams, "steps": args.steps,
                                 "embed": args.heads * args.head_dim}, args.timeout) for kind in DECODE_KINDS}
        lines += [f"## Decoding, one decoder self-attention layer (d = {args.heads * args.head_dim}), time per token "
                  f"({args.steps} steps; beam configurations reorder the state every step)", "",
                  "| batch | prefix | " + " | ".join(DECODE_KINDS) + " |", "|---|---|" + "---|" * len(DECODE_KINDS)]
        for config in beams:
            for prefix in prefixes:
                cells = []
                for kind in DECODE_KINDS:
                    rows = results[kind]
                    cells.append(rows if isinstance(rows, str) else next(
                        (fmt(r["result"]) for r in rows if r["config"] == config and r["prefix"] == prefix), "not measured"))
                lines.append(f"| {config} | {prefix} | " + " | ".join(cells) + " |")
        lines.append("")
    flush()
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
