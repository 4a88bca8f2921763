"""Sentence pairs from tensorflow-datasets, local files and the embedded Ding corpus, and the
length-bucketed, token-budgeted batches of §5.1."""

from keras_transformer.data import ding
from keras_transformer.data.batching import (
    PipelineReport,
    bucket_boundaries,
    make_batches,
    pipeline_report,
    weigh_tokens,
)
from keras_transformer.data.corpus import (
    Corpus,
    CorpusError,
    read_parallel_files,
    read_translate_folder,
    read_tsv,
)
from keras_transformer.data.tfds_source import load_tfds, tfds_languages

__all__ = [
    "Corpus",
    "CorpusError",
    "PipelineReport",
    "bucket_boundaries",
    "ding",
    "load_tfds",
    "make_batches",
    "pipeline_report",
    "read_parallel_files",
    "read_translate_folder",
    "read_tsv",
    "tfds_languages",
    "weigh_tokens",
]
