"""Every parameter of the mixed presets takes part in the forward pass.

Stock fairseq's pytorch_ddp backend (DistributedDataParallel on GPUs) fails
when some parameter gets no gradient, unless --find-unused-parameters is set.
The models are built the way fairseq-train builds them: parser, task, model.
"""
import os

import pytest
import torch
from fairseq import options, tasks

import fairseq_plugins
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("translation")
    raw = write_translation_task(str(root / "raw"), splits={"train": 32, "valid": 8, "test": 8})
    return binarize_translation(raw, str(root / "data-bin"))


@pytest.mark.parametrize("arch", ["mformer_iwslt_de_en", "cosformer_iwslt_de_en"])
def test_every_parameter_gets_a_gradient(data_bin, arch):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        input_args=[
            data_bin, "--user-dir", PLUGIN_DIR, "--task", "translation", "--arch", arch, "--cpu",
            # shrunk; 6 encoder layers (mformer_iwslt_de_en lists 6 encoder attention kinds)
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--decoder-layers", "2",
            "--dropout", "0.1", "--attention-dropout", "0.1",
        ],
    )
    torch.manual_seed(0)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    task.load_dataset("train")
    dataset = task.dataset("train")
    sample = dataset.collater([dataset[i] for i in range(8)])
    assert sample["net_input"]["src_tokens"].eq(task.source_dictionary.pad()).any(), "the batch should contain padding"

    model.train()
    loss, sample_size, _ = criterion(model, sample)
    loss.backward()

    params = dict(model.named_parameters())
    assert any(".self_attn." in name for name in params)
    no_grad = [name for name, p in params.items() if p.requires_grad and p.grad is None]
    assert not no_grad, f"{arch}: parameters unused in forward: {no_grad}"
    assert all(torch.isfinite(p.grad).all() for p in params.values() if p.requires_grad)
