"""The hub interface translates raw text: ``from_pretrained(..., tokenizer="moses",
bpe="subword_nmt", bpe_codes=...)`` with the files the project's own
preparation writes (data_prep.multi30k, cased: ``--keep-case``) tokenises and
BPE-encodes an untokenised, cased sentence, and gives back the detokenised,
cased translation.

The data is a word-for-word code between German-like and English-like words
(first word capitalised, commas, quotes, a hyphenated compound), which a tiny
model learns in a few hundred updates, so the expected output is known."""
import os
import random
import sys

import pytest

from fairseq_plugins.cli.pipeline import TINY_TRANSLATION_SIZES, TRANSLATION_TRAINING, PLUGIN_DIR, train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # data_prep/ is a folder of scripts, not an installed package
    sys.path.insert(0, ROOT)

WORDS = {  # German-like (nouns capitalised, as in German) -> English-like, one word each
    "Hund": "dog", "Katze": "cat", "Kind": "child", "Frau": "woman", "Mann": "man", "Vogel": "bird",
    "sieht": "sees", "mag": "likes", "ruft": "calls", "den": "the", "einen": "a", "heute": "today",
    "Fußball-Spiel": "football-match", "Garten": "garden", "Straße": "street",
}
# English with the full stop inside the quotes, as the preparation's Moses punctuation normalisation
# (normalize-punctuation.perl -l en) writes it: the references the model learns are then the raw text
QUOTE = (', sagt "Anna".', ', says "Anna."')


def sentence_pair(rng: random.Random):
    """2-4 words in the same order, the first capitalised, then a full stop, ! or ? or a quote."""
    words = [rng.choice(list(WORDS)) for _ in range(rng.randint(2, 4))]
    de, en = list(words), [WORDS[w] for w in words]
    de[0], en[0] = de[0][0].upper() + de[0][1:], en[0][0].upper() + en[0][1:]
    de, en = " ".join(de), " ".join(en)
    if rng.random() < 0.3:
        return de + QUOTE[0], en + QUOTE[1]
    mark = rng.choice(".!?")
    return de + mark, en + mark


def write_raw(raw_dir: str):
    """Multi30k's raw release files (train, val, test_2016_flickr), untokenised and cased."""
    os.makedirs(raw_dir)
    rng = random.Random(7)
    for name, size in (("train", 2000), ("val", 20), ("test_2016_flickr", 20)):
        pairs = [sentence_pair(rng) for _ in range(size)]
        for side, lang in ((0, "de"), (1, "en")):
            with open(os.path.join(raw_dir, f"{name}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(p[side] + "\n" for p in pairs)


def test_hub_translates_raw_cased_text_with_the_preparations_files(tmp_path, monkeypatch):
    from data_prep import multi30k

    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    write_raw(str(tmp_path / "raw"))
    dest = str(tmp_path / "data-bin")
    multi30k.main(["--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest", dest,
                   "--no-download", "--workers", "1", "--keep-case", "--bpe-merges", "120"])
    codes = os.path.join(dest, "code")  # the BPE codes the preparation writes next to the binaries
    assert os.path.isfile(codes)

    # one thread: the same sums in the same order on every machine (the model it trains does not depend
    # on the core count), and no OpenMP threads spinning against each other on a loaded 2-core machine
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    result = train(dest, str(tmp_path / "checkpoints"), "mixed_transformer_iwslt_de_en",
                   TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES
                   + ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-attention-kinds", "softmax,cosformer",
                      "--max-tokens", "1000"],
                   max_update=300)

    hub = MixedTransformerModel.from_pretrained(
        os.path.dirname(result.checkpoint), checkpoint_file=os.path.basename(result.checkpoint), data_name_or_path=dest,
        tokenizer="moses", bpe="subword_nmt", bpe_codes=codes,
        # as the preparation tokenised: Moses' German and English rules (fairseq's tokenizer defaults to
        # English for both), hyphenated words kept whole (Multi30k and IWSLT14 run Moses without -a)
        source_lang="de", target_lang="en", moses_no_dash_splits=True,
        user_dir=PLUGIN_DIR,
    )
    hub.eval()
    sources = ['Einen Hund ruft heute, sagt "Anna".', "Den Mann mag Fußball-Spiel!"]
    expected = ['A dog calls today, says "Anna."', "The man likes football-match!"]

    # raw text really goes through Moses and BPE: punctuation split off, quotes escaped, the hyphenated
    # word kept whole as the preparation did, a capitalised first word cut into subwords (120 merges
    # leave the rarer capitalised forms split: "E@@ inen", and on the target side "T@@ he")
    encoded = [hub.apply_bpe(hub.tokenize(source)) for source in sources]
    assert encoded == ["E@@ inen Hund ruft heute , sagt &quot; Anna &quot; .", "D@@ en Mann mag Fußball-Spiel !"]
    for line in encoded:
        assert hub.src_dict.unk() not in hub.binarize(line).tolist(), line

    assert hub.translate(sources[0], beam=5) == expected[0]
    assert hub.translate(sources, beam=5) == expected


def test_hub_prepares_input_as_the_lower_casing_preparation_did(tmp_path, monkeypatch):
    """Multi30k's preparation lower-cases (its default): prepare.json says so, and the hub lower-cases a
    cased sentence after Moses as the preparation did, so that it meets the words the model knows; with
    prepare_input=False the hub is fairseq's, and the capitalised words are unknown to the model."""
    from data_prep import multi30k

    from fairseq_plugins.hub import InputPreparation, PreparedInputHubInterface
    from fairseq_plugins.models.mixed_transformer import MixedTransformerModel

    write_raw(str(tmp_path / "raw"))
    dest = str(tmp_path / "data-bin")
    multi30k.main(["--raw-dir", str(tmp_path / "raw"), "--work-dir", str(tmp_path / "work"), "--dest", dest,
                   "--no-download", "--workers", "1", "--bpe-merges", "120"])
    assert InputPreparation.of_data(dest, "de") == InputPreparation("de", normalize_punctuation=True, lowercase=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = train(dest, str(tmp_path / "checkpoints"), "mixed_transformer_iwslt_de_en",
                   TRANSLATION_TRAINING + TINY_TRANSLATION_SIZES + ["--encoder-layers", "1", "--decoder-layers", "1"],
                   max_update=1)
    options = dict(checkpoint_file=os.path.basename(result.checkpoint), data_name_or_path=dest, tokenizer="moses",
                   bpe="subword_nmt", bpe_codes=os.path.join(dest, "code"), source_lang="de", target_lang="en",
                   moses_no_dash_splits=True, user_dir=PLUGIN_DIR)
    hub = MixedTransformerModel.from_pretrained(os.path.dirname(result.checkpoint), **options)
    assert isinstance(hub, PreparedInputHubInterface)
    cased, lower = "Den Mann mag Fußball-Spiel!", "den mann mag fußball-spiel!"
    assert hub.tokenize(cased) == "den mann mag fußball-spiel !"
    assert hub.encode(cased).tolist() == hub.encode(lower).tolist()
    assert hub.src_dict.unk() not in hub.encode(cased).tolist()
    # the punctuation normalisation of the preparation (normalize-punctuation.perl) comes first
    assert hub.tokenize("Den  Mann „heute“") == hub.tokenize('den mann "heute"')
    plain = MixedTransformerModel.from_pretrained(os.path.dirname(result.checkpoint), prepare_input=False, **options)
    assert plain.tokenize(cased) == "Den Mann mag Fußball-Spiel !"
    assert hub.src_dict.unk() in plain.encode(cased).tolist()  # "Den", "Mann": never seen capitalised
    assert isinstance(hub.translate(cased, beam=2), str)
    # fairseq-interactive: --tokenizer moses_prepared applies the same steps
    from fairseq_plugins.cli.pipeline import fairseq_command, run

    interactive = fairseq_command("interactive") + [
        dest, "--user-dir", PLUGIN_DIR, "--path", result.checkpoint, "--cpu", "--beam", "2", "-s", "de", "-t", "en",
        "--tokenizer", "moses_prepared", "--moses-preparation-file", os.path.join(dest, "prepare.json"),
        "--moses-no-dash-splits", "--bpe", "subword_nmt", "--bpe-codes", os.path.join(dest, "code")]
    log = run(interactive, input_text=cased + "\n")
    sources = [line.split("\t", 1)[1] for line in log.splitlines() if line.startswith("S-")]
    assert sources == [hub.apply_bpe(hub.tokenize(cased))]  # as the hub encodes it: lower-cased, no <unk>
