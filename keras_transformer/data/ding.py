"""The embedded default corpus: German-English pairs from the Ding dictionary.

Debian's package `trans-de-en` (GPL-2+, about 6 MB) holds `/usr/share/trans/de-en`, lines
`de | de2 :: en | en2` whose `|`-separated sub-entries align by position, with `;` between
synonyms and annotations in braces ({n} grammar), brackets ([ugs.] labels), parentheses and
angle brackets (<Bhf.> abbreviations and other spellings; `to give up <> sth.` marks where a
separable verb's object goes), some of them nested. About 19,000 sub-entries are example
sentences; the rest are words and phrases.

The package is fetched without root (`data/debian.py`) into a cache directory outside the
repository, or the installed file is used. The sentence pairs are split deterministically by a
hash of the German sentence (so a sentence and all its translations land in one split), and
prepared once as a local TFDS dataset (`python -m training.prepare_ding`, or `make data`).
"""

import collections
import hashlib
import itertools
import json
import os
import pathlib
import re
import shutil

import keras

from keras_transformer.data import debian
from keras_transformer.data.corpus import Corpus, CorpusError, read_lines

DEBIAN_PACKAGE = "trans-de-en"
PACKAGE_FILE = pathlib.PurePosixPath(
    "usr/share/trans/de-en"
)  # where the package installs the dictionary
DATASET_NAME = "ding_de_en"
DATASET_VERSION = "1.0.0"
PARSER_VERSION = 7  # part of the cache key: a prepared dataset is rebuilt when the parser changes
SPLIT_FRACTIONS = {"test": 0.04, "validation": 0.04}  # about 870 sentence pairs each

# An annotation holding no other: removed innermost first, so nested ones go whole.
ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>")
SENTENCE_END = re.compile(r"[.!?][\"'”’»)]*$")
# Dictionary placeholders (etwas, jemandem, something, somebody, ...): a phrase, not a sentence.
PLACEHOLDER = re.compile(r"…|\.\.\.|\b(etw|jdm|jdn|jds|jd|sth|sb|usw|etc)\.")


def default_cache_dir():
    """$KERAS_TRANSFORMER_CACHE, or ~/.cache/keras_transformer."""
    return pathlib.Path(
        os.environ.get(
            "KERAS_TRANSFORMER_CACHE", pathlib.Path.home() / ".cache" / "keras_transformer"
        )
    )


def clean(text):
    """A dictionary entry without annotations ({n}, [ugs.], (...), <...>, nested ones too) or
    extra whitespace."""
    while (inner_removed := ANNOTATION.sub(" ", text)) != text:
        text = inner_removed
    return " ".join(text.split())


def first_alternative(entry):
    """The first `;` synonym of a sub-entry, cleaned; of sentences joined by " / ", the first."""
    text = clean(entry).split(";")[0].strip()
    head = text.split(" / ")[0]
    return head if is_sentence(head) else text


def sentence_alternatives(entry):
    """Every sentence a sub-entry lists, cleaned, in order: its `;` synonyms, a synonym's parts
    joined by " / " only where each part is a sentence (" / " also marks a choice of words
    inside one: `Damit handelst du dir nur Ärger / Probleme ein.`)."""
    sentences = []
    for synonym in clean(entry).split(";"):
        parts = [part.strip() for part in synonym.split(" / ")]
        if all(is_sentence(part) for part in parts):
            sentences.extend(parts)
    return sentences


def is_sentence(text):
    """An example sentence: several words, a capital first letter, sentence punctuation at the
    end, and no dictionary placeholder (etw., sth., …)."""
    letters = [c for c in text if c.isalpha()]
    return (
        len(text.split()) >= 2
        and bool(letters)
        and letters[0].isupper()
        and bool(SENTENCE_END.search(text))
        and not PLACEHOLDER.search(text)
    )


def parse(path, include_phrases=False, verbose=0):
    """Sentence pairs (and, with `include_phrases`, word and phrase pairs) from a Ding file.

    Each aligned `|` sub-entry gives one pair: the `first_alternative` of each side. Lines that
    do not parse are skipped and counted by reason; exact duplicate pairs are kept once. The
    corpus's `alternatives` hold, per sub-entry that lists other sentences, its first pair (if a
    sentence pair) and every pair of a German and an English sentence it lists
    (`sentence_alternatives`): a group that `split_pairs` keeps or drops whole.
    """
    lines = read_lines(path)
    corpus, seen, alternatives = Corpus([]), set(), {}
    progress = keras.utils.Progbar(len(lines), verbose=verbose, unit_name="line")
    for number, line in enumerate(lines, start=1):
        if number % 10000 == 0:
            progress.update(number)
        if not line.strip() or line.startswith("#"):
            continue
        if " :: " not in line:
            corpus.skipped["no ' :: ' between German and English"] += 1
            continue
        german, english = line.split(" :: ", 1)
        german_entries, english_entries = german.split(" | "), english.split(" | ")
        if len(german_entries) != len(english_entries):
            corpus.skipped["'|' sub-entries do not align"] += 1
            continue
        for entry_de, entry_en in zip(german_entries, english_entries):
            de, en = first_alternative(entry_de), first_alternative(entry_en)
            first = [(de, en)] if is_sentence(de) and is_sentence(en) else []
            listed = itertools.product(
                sentence_alternatives(entry_de), sentence_alternatives(entry_en)
            )
            group = tuple(dict.fromkeys([*first, *listed]))
            if len(group) > len(first):  # more than the first pair
                alternatives.setdefault(group, None)  # a dict: once each, in order
            if not de or not en:
                corpus.skipped["empty after removing annotations"] += 1
            elif not (include_phrases or (is_sentence(de) and is_sentence(en))):
                corpus.skipped["word or phrase, not a sentence"] += 1
            elif (de, en) in seen:
                corpus.skipped["duplicate pair"] += 1
            else:
                seen.add((de, en))
                corpus.pairs.append((de, en))
    progress.update(len(lines), finalize=True)
    corpus.alternatives = list(alternatives)
    return corpus


def _hash(text):
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def split_of(german):
    """ "test", "validation" or "train", from a hash of the German sentence (deterministic)."""
    bucket = _hash(german) / 2**64
    for split, fraction in SPLIT_FRACTIONS.items():
        if bucket < fraction:
            return split
        bucket -= fraction
    return "train"


def _loose(text):
    """`text` without case, spaces or punctuation, to compare phrases with sentences."""
    return "".join(c for c in text.casefold() if c.isalnum())


def split_pairs(pairs, alternatives=()):
    """{"train": [...], "validation": [...], "test": [...]} of the sentence pairs, and with word
    and phrase pairs among `pairs` also {"phrases": [...]}, and with `alternatives` (`parse`'s
    groups) also {"alternatives": [...]}, their pairs that are not sentence pairs already, each
    in a deterministic hash order.

    Sentence pairs go where `split_of` their German side says; a validation or test pair whose
    English sentence also occurs in another split moves to train, so no sentence of either
    language is shared between splits. Words, phrases and alternatives are training data only:
    a phrase, or a group of alternatives, of which a side shares its German or its English with
    a validation or test sentence (ignoring case, spaces and punctuation: "guten Morgen" and
    "Guten Morgen!") is dropped, so the held-out splits are the same with and without them and
    neither a held-out sentence nor another translation listed with it is trained on.
    """
    sentences = [(de, en) for de, en in pairs if is_sentence(de) and is_sentence(en)]
    wanted = [(de, en, split_of(de)) for de, en in sentences]
    english_splits = collections.defaultdict(set)
    for _, en, split in wanted:
        english_splits[en].add(split)
    splits = {"train": [], "validation": [], "test": []}
    for de, en, split in wanted:
        splits["train" if len(english_splits[en]) > 1 else split].append((de, en))
    held_out = {
        _loose(side) for name in ("validation", "test") for pair in splits[name] for side in pair
    }

    def apart(group):
        return not any(_loose(side) in held_out for pair in group for side in pair)

    sentence_set = set(sentences)
    phrases = [pair for pair in pairs if pair not in sentence_set]
    if phrases:
        splits["phrases"] = [pair for pair in phrases if apart([pair])]
    if alternatives:
        kept = (pair for group in alternatives if apart(group) for pair in group)
        splits["alternatives"] = list(dict.fromkeys(p for p in kept if p not in sentence_set))
    return {
        name: sorted(items, key=lambda pair: _hash("\t".join(pair)))
        for name, items in splits.items()
    }


def prepare(cache_dir=None, ding_file=None, include_phrases=False, verbose=1):
    """Parses, splits and stores the corpus as a local TFDS dataset, once; returns its directory.

    A prepared dataset is reused while the dictionary file and the parser are unchanged (their
    fingerprint is kept in report.json beside the dataset, with the parse report). A split that
    receives no pair (only with a very small dictionary file) is not stored.
    """
    import tensorflow_datasets as tfds

    cache_dir = pathlib.Path(cache_dir or default_cache_dir())
    config = "sentences_and_phrases" if include_phrases else "sentences"
    data_dir = cache_dir / "tensorflow_datasets"
    dataset_dir = data_dir / DATASET_NAME / config / DATASET_VERSION
    source = (
        pathlib.Path(ding_file)
        if ding_file
        else debian.fetch_file(DEBIAN_PACKAGE, PACKAGE_FILE, cache_dir)
    )
    if not source.is_file():
        raise CorpusError(f"{source}: no such file")
    fingerprint = f"{hashlib.sha256(source.read_bytes()).hexdigest()}-parser{PARSER_VERSION}"
    report_file = dataset_dir / "report.json"
    if (
        report_file.is_file()
        and json.loads(report_file.read_text()).get("fingerprint") == fingerprint
    ):
        return dataset_dir
    corpus = parse(source, include_phrases, verbose=verbose)
    splits = split_pairs(corpus.pairs, corpus.alternatives if include_phrases else ())
    features = tfds.features.FeaturesDict({"de": tfds.features.Text(), "en": tfds.features.Text()})
    shutil.rmtree(data_dir / DATASET_NAME / config, ignore_errors=True)  # an interrupted attempt
    tfds.dataset_builders.store_as_tfds_dataset(
        name=DATASET_NAME,
        version=DATASET_VERSION,
        config=config,
        features=features,
        split_datasets={
            name: [(i, {"de": de, "en": en}) for i, (de, en) in enumerate(pairs)]
            for name, pairs in splits.items()
            if pairs
        },
        data_dir=str(data_dir),
        description=f"German-English {config} from the Ding dictionary ({source}), GPL-2+.",
        homepage="https://dict.tu-chemnitz.de/",
        disable_shuffling=True,
    )
    report = {
        "source": str(source),
        "fingerprint": fingerprint,
        "pairs": len(corpus.pairs),
        "skipped": dict(corpus.skipped),
        "splits": {name: len(pairs) for name, pairs in splits.items()},
    }
    report_file.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return dataset_dir


def load(split, dataset_dir, reverse=False):
    """A tf.data.Dataset of (German, English) string pairs, (English, German) with `reverse`.
    Splits: train, validation, test; "phrases" and "alternatives" in a dataset prepared with
    `include_phrases`."""
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(dataset_dir))
    if split not in builder.info.splits:
        raise ValueError(f"the Ding dataset has splits {tfds_splits(dataset_dir)}, not {split!r}")
    keys = ("en", "de") if reverse else ("de", "en")
    return builder.as_dataset(split=split).map(lambda example: (example[keys[0]], example[keys[1]]))


# What --tag-phrases puts before each phrase pair's source: text that Ding's entries never hold,
# so that the tokenizer trained on the mixture learns it as a piece of its own.
PHRASE_TAG = "<phrase>"


def training_mixture(
    dataset_dir, sentence_repeats, reverse=False, seed=None, tag=False, alternatives=False
):
    """The train split's sentence pairs, each `sentence_repeats` times, in a random order among
    the word and phrase pairs (the "phrases" split of a dataset prepared with
    `include_phrases`): one finite pass, in which sentences make k*S / (k*S + P) of the pairs.
    Up-sampling keeps the few sentences from drowning among the many phrases while the phrases
    widen the vocabulary the model sees. With `alternatives`, the other sentence pairs the
    dictionary's training sub-entries list beside their first (the "alternatives" split) count
    as sentences, repeated as they are. With `tag`, each phrase pair's source begins with
    PHRASE_TAG and a space: a domain tag (Kobus et al., 2017), so that the model tells the
    dictionary's entries from sentences and translates untagged input as it learned the
    sentences. Held in memory (a few tens of MB), so later passes are fast."""
    import numpy as np
    import tensorflow as tf

    if (
        isinstance(sentence_repeats, bool)
        or not isinstance(sentence_repeats, int)
        or sentence_repeats < 1
    ):
        raise ValueError(f"sentence_repeats must be a positive integer, got {sentence_repeats!r}")
    splits = tfds_splits(dataset_dir)
    if "phrases" not in splits:
        raise ValueError(
            f"{dataset_dir} holds no phrases split: prepare the corpus with include_phrases=True "
            "(--phrases)"
        )
    if alternatives and "alternatives" not in splits:
        raise ValueError(
            f"{dataset_dir} holds no alternatives split: its dictionary lists no other sentence "
            "pair beside a training sub-entry's first"
        )
    sentence_splits = ("train", "alternatives") if alternatives else ("train",)
    sentences, phrases = (
        [
            np.concatenate(side)
            for side in zip(
                *(
                    batch
                    for split in names
                    for batch in load(split, dataset_dir, reverse).batch(8192).as_numpy_iterator()
                )
            )
        ]
        for names in (sentence_splits, ("phrases",))
    )
    if tag:
        prefix = f"{PHRASE_TAG} ".encode()
        phrases[0] = np.array([prefix + source for source in phrases[0]], dtype=object)
    order = np.concatenate(
        [
            np.tile(np.arange(len(sentences[0])), sentence_repeats),
            len(sentences[0]) + np.arange(len(phrases[0])),
        ]
    )
    np.random.default_rng(seed).shuffle(order)
    sources, targets = (np.concatenate([a, b])[order] for a, b in zip(sentences, phrases))
    return tf.data.Dataset.from_tensor_slices((sources, targets))


def tfds_splits(dataset_dir):
    """The split names of a prepared dataset."""
    import tensorflow_datasets as tfds

    return sorted(tfds.builder_from_directory(str(dataset_dir)).info.splits)
