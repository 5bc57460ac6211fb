"""--encoder-decoder-connect through fairseq's real CLIs: a few updates of fairseq-train with decoder
layers attending to the last 1 and 2 encoder layers (softmax and cosFormer encoder-decoder attention),
then fairseq-generate beam-decodes the test set (incremental decoding, beam reordering of encoder_states),
also with --print-alignment (the last layer, k = 2: alignments over the S source positions)."""
from fairseq_plugins.cli.pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, generate, train
from fairseq_plugins.cli.synthetic import binarize_translation, write_translation_task

from fairseq_plugins.models.architecture import architecture_of_checkpoint


def test_connect_trains_and_beam_decodes(tmp_path):
    write_translation_task(str(tmp_path / "raw"))
    data_bin = binarize_translation(str(tmp_path / "raw"), str(tmp_path / "bin"))
    result = train(data_bin, str(tmp_path / "checkpoints"), "mixed_transformer_iwslt_de_en",
                   TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + [
                       "--encoder-layers", "2", "--decoder-layers", "2", "--cross-attention-kinds", "softmax,cosformer",
                       "--encoder-decoder-connect", "1,2"], max_update=3)
    architecture = architecture_of_checkpoint(result.checkpoint)
    assert [layer.encoder_decoder_connect for layer in architecture.decoder_layers] == [1, 2]
    decoded = generate(data_bin, result.checkpoint, beam=4)
    assert len(decoded.hypotheses) == 100
    aligned = generate(data_bin, result.checkpoint, beam=4, extra=["--print-alignment"])
    alignments = [line.split("\t") for line in aligned.log.splitlines() if line.startswith("A-")]
    sources = {line.split("\t")[0][2:]: line.split("\t")[1] for line in aligned.log.splitlines() if line.startswith("S-")}
    assert len(alignments) == 100
    for name, pairs in alignments:
        source_length = len(sources[name[2:]].split()) + 1  # with </s>
        assert all(0 <= int(pair.split("-")[0]) < source_length for pair in pairs.split())
