"""Any tensorflow-datasets translation dataset, by name and language pair."""


def load_tfds(name, split, source_language=None, data_dir=None, download=True, shuffle_files=False):
    """A tf.data.Dataset of (source, target) strings from a tfds translation dataset.

    Args:
        name: e.g. "ted_hrlr_translate/pt_to_en", "wmt14_translate/de-en",
            "wmt14_translate/fr-en".
        split: "train", "validation", "test" (or a tfds slice such as "train[:10%]").
        source_language: which side is the source; by default the dataset's own direction
            (its supervised keys). Give the other language to translate the other way.
        download: fetch and prepare the data when it is not in `data_dir` yet (needs network).
        shuffle_files: read the dataset's files in random order (for training: large datasets
            such as WMT store their sub-corpora in long runs).
    """
    import tensorflow_datasets as tfds

    source, target = tfds_languages(name, source_language, data_dir)
    dataset = tfds.load(
        name, split=split, data_dir=data_dir, download=download, shuffle_files=shuffle_files
    )
    return dataset.map(lambda example: (example[source], example[target]))


def tfds_languages(name, source_language=None, data_dir=None):
    """(source, target) language keys of a tfds translation dataset; ValueError naming the
    problem for an unknown dataset, one without language pairs, or a language it lacks."""
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise ValueError(
            f"tensorflow-datasets has no dataset {name!r}; translation datasets include "
            "'ted_hrlr_translate/pt_to_en', 'wmt14_translate/de-en', 'wmt14_translate/fr-en'"
        ) from None
    languages = builder.info.supervised_keys
    if not languages or len(languages) != 2:
        raise ValueError(
            f"{name!r} is not a translation dataset (it has no (source, target) supervised keys)"
        )
    if source_language not in (None, *languages):
        raise ValueError(
            f"{name!r} has languages {list(languages)}; source_language={source_language!r}"
        )
    return tuple(languages) if source_language in (None, languages[0]) else tuple(languages[::-1])
