"""§5.1's length buckets, what a pipeline drops and why, and its report: shared by the tf.data
pipeline (`batching`) and the numpy loader of binarized data (`binarized`), without TensorFlow.

A pair's length is that of its longer side with eos (source) or bos (target) added; pairs of
similar length share a bucket, and a bucket's batches hold as many pairs as its longest
possible pair allows within the token budget.
"""

import collections
import dataclasses

KEPT, EMPTY, TOO_LONG = 0, 1, 2


def drop_reasons(max_length):
    """{code: what the report calls it} for the codes of pairs that are dropped."""
    return {
        EMPTY: "empty after normalization",
        TOO_LONG: f"longer than max_length={max_length} tokens",
    }


def bucket_boundaries(max_length, smallest=8, growth=1.1):
    """Upper length bounds of the buckets, growing by about 10%; the last is max_length + 1."""
    bounds, bound = [], smallest
    while bound <= max_length:
        bounds.append(bound)
        bound = max(bound + 1, int(bound * growth))
    return bounds + [max_length + 1]


def static_boundaries(max_length, smallest=8, multiple=8, growth=1.5):
    """Bucket bounds for static shapes, where a compiler (XLA) builds one program per batch
    shape: padded lengths (bound - 1) that are multiples of 8, growing by about 50%, the last
    max_length. A handful of shapes, for more padding than `bucket_boundaries`; even lengths
    are what cuDNN's fused attention takes, and multiples of 8 fill the matrix units' tiles."""
    lengths, length = [], smallest
    while length < max_length:
        lengths.append(length)
        length = -(-int(length * growth) // multiple) * multiple
    return [length + 1 for length in lengths] + [max_length + 1]


def bucket_batch_sizes(bounds, tokens_per_batch, batch_size_multiple=1):
    """Pairs per batch of each bucket (bucket i holds lengths below bounds[i], padded to at most
    bounds[i] - 1 tokens), a multiple of `batch_size_multiple`; then one for the lengths beyond
    the last bound, which no kept pair has."""

    def pairs_per_batch(longest):
        return tokens_per_batch // longest // batch_size_multiple * batch_size_multiple

    return [pairs_per_batch(bound - 1) for bound in bounds] + [batch_size_multiple]


def check_budget(tokens_per_batch, max_length, batch_size_multiple):
    """ValueError when the budget cannot hold `batch_size_multiple` pairs of `max_length`."""
    if tokens_per_batch < max_length * batch_size_multiple:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} cannot hold {batch_size_multiple} sentence(s) of "
            f"max_length={max_length} (batch_size_multiple={batch_size_multiple})"
        )


@dataclasses.dataclass
class PipelineReport:
    """What the pipeline did with a corpus: pairs read, kept and dropped by reason, and how
    much of each batch is real tokens rather than padding."""

    read: int
    kept: int
    dropped: collections.Counter
    batches: int
    padding_efficiency: float
    largest_side_tokens: int
    tokens_per_batch: int

    @classmethod
    def of_batches(cls, inputs, read, kept, dropped, tokens_per_batch):
        """The report of one pass whose batches' inputs ({"source", "target"} numpy arrays)
        are `inputs`: their count, padding and fullest side."""
        real = total = largest = batches = 0
        for batch in inputs:
            source, target = batch["source"], batch["target"]
            real += int((source != 0).sum()) + int((target != 0).sum())
            total += source.size + target.size
            largest = max(largest, source.size, target.size)
            batches += 1
        return cls(
            read=read,
            kept=kept,
            dropped=dropped,
            batches=batches,
            padding_efficiency=real / total if total else 0.0,
            largest_side_tokens=largest,
            tokens_per_batch=tokens_per_batch,
        )

    def __str__(self):
        dropped = ", ".join(f"{reason} {count}" for reason, count in self.dropped.most_common())
        return (
            f"pairs read {self.read}, kept {self.kept}, dropped {sum(self.dropped.values())}"
            f"{': ' + dropped if dropped else ''}\n"
            f"batches {self.batches}, padding efficiency {self.padding_efficiency:.1%} "
            f"(real tokens / all tokens in batches), fullest side {self.largest_side_tokens} "
            f"tokens (budget {self.tokens_per_batch} per side)"
        )


def dropped_counts(codes, max_length, skipped=None):
    """Counter {reason: pairs} of the drop `codes` (a numpy array of KEPT, EMPTY, TOO_LONG) and
    of the pairs a reader `skipped` ({reason: pairs}); reasons with no pair left out."""
    dropped = collections.Counter(dict(skipped or {}))
    for code, reason in drop_reasons(max_length).items():
        dropped[reason] += int((codes == code).sum())
    return collections.Counter({reason: n for reason, n in dropped.items() if n})
