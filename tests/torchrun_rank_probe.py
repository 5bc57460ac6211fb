"""Test infrastructure, not part of the plugin: torchrun's training script in the distributed tests, in place of
``fairseq_plugins/cli/_rank_main.py``, which it then runs with what only a test needs added::

    torchrun ... tests/torchrun_rank_probe.py [--dump-final-params DIR] [--fail-rank R --fail-after-updates K] \\
        -- <fairseq-train arguments>

* ``--dump-final-params DIR``: every rank saves its final model state to ``DIR/rank{R}.pt`` = {"rank",
  "world_size", "num_updates", "model"}, rank and world size as torch.distributed sees them (so that a test can
  tell one data-parallel run from N independent ones). fairseq saves checkpoints only on rank 0 and keeps its
  Trainer local to ``fairseq_cli.train.main``: the probe replaces two names of ``fairseq_cli.train``, ``Trainer``
  by a subclass that records the instance ``main`` builds, and ``main`` by a function that calls the original
  and then saves (in the rank, before fairseq's final barrier, with the process group still up).
* ``--fail-rank R --fail-after-updates K``: rank R raises ``RuntimeError("injected failure on rank R ...")``
  at its train step after K updates.

Every rank prints ``probe: rank R pid P`` to stderr, so that a test can check that the process is gone.
"""
import argparse
import os
import runpy
import sys

RANK_MAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_plugins", "cli",
                         "_rank_main.py")


def dump_final_params(trainer, dump_dir):
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    payload = {"rank": rank, "world_size": dist.get_world_size(), "num_updates": trainer.get_num_updates(),
               # get_model(): the model without the data-parallel wrapper
               "model": {name: t.detach().cpu().clone() for name, t in trainer.get_model().state_dict().items()}}
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, f"rank{rank}.pt")
    torch.save(payload, path + ".tmp")
    os.replace(path + ".tmp", path)


def install(options):
    import fairseq_cli.train as fairseq_train

    trainers = []
    base_trainer, train_main = fairseq_train.Trainer, fairseq_train.main

    class ProbeTrainer(base_trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

        def train_step(self, *args, **kwargs):
            if self.data_parallel_rank == options.fail_rank and self.get_num_updates() >= options.fail_after_updates:
                raise RuntimeError(f"injected failure on rank {options.fail_rank} after {self.get_num_updates()} updates")
            return super().train_step(*args, **kwargs)

    ProbeTrainer.__name__ = ProbeTrainer.__qualname__ = base_trainer.__name__

    def main_then_dump(cfg, **kwargs):
        train_main(cfg, **kwargs)
        assert len(trainers) == 1, f"expected fairseq-train to build one Trainer, saw {len(trainers)}"
        if options.dump_final_params:
            dump_final_params(trainers[0], options.dump_final_params)

    fairseq_train.Trainer = ProbeTrainer
    fairseq_train.main = main_then_dump


def main():
    separator = sys.argv.index("--")
    parser = argparse.ArgumentParser(prog="torchrun_rank_probe")
    parser.add_argument("--dump-final-params")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-after-updates", type=int, default=0)
    options = parser.parse_args(sys.argv[1:separator])
    print(f"probe: rank {os.environ['RANK']} pid {os.getpid()}", file=sys.stderr, flush=True)
    install(options)
    sys.argv = [RANK_MAIN, *sys.argv[separator + 1:]]
    runpy.run_path(RANK_MAIN, run_name="__main__")


if __name__ == "__main__":
    main()
