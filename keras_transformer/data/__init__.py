"""Sentence pairs from tensorflow-datasets, local files and the embedded Ding corpus, and the
length-bucketed, token-budgeted batches of §5.1: built by tf.data (`batching`), or from binarized
data by numpy alone (`binarized`, which runs without TensorFlow). The names that need TensorFlow
are imported on first use (PEP 562), so `keras_transformer.data.binarized` imports without it."""

from keras_transformer.data.buckets import PipelineReport, bucket_boundaries
from keras_transformer.lazy import lazy_attribute

# Public names and the module that defines each.
LAZY = {
    "ding": "keras_transformer.data.ding",
    "make_batches": "keras_transformer.data.batching",
    "pipeline_report": "keras_transformer.data.batching",
    "weigh_tokens": "keras_transformer.data.batching",
    "Corpus": "keras_transformer.data.corpus",
    "CorpusError": "keras_transformer.data.corpus",
    "read_parallel_files": "keras_transformer.data.corpus",
    "read_translate_folder": "keras_transformer.data.corpus",
    "read_tsv": "keras_transformer.data.corpus",
    "load_tfds": "keras_transformer.data.tfds_source",
    "tfds_languages": "keras_transformer.data.tfds_source",
}


def __getattr__(name):
    return lazy_attribute(
        __name__,
        LAZY,
        name,
        "text corpora and the tf.data pipeline run on it; binarized data "
        "(keras_transformer.data.binarized) does not",
    )


def __dir__():
    return sorted([*globals(), *LAZY])


__all__ = ["PipelineReport", "bucket_boundaries", *LAZY]
