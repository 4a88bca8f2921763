"""tensorflow-datasets translation datasets, offline through tfds.testing.mock_data."""

import pytest
import tensorflow_datasets as tfds

from keras_transformer.data import load_tfds, make_batches, pipeline_report


@pytest.mark.parametrize(
    "name, source, target",
    [("ted_hrlr_translate/pt_to_en", "pt", "en"), ("wmt14_translate/de-en", "de", "en")],
)
def test_tfds_translation_dataset_in_both_directions(name, source, target):
    with tfds.testing.mock_data(num_examples=6):
        reference = list(tfds.load(name, split="train").as_numpy_iterator())
        forward = list(load_tfds(name, "train").as_numpy_iterator())
        backward = list(load_tfds(name, "train", source_language=target).as_numpy_iterator())
    assert forward == [(example[source], example[target]) for example in reference]
    assert backward == [(t, s) for s, t in forward]


def test_tfds_pairs_feed_the_batching_pipeline(tokenizer):
    with tfds.testing.mock_data(num_examples=20):
        pairs = load_tfds("wmt14_translate/de-en", "validation", shuffle_files=True)
        report = pipeline_report(pairs, tokenizer, tokens_per_batch=4000, max_length=200)
        batches = list(
            make_batches(
                pairs, tokenizer, tokens_per_batch=4000, max_length=200
            ).as_numpy_iterator()
        )
    assert report.read == 20 and report.kept + sum(report.dropped.values()) == 20
    assert sum(len(target_out) for _, target_out in batches) == report.kept > 0


def test_unknown_dataset_and_language():
    with pytest.raises(
        ValueError, match="tensorflow-datasets has no dataset 'wmt99_translate/xx-yy'"
    ):
        load_tfds("wmt99_translate/xx-yy", "train")
    with pytest.raises(ValueError, match=r"has languages \['de', 'en'\]; source_language='fr'"):
        load_tfds("wmt14_translate/de-en", "train", source_language="fr")
