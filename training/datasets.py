"""The corpora a run can train on, named by `--dataset`:

ding            the embedded German-English Ding corpus (fetched once; keras_transformer.data.ding)
tfds:NAME       any tensorflow-datasets translation dataset, e.g. tfds:wmt14_translate/de-en
folder:DIR      DIR/{lang}.{split}.txt, one sentence per line (tfds.TranslateFolder's layout)
tsv:DIR         DIR/{split}.tsv, lines "source<TAB>target"
binarized:DIR   token ids written by `python -m training.binarize`, trained from without
                TensorFlow (keras_transformer.data.binarized)

Only binarized data is read without TensorFlow; the readers of the others import it when used.
"""

import pathlib

from keras_transformer_cli.flags import DATASET_HELP as SPEC_HELP

KINDS = ("ding", "tfds", "folder", "tsv", "binarized")


class Dataset:
    """A named corpus: `read(split)` gives a tf.data.Dataset of (source, target) strings and
    `pairs(split)` a list of (source, target) Python strings; `languages` is (source, target).
    Binarized data (`binarized`, a `Binarized`) gives its splits' token ids instead of `read`.

    Ding is German-English (source_language="en" reverses it); with `phrases` its training
    split mixes the dictionary's word and phrase pairs with the sentence pairs, each sentence
    `sentence_repeats` times (with `sentence_alternatives`, the other sentence pairs the
    dictionary's sub-entries list too), the phrases' sources tagged with `tag_phrases`
    (`ding.training_mixture`). tfds datasets default to their own direction; folder:DIR needs
    both languages.
    """

    def __init__(
        self,
        spec,
        source_language=None,
        target_language=None,
        data_dir=None,
        download=True,
        phrases=False,
        sentence_repeats=1,
        tag_phrases=False,
        sentence_alternatives=False,
    ):
        kind, _, argument = spec.partition(":")
        if kind not in KINDS or (kind == "ding") == bool(argument):
            raise ValueError(f"--dataset {spec!r}: expected {SPEC_HELP}")
        self.spec, self.kind, self.argument = spec, kind, argument
        self.data_dir, self.download = (str(data_dir) if data_dir else None), download
        self.phrases, self.sentence_repeats, self._mixtures = phrases, sentence_repeats, {}
        self.tag_phrases, self.binarized = tag_phrases, None
        self.sentence_alternatives = sentence_alternatives
        self.dataset_dir = None  # the prepared Ding corpus (`open_ding`)
        if phrases and kind != "ding":
            raise ValueError(
                f"--phrases adds the Ding dictionary's phrase pairs; --dataset {spec!r} has none"
                + (" of its own (binarize with --phrases)" if kind == "binarized" else "")
            )
        if kind == "binarized":
            self.open_binarized(source_language, target_language)
        elif kind == "ding":
            self.open_ding(source_language, target_language)
        elif kind == "tfds":
            from keras_transformer.data import tfds_languages

            self.languages = tfds_languages(argument, source_language, self.data_dir)
            if target_language not in (None, self.languages[1]):
                raise ValueError(
                    f"{argument!r} translates {self.languages[0]} into {self.languages[1]}, not "
                    f"{target_language!r}"
                )
        else:
            from keras_transformer.data import CorpusError

            self.root = pathlib.Path(argument)
            if not self.root.is_dir():
                raise CorpusError(f"{self.root}: no such directory")
            if kind == "folder" and not (source_language and target_language):
                raise ValueError(
                    "--dataset folder:DIR needs --source-language and --target-language"
                )
            self.languages = (source_language or "source", target_language or "target")

    def open_ding(self, source_language, target_language):
        """Prepares the Ding corpus (once), German-English or, with source language en, reversed."""
        from keras_transformer.data import ding

        if source_language not in (None, "de", "en"):
            raise ValueError(
                f"the Ding corpus is German-English; no source language {source_language!r}"
            )
        self.languages = ("en", "de") if source_language == "en" else ("de", "en")
        if target_language not in (None, self.languages[1]):
            raise ValueError(
                f"the Ding corpus translates {self.languages[0]} into {self.languages[1]}, not "
                f"{target_language!r}"
            )
        self.dataset_dir = ding.prepare(self.data_dir, include_phrases=self.phrases)

    def open_binarized(self, source_language, target_language):
        """Opens binarized:DIR, whose languages the flags may name but not change."""
        from keras_transformer.data.binarized import Binarized

        self.binarized = Binarized(self.argument)
        self.languages = self.binarized.languages
        for flag, given, recorded in (
            ("--source-language", source_language, self.languages[0]),
            ("--target-language", target_language, self.languages[1]),
        ):
            if given not in (None, recorded):
                raise ValueError(
                    f"{flag} {given}: {self.argument} holds {'-'.join(self.languages)} pairs; "
                    "binarize the other direction into another folder"
                )

    def read(self, split, shuffle_files=False, seed=0):
        """The split's (source, target) strings; `shuffle_files` and `seed` vary the order of the
        training data (tfds files, Ding's phrase mixture)."""
        from keras_transformer.data import ding, load_tfds, read_translate_folder, read_tsv

        if self.binarized:
            raise ValueError(f"--dataset {self.spec} holds token ids, not text, for {split!r}")
        if (
            self.kind == "ding" and self.phrases and split == "train"
        ):  # built once per seed: reading it takes a while
            if seed not in self._mixtures:
                reverse = self.languages[0] == "en"
                self._mixtures[seed] = ding.training_mixture(
                    self.dataset_dir,
                    self.sentence_repeats,
                    reverse,
                    seed,
                    self.tag_phrases,
                    self.sentence_alternatives,
                )
            return self._mixtures[seed]
        if self.kind == "ding":
            return ding.load(split, self.dataset_dir, reverse=self.languages[0] == "en")
        if self.kind == "tfds":
            return load_tfds(
                self.argument, split, self.languages[0], self.data_dir, self.download, shuffle_files
            )
        if self.kind == "folder":
            return read_translate_folder(self.root, split, *self.languages).dataset()
        return read_tsv(self.root / f"{split}.tsv").dataset()

    def pairs(self, split):
        """The split's pairs as Python strings (read in batches: one at a time is slow)."""
        if self.binarized:
            return self.binarized.pairs(split)
        return [
            (s.decode("utf-8"), t.decode("utf-8"))
            for sources, targets in self.read(split).batch(4096).as_numpy_iterator()
            for s, t in zip(sources, targets)
        ]


def check_phrase_flags(phrases, sentence_repeats, tag_phrases, sentence_alternatives):
    """ValueError naming a flag of Ding's phrase mixture given without --phrases."""
    if not phrases and sentence_repeats != 1:
        raise ValueError(
            "--sentence-repeats up-samples the sentences among the phrases: it needs --phrases"
        )
    if not phrases and tag_phrases:
        raise ValueError("--tag-phrases tags the phrase pairs: it needs --phrases")
    if not phrases and sentence_alternatives:
        raise ValueError(
            "--sentence-alternatives adds sentence pairs to the phrase mixture: it needs --phrases"
        )


def phrase_mixture(phrases, sentence_repeats, tag_phrases, sentence_alternatives):
    """How Ding's phrase pairs are mixed in, as run.json and a binarized index record it (None
    without --phrases); ValueError as `check_phrase_flags`."""
    check_phrase_flags(phrases, sentence_repeats, tag_phrases, sentence_alternatives)
    if not phrases:
        return None
    record = {"sentence_repeats": sentence_repeats}
    if tag_phrases:  # the defaults are recorded by omission
        record["tag"] = phrase_tag()
    if sentence_alternatives:  # likewise
        record["sentence_alternatives"] = True
    return record


def phrase_tag():
    """--tag-phrases's tag, from the Ding reader (imported only for a tagged mixture, which is
    read with TensorFlow: a run from binarized data may lack it)."""
    from keras_transformer.data import ding

    return ding.PHRASE_TAG


def train_tokenizer(dataset, vocab_size, path, model_type="bpe"):
    """A SubwordTokenizer (`model_type` "bpe" or "unigram") of `vocab_size` pieces trained on
    both sides of the dataset's training split, written to `path`, with the phrase tag one piece
    of its own when the split holds it; ValueError when the split is empty."""
    import keras_transformer as kt

    texts = [side for pair in dataset.pairs("train") for side in pair]
    if not texts:
        raise ValueError(f"the train split of {dataset.spec} is empty")
    symbols = (phrase_tag(),) if dataset.phrases and dataset.tag_phrases else ()
    return kt.SubwordTokenizer.train(
        texts, vocab_size, path, model_type=model_type, symbols=symbols
    )
