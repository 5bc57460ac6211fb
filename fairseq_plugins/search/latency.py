"""Measured latency of a translation model as Hardware-Aware Transformers measures it: the encoder once,
then incremental beam-search decoding of a fixed number of steps, with fairseq's own ``SequenceGenerator``
(what fairseq-generate runs); threads pinned, warm-up runs discarded, a trimmed mean and the spread over
the timed runs. The step count is fixed (no end of sentence before it, one forced at it), so that every
model is timed on the same work whatever it would translate."""
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Dict, List

import torch

from ..modules import AttentionConfigError


# The command-line option of each setting (``python -m fairseq_plugins.search cost --latency``).
OPTIONS = {"source_length": "--source-length", "decoder_steps": "--target-length", "beam": "--beam",
           "threads": "--threads", "warmup": "--warmup", "repeats": "--repeats", "trim": "--trim"}


@dataclass(frozen=True)
class LatencySettings:
    source_length: int = 30
    decoder_steps: int = 30
    beam: int = 5
    threads: int = 1
    warmup: int = 3
    repeats: int = 10
    trim: float = 0.1  # the fraction of the fastest and of the slowest timed runs left out of the mean

    @classmethod
    def from_args(cls, args) -> "LatencySettings":
        """The settings of the command line's latency options (``OPTIONS``; decoder steps: --target-length)."""
        return cls(source_length=args.source_length, decoder_steps=args.target_length, beam=args.beam,
                   threads=args.threads, warmup=args.warmup, repeats=args.repeats, trim=args.trim)

    def check(self):
        for name in ("source_length", "decoder_steps", "beam", "threads", "repeats"):
            if getattr(self, name) < 1:
                raise AttentionConfigError(f"{OPTIONS[name]}: expected at least 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise AttentionConfigError(f"--warmup: expected 0 or more, got {self.warmup}")
        if not 0 <= self.trim < 0.5:
            raise AttentionConfigError(f"--trim: expected a fraction in [0, 0.5), got {self.trim}")


def trimmed(times: List[float], trim: float) -> List[float]:
    """``times`` sorted, without the ``trim`` fraction at each end."""
    cut = int(len(times) * trim)
    ordered = sorted(times)
    return ordered[cut:len(ordered) - cut]


def measure_latency(model, dictionary, settings: LatencySettings, seed: int = 1, device: str = "cpu") -> Dict:
    """Seconds per sentence of one source sentence of ``settings.source_length`` random tokens translated
    with beam ``settings.beam`` for exactly ``settings.decoder_steps`` tokens (+ the end of sentence), on
    ``device`` (cuda: the model is moved there and every run ends with a synchronisation)."""
    from fairseq.sequence_generator import SequenceGenerator

    settings.check()
    max_steps = model.max_decoder_positions() - 1
    if settings.decoder_steps > max_steps:
        raise AttentionConfigError(f"--target-length: {settings.decoder_steps} is more than the model's {max_steps} target positions")
    if settings.source_length > model.max_positions()[0]:
        raise AttentionConfigError(f"--source-length: {settings.source_length} is more than the model's {model.max_positions()[0]} "
                         "source positions")
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda and not torch.cuda.is_available():
        raise AttentionConfigError(f"--device {device}: no CUDA device is available")
    model = model.eval().to(device)
    generator = SequenceGenerator([model], dictionary, beam_size=settings.beam, min_len=settings.decoder_steps,
                                  max_len_a=0, max_len_b=settings.decoder_steps)
    rng = torch.Generator().manual_seed(seed)
    source = torch.randint(dictionary.nspecial, len(dictionary), (1, settings.source_length), generator=rng)
    source[0, -1] = dictionary.eos()
    sample = {"net_input": {"src_tokens": source.to(device), "src_lengths": torch.tensor([settings.source_length], device=device)}}

    calls = []
    # (fairseq calls decoder.forward directly, which runs no hooks: count the first layer's calls)
    hook = model.decoder.layers[0].register_forward_hook(lambda *_: calls.append(1))
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    times = []
    try:
        with torch.no_grad():
            for run in range(settings.warmup + settings.repeats):
                calls.clear()
                start = time.perf_counter()
                generator.forward(sample)
                if on_cuda:
                    torch.cuda.synchronize(device)
                elapsed = time.perf_counter() - start
                if run >= settings.warmup:
                    times.append(elapsed)
    finally:
        torch.set_num_threads(threads)
        hook.remove()
    kept = trimmed(times, settings.trim)
    return {**asdict(settings), "device": device, "decoder_calls": len(calls), "latency_ms": 1000 * statistics.fmean(kept),
            "stdev_ms": 1000 * (statistics.stdev(kept) if len(kept) > 1 else 0.0),
            "min_ms": 1000 * min(times), "max_ms": 1000 * max(times)}
