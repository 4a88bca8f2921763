"""SHA-256 digests that identify content by its bytes: a sentencepiece model, wherever it is
stored (binarized data records its tokenizer's, a model's config the one its ids come from).
Needs only the standard library."""

import hashlib
import pathlib


def sha256_of_bytes(data):
    """The hex SHA-256 of `data` (bytes)."""
    return hashlib.sha256(data).hexdigest()


def sha256_of(path):
    """The hex SHA-256 of a file's bytes."""
    return sha256_of_bytes(pathlib.Path(path).read_bytes())
