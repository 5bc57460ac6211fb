#!/usr/bin/env python
"""Whether exported sub-networks compute on a device what they compute inside their supernet.

    python benchmarks/supernet_export_parity.py --checkpoint SUPERNET.pt --device cuda \\
        --pair A.json A.pt --pair B.json B.pt [--subset valid] [--batches 4] [--atol 1e-4]

For every pair (an architecture JSON, as ``python -m fairseq_plugins.search sample`` prints it, and the
checkpoint ``search export`` wrote from it): the supernet, loaded on the CPU and then moved to ``--device``
(its cached sub-network templates must follow it), runs the architecture on the first ``--batches`` batches
of ``--subset`` in evaluation mode, and so does the exported model on the same device; printed per pair: the
largest absolute difference of the output logits and of the mean per-token losses (nats). Exits 1 when a
difference exceeds ``--atol`` (0 gives the CPU's exact equality; GPU matrix products of a slice and of a
standalone copy may sum in another order), 2 on bad input.
"""
import argparse
import json
import os
import sys

import torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="the supernet checkpoint (mixed_supertransformer)")
    parser.add_argument("--pair", nargs=2, action="append", required=True, metavar=("ARCHITECTURE", "EXPORTED"),
                        help="an architecture JSON file and the checkpoint `search export` wrote from it")
    parser.add_argument("--device", default="cuda", help="where both run (default: %(default)s)")
    parser.add_argument("--subset", default="valid", help="data subset (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=4, help="batches of the subset compared (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="tokens per batch (default: %(default)s)")
    parser.add_argument("--atol", type=float, default=1e-4, help="largest difference accepted (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in [args.checkpoint] + [p for pair in args.pair for p in pair]:
        if not os.path.isfile(path):
            parser.error(f"{path}: no such file")
    if args.batches < 1:
        parser.error(f"--batches must be >= 1, got {args.batches}")

    from fairseq import checkpoint_utils, utils

    from fairseq_plugins.search.subnetworks import load_supernet, read_architecture

    device = torch.device(args.device)
    supernet, task, _ = load_supernet(args.checkpoint)
    supernet = supernet.to(device).eval()
    task.load_dataset(args.subset)
    iterator = task.get_batch_iterator(dataset=task.dataset(args.subset), max_tokens=args.max_tokens,
                                       max_positions=utils.resolve_max_positions(task.max_positions(), supernet.max_positions()),
                                       ignore_invalid_inputs=False, seed=1).next_epoch_itr(shuffle=False)
    batches = [utils.move_to_cuda(b, device) if device.type == "cuda" else b for _, b in zip(range(args.batches), iterator)]
    failed = False
    for architecture_path, exported_path in args.pair:
        supernet.set_active(read_architecture(architecture_path, supernet))
        models, _ = checkpoint_utils.load_model_ensemble([exported_path], task=None)
        exported = models[0].to(device).eval()
        logits_diff = loss_diff = 0.0
        with torch.no_grad():
            for batch in batches:
                inside = supernet(**batch["net_input"])
                outside = exported(**batch["net_input"])
                logits_diff = max(logits_diff, (inside[0] - outside[0]).abs().max().item())
                losses = [torch.nn.functional.nll_loss(
                    model.get_normalized_probs(out, log_probs=True).flatten(0, 1).float(), batch["target"].flatten(),
                    ignore_index=task.target_dictionary.pad()) for model, out in ((supernet, inside), (exported, outside))]
                loss_diff = max(loss_diff, (losses[0] - losses[1]).abs().item())
        ok = logits_diff <= args.atol and loss_diff <= args.atol
        failed |= not ok
        print(json.dumps({"architecture": architecture_path, "exported": exported_path, "device": str(device),
                          "batches": len(batches), "max_logit_difference": logits_diff,
                          "max_loss_difference": loss_diff, "within_atol": ok}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
