"""Binarized data: a corpus's token ids written once and read back as memory-mapped numpy arrays,
as fairseq-preprocess and fairseq-train do, so that training needs neither TensorFlow nor the
tokenizer. `python -m training.binarize` writes a folder on a machine with TensorFlow, a chunk
of pairs at a time (`SplitWriter`); `Binarized` reads it anywhere numpy runs, and
`Binarized.batches` builds §5.1's batches on the host.

    DIR/index.json                 FORMAT, VERSION, the tokenizer's file, SHA-256 and vocabulary
                                   size, max_length, the dataset and its languages, and per split
                                   the pairs read, kept and dropped (by reason) and the tokens
    DIR/tokenizer.model            the sentencepiece model the ids come from
    DIR/SPLIT.SIDE.ids.npy         int32: the ids of every kept pair of the split, end to end,
                                   without bos or eos (SIDE: source, target)
    DIR/SPLIT.SIDE.offsets.npy     int64 [pairs + 1]: pair i is ids[offsets[i]:offsets[i + 1]]
    DIR/SPLIT.pairs.jsonl          (not train) every pair of the split as text, ["source",
                                   "target"] a line: the references of BLEU and the test split

Only numpy is imported here: this module runs where TensorFlow is not installed.
"""

import collections
import dataclasses
import io
import json
import pathlib
import queue
import threading

import numpy as np

from keras_transformer.data.buckets import (
    PipelineReport,
    bucket_batch_sizes,
    check_budget,
    static_boundaries,
)
from keras_transformer.digests import sha256_of
from keras_transformer.exports import TOKENIZER_FILE
from keras_transformer.ids import BOS_ID, EOS_ID

FORMAT = "keras-transformer binarized data"
VERSION = 1
INDEX_FILE = "index.json"
SIDES = ("source", "target")


class BinarizedError(ValueError):
    """A binarized folder that cannot be used; the message names the file and what to do."""


def array_paths(directory, split):
    """{(side, "ids" or "offsets"): path} of a split's arrays."""
    return {
        (side, part): pathlib.Path(directory) / f"{split}.{side}.{part}.npy"
        for side in SIDES
        for part in ("ids", "offsets")
    }


def text_path(directory, split):
    return pathlib.Path(directory) / f"{split}.pairs.jsonl"


def text_lines(pairs):
    """The (source, target) `pairs` as the lines of SPLIT.pairs.jsonl, UTF-8 bytes."""
    lines = (json.dumps([source, target], ensure_ascii=False) + "\n" for source, target in pairs)
    return "".join(lines).encode("utf-8")


class GrowingArray:
    """A 1-D .npy file written as its values come (`append`), readable by `np.load` once
    closed: the room of its version 1.0 header is reserved first (its size does not depend on
    the length), the values appended raw, and the header with the final length written last."""

    def __init__(self, path, dtype):
        self.path, self.dtype, self.length = pathlib.Path(path), np.dtype(dtype), 0
        self.handle = self.path.open("wb")
        self.reserved = len(self.header())
        self.handle.write(b"\0" * self.reserved)

    def header(self):
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buffer,
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": (self.length,),
            },
        )
        return buffer.getvalue()

    def append(self, values):
        values = np.ascontiguousarray(values, self.dtype)
        self.handle.write(values.tobytes())
        self.length += len(values)

    def close(self, complete=True):
        """Closes the file, its header written when `complete`."""
        with self.handle:
            if not complete:
                return
            header = self.header()
            if len(header) != self.reserved:
                raise RuntimeError(
                    f"{self.path}: the .npy header of {self.length} values takes {len(header)} "
                    f"bytes, not the {self.reserved} reserved"
                )
            self.handle.seek(0)
            self.handle.write(header)


class SplitWriter:
    """One split's files (the arrays and, with `keep_text`, SPLIT.pairs.jsonl) written as its
    kept pairs come, chunk by chunk (`add`), complete when the `with` block ends without error:
    memory holds one chunk, whatever the split's size. `tokens`: {side: tokens written}."""

    def __init__(self, directory, split, keep_text):
        paths = array_paths(directory, split)
        self.ids = {side: GrowingArray(paths[side, "ids"], np.int32) for side in SIDES}
        self.offsets = {side: GrowingArray(paths[side, "offsets"], np.int64) for side in SIDES}
        for offsets in self.offsets.values():
            offsets.append([0])
        self.text = text_path(directory, split).open("wb") if keep_text else None

    def __enter__(self):
        return self

    def add(self, ids, lengths, text=None):
        """Appends a chunk: `ids` {side: its kept pairs' ids end to end}, `lengths` {side: each
        kept pair's length}, `text` its pairs (kept or not) as `text_lines` when the split keeps
        its text."""
        for side in SIDES:
            self.offsets[side].append(self.ids[side].length + np.cumsum(lengths[side]))
            self.ids[side].append(ids[side])
        if self.text is not None:
            self.text.write(text)

    def __exit__(self, kind, error, traceback):
        for array in (*self.ids.values(), *self.offsets.values()):
            array.close(complete=kind is None)
        if self.text is not None:
            self.text.close()

    @property
    def tokens(self):
        return {side: self.ids[side].length for side in SIDES}


@dataclasses.dataclass
class Split:
    """One split's kept pairs: `source` and `target` ids end to end with their offsets."""

    name: str
    source_ids: np.ndarray
    source_offsets: np.ndarray
    target_ids: np.ndarray
    target_offsets: np.ndarray

    def __len__(self):
        return len(self.source_offsets) - 1

    def lengths(self):
        """Each pair's length as §5.1 buckets it: its longer side with eos or bos, [pairs]."""
        return np.maximum(np.diff(self.source_offsets), np.diff(self.target_offsets)) + 1

    def pair(self, i):
        """(source ids, target ids) of pair i."""
        return (
            self.source_ids[self.source_offsets[i] : self.source_offsets[i + 1]],
            self.target_ids[self.target_offsets[i] : self.target_offsets[i + 1]],
        )

    def batch(self, indices, length):
        """The teacher-forcing batch of the pairs `indices`, every side padded to `length`:
        ({"source": source + eos, "target": bos + target}, target + eos, weights), int32 with 0
        = padding, and float32 weights 1 / n on the n real target tokens (exact token
        normalisation, as `weigh_tokens`)."""
        source = rows(self.source_ids, self.source_offsets, indices, length, after=EOS_ID)
        target_in = rows(self.target_ids, self.target_offsets, indices, length, before=BOS_ID)
        target_out = rows(self.target_ids, self.target_offsets, indices, length, after=EOS_ID)
        real = (target_out != 0).astype(np.float32)
        weights = real / max(real.sum(), 1.0)
        return {"source": source, "target": target_in}, target_out, weights


def rows(ids, offsets, indices, length, before=None, after=None):
    """[len(indices), length] int32: each pair's ids, after `before` and followed by `after`
    (when given), then zeros. Vectorised: one gather for the whole batch."""
    starts, ends = offsets[indices], offsets[indices + 1]
    sizes = ends - starts
    column = np.arange(length)[None, :]
    shift = 0 if before is None else 1
    position = column - shift  # index into the pair's ids
    inside = (position >= 0) & (position < sizes[:, None])
    gathered = ids[np.where(inside, starts[:, None] + position, 0)] if len(ids) else 0
    out = np.where(inside, gathered, 0).astype(np.int32)
    if before is not None:
        out[:, 0] = before
    if after is not None:
        out[np.arange(len(indices)), sizes + shift] = after
    return out


class Binarized:
    """A binarized folder, checked when opened: its index's format and version, its tokenizer
    (the file and, when `tokenizer_sha256` is given, that it is the run's), and every array of
    each split read (memory-mapped) and checked against the index's counts.

    Raises BinarizedError naming the file and what to do.
    """

    def __init__(self, directory, tokenizer_sha256=None):
        self.directory = pathlib.Path(directory)
        self.index = self.read_index()
        self.tokenizer_path = self.directory / TOKENIZER_FILE
        if not self.tokenizer_path.is_file():
            raise BinarizedError(
                f"{self.tokenizer_path}: no such file; binarize the data again "
                "(python -m training.binarize)"
            )
        recorded = self.index["tokenizer"]["sha256"]
        if sha256_of(self.tokenizer_path) != recorded:
            raise BinarizedError(
                f"{self.tokenizer_path} is not the tokenizer the ids of {self.directory} were made "
                f"with ({self.directory / INDEX_FILE} records SHA-256 {recorded[:12]}...); "
                "binarize the data again"
            )
        if tokenizer_sha256 is not None and tokenizer_sha256 != recorded:
            raise BinarizedError(
                f"{self.directory} was binarized with another tokenizer than the run's "
                f"(SHA-256 {recorded[:12]}... against {tokenizer_sha256[:12]}...): binarize the "
                "data with the run's tokenizer (python -m training.binarize --tokenizer "
                "RUN_DIR/tokenizer.model), or start a new --run-dir"
            )
        self.splits = {}

    def read_index(self):
        path = self.directory / INDEX_FILE
        if not self.directory.is_dir():
            raise BinarizedError(
                f"{self.directory}: no such directory (write one with python -m training.binarize)"
            )
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BinarizedError(
                f"{path}: no such file; {self.directory} is not binarized data (write it with "
                "python -m training.binarize)"
            ) from None
        except (OSError, ValueError) as error:
            raise BinarizedError(f"{path} cannot be read ({error}); binarize again") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise BinarizedError(f"{path} is not the index of binarized data ({FORMAT!r})")
        if index.get("version") != VERSION:
            raise BinarizedError(
                f"{path} is version {index.get('version')} of the binarized format; this "
                f"keras-transformer reads version {VERSION}: binarize the data again with it"
            )
        for field in ("tokenizer", "max_length", "splits", "languages", "dataset"):
            if field not in index:
                raise BinarizedError(f"{path} lacks the field {field!r}; binarize again")
        return index

    @property
    def vocab_size(self):
        return int(self.index["tokenizer"]["vocab_size"])

    @property
    def max_length(self):
        return int(self.index["max_length"])

    @property
    def languages(self):
        return tuple(self.index["languages"])

    def has_split(self, name):
        return name in self.index["splits"]

    def split(self, name, flag="--dataset"):
        """The split's arrays (memory-mapped, read once); BinarizedError naming a missing split,
        or a missing, cut or foreign array."""
        if name in self.splits:
            return self.splits[name]
        if not self.has_split(name):
            raise BinarizedError(
                f"{flag}: {self.directory} holds the splits {', '.join(self.index['splits'])}, "
                f"not {name!r}"
            )
        expected = self.index["splits"][name]
        arrays = {}
        for (side, part), path in array_paths(self.directory, name).items():
            try:
                arrays[side, part] = np.load(path, mmap_mode="r")
            except FileNotFoundError:
                raise BinarizedError(f"{path}: no such file; binarize the data again") from None
            except (OSError, ValueError) as error:
                raise BinarizedError(
                    f"{path} cannot be read ({error}); it is cut or corrupt: binarize again"
                ) from None
            dtype = np.int32 if part == "ids" else np.int64
            if arrays[side, part].dtype != dtype or arrays[side, part].ndim != 1:
                raise BinarizedError(f"{path} is not a 1-D {np.dtype(dtype).name} array")
        for side in SIDES:
            ids, offsets = arrays[side, "ids"], arrays[side, "offsets"]
            if (
                len(offsets) != expected["pairs"] + 1
                or len(ids) != expected["tokens"][side]
                or (len(offsets) and (offsets[0] != 0 or offsets[-1] != len(ids)))
            ):
                raise BinarizedError(
                    f"{array_paths(self.directory, name)[side, 'ids']} and its offsets do not "
                    f"hold the {expected['pairs']} pairs and {expected['tokens'][side]} tokens "
                    f"that {self.directory / INDEX_FILE} records: binarize the data again"
                )
        split = Split(
            name,
            arrays["source", "ids"],
            np.asarray(arrays["source", "offsets"]),
            arrays["target", "ids"],
            np.asarray(arrays["target", "offsets"]),
        )
        self.splits[name] = split
        return split

    def pairs(self, name, flag="--dataset"):
        """Every pair of the split as text [(source, target)] (not the train split)."""
        path = text_path(self.directory, name)
        if not self.has_split(name) or not path.is_file():
            raise BinarizedError(
                f"{flag} {name}: {self.directory} holds no text of the split {name!r} "
                f"({path.name}); binarize it with --splits ... {name}"
            )
        pairs = []
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    source, target = json.loads(line)
                except (ValueError, TypeError):
                    raise BinarizedError(
                        f"{path}:{number}: not a [source, target] pair; binarize again"
                    ) from None
                pairs.append((source, target))
        return pairs

    def batches(
        self,
        split,
        tokens_per_batch,
        max_length=None,
        seed=0,
        repeat=True,
        shuffle=True,
        batch_size_multiple=1,
        part=(0, 1),
    ):
        """§5.1's batches of the split, as `make_batches(..., static_shapes=True)` builds them:
        pairs of one length bucket (`static_boundaries`) padded to the bucket's
        bound, at most `tokens_per_batch` tokens a side, a multiple of `batch_size_multiple`
        pairs; each batch is emitted when its bucket fills, in the order of the pairs.

        Pairs longer than `max_length` (default: the folder's) are left out. With `shuffle` the
        pairs come in a new random order every pass (`seed`); with `repeat` the passes never
        end (no part-filled batch); else one pass, its part-filled buckets last.
        `part=(i, n)`: the i-th of n equal blocks of rows of each batch (one host's share of a
        global batch under several hosts), weighed over the whole batch.

        Yields (inputs, target_out, weights), as `Split.batch`."""
        data = self.split(split) if isinstance(split, str) else split
        max_length = self.max_length if max_length is None else max_length
        check_budget(tokens_per_batch, max_length, batch_size_multiple)
        bounds = static_boundaries(max_length)
        sizes = bucket_batch_sizes(bounds, tokens_per_batch, batch_size_multiple)
        lengths = data.lengths()
        kept = np.flatnonzero(lengths <= max_length)
        bucket_of = np.searchsorted(bounds, lengths, side="right")
        if repeat and not len(kept):
            raise BinarizedError(
                f"no pair of the {data.name} split of {self.directory} is within max_length="
                f"{max_length}: there is nothing to train on"
            )
        rng = np.random.default_rng(seed)
        pending = [np.zeros(0, np.int64) for _ in sizes]
        while True:
            order = rng.permutation(kept) if shuffle else kept
            for bucket, members in filled_buckets(order, bucket_of[order], sizes, pending):
                yield share(data.batch(members, bounds[bucket] - 1), part)
            if not repeat:
                for bucket, members in enumerate(pending):
                    if len(members):
                        yield share(data.batch(members, bounds[bucket] - 1), part)
                return

    def report(self, split, tokens_per_batch, max_length=None, batch_size_multiple=1):
        """The PipelineReport of one unshuffled pass over the split: the pairs read and dropped
        at binarization (and beyond `max_length`, when it is below the folder's), the batches and
        their padding."""
        data = self.split(split)
        max_length = self.max_length if max_length is None else max_length
        recorded = self.index["splits"][split]
        dropped = collections.Counter(recorded["dropped"])
        too_long = int((data.lengths() > max_length).sum())
        if too_long:
            dropped[f"longer than max_length={max_length} tokens"] += too_long
        passed = self.batches(
            data,
            tokens_per_batch,
            max_length,
            repeat=False,
            shuffle=False,
            batch_size_multiple=batch_size_multiple,
        )
        return PipelineReport.of_batches(
            (inputs for inputs, _, _ in passed),
            read=recorded["read"],
            kept=len(data) - too_long,
            dropped=dropped,
            tokens_per_batch=tokens_per_batch,
        )


def filled_buckets(order, buckets, sizes, pending):
    """(bucket, pair indices) of every batch that fills in a pass over the pairs `order` (their
    buckets `buckets`), in the order they fill; `pending` [bucket] holds the pairs waiting from
    earlier passes and is left holding this pass's remainders."""
    filled = []  # (position in the pass of the pair that fills it, bucket, members)
    for bucket, size in enumerate(sizes):
        positions = np.flatnonzero(buckets == bucket)
        if not len(positions):
            continue
        members = np.concatenate([pending[bucket], order[positions]])
        when = np.concatenate([np.full(len(pending[bucket]), -1), positions])
        full = len(members) // size * size
        filled += [
            (when[end - 1], bucket, members[end - size : end])
            for end in range(size, full + 1, size)
        ]
        pending[bucket] = members[full:]
    return [(bucket, members) for _, bucket, members in sorted(filled, key=lambda f: f[0])]


def share(batch, part):
    """The `part` = (i, n) block of rows of a batch (inputs, target_out, weights)."""
    index, count = part
    if count == 1:
        return batch
    inputs, target_out, weights = batch
    rows_each = len(target_out) // count
    block = slice(index * rows_each, (index + 1) * rows_each)
    return {k: v[block] for k, v in inputs.items()}, target_out[block], weights[block]


def ahead(iterator, depth=8):
    """The items of `iterator`, produced up to `depth` ahead by a background thread, so that
    the device never waits for the host to assemble a batch. An error in the producer is raised
    here, at the item it failed on; closing this generator stops the thread."""
    items, stop = queue.Queue(depth), threading.Event()
    done = object()

    def produce():
        try:
            for item in iterator:
                while not stop.is_set():
                    try:
                        items.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((done, None))
        except Exception as error:  # handed to the consumer
            items.put((done, error))

    thread = threading.Thread(target=produce, name="binarized-batches", daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()
