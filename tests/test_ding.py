"""The embedded Ding corpus: parser, split, fetch and the cached TFDS dataset (on fixtures)."""

import json
import os
import stat

import pytest

from keras_transformer.data import CorpusError, debian, ding

FIXTURE = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later; GNU General Public License
Haus {n}; Gebäude {n} | Häuser {pl} :: house; building | houses
Rechner {m} [comp.] | Rechner {pl} :: computer | computers
Das Haus ist groß. | Das Haus (am Fluss) ist alt. :: The house is big. | \
The house (by the river) is old.
Ich halte das für einen Fehler. :: I consider that a mistake. / I regard that as a mistake.
Er war ein Jahr im Gefängnis. :: He spent a year in prison/jail.
Guten Morgen! {interj} :: Good morning! [Br.]
Das Haus ist groß. :: The house is big.
kaputt {adj} [ugs.] :: broken [coll.]
Abbau {m} (Druck; Vakuum) :: decay (pressure; vacuum)
nach Abzug von … :: after deducting …
eine Absage an etw. :: a rejection of sth.
jdm. etw. erklären :: to explain sth. to sb.
Das genügt. <genügen> :: That will do.
etw. aufgeben :: to give up <> sth.
Namedropping {n} (Angeben (mit Bekannten)) :: name-dropping <name-drop> <name--dropping <namedrop>>
Es regnet. | Was ist los? :: It is raining. | What's up?
Vielen Dank!; Danke schön! {interj} :: Thank you!; Thanks a lot!
Was ist los?; Was gibt's? :: What's up?; What's going on?
Damit handelst du dir nur Ärger / Probleme ein.; Das gibt Ärger. :: That means trouble.
Zug 4 kam zu spät / zu früh.; Der Zug war unpünktlich. :: Train 4 was late / early.; It was late.
a line without the separator
eins | zwei :: one
{n} :: [Br.]
"""


@pytest.fixture
def ding_file(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(FIXTURE, encoding="utf-8")
    return path


def test_parser_keeps_sentences_without_annotations(ding_file):
    corpus = ding.parse(ding_file)
    assert corpus.pairs == [
        ("Das Haus ist groß.", "The house is big."),
        ("Das Haus ist alt.", "The house is old."),
        ("Ich halte das für einen Fehler.", "I consider that a mistake."),
        ("Er war ein Jahr im Gefängnis.", "He spent a year in prison/jail."),
        ("Guten Morgen!", "Good morning!"),
        ("Das genügt.", "That will do."),  # its <...> removed: a sentence again
        ("Es regnet.", "It is raining."),
        ("Was ist los?", "What's up?"),
        ("Vielen Dank!", "Thank you!"),
        # " / " inside a sentence: a choice of words
        ("Damit handelst du dir nur Ärger / Probleme ein.", "That means trouble."),
        ("Zug 4 kam zu spät / zu früh.", "Train 4 was late / early."),  # in validation
    ]
    # Per sub-entry that lists more, its first pair and each German sentence it lists with each
    # English one; " / " splits only where each part is a sentence ("Probleme ein." is none).
    assert corpus.alternatives == [
        (
            ("Ich halte das für einen Fehler.", "I consider that a mistake."),
            ("Ich halte das für einen Fehler.", "I regard that as a mistake."),
        ),
        (
            ("Vielen Dank!", "Thank you!"),
            ("Vielen Dank!", "Thanks a lot!"),
            ("Danke schön!", "Thank you!"),
            ("Danke schön!", "Thanks a lot!"),
        ),
        (
            ("Was ist los?", "What's up?"),
            ("Was ist los?", "What's going on?"),
            ("Was gibt's?", "What's up?"),
            ("Was gibt's?", "What's going on?"),
        ),
        (
            ("Damit handelst du dir nur Ärger / Probleme ein.", "That means trouble."),
            ("Das gibt Ärger.", "That means trouble."),
        ),
        (
            ("Zug 4 kam zu spät / zu früh.", "Train 4 was late / early."),
            ("Der Zug war unpünktlich.", "It was late."),
        ),
    ]
    assert corpus.skipped == {
        # Haus, Häuser, Rechner, Rechner {pl}, kaputt, Abbau, nach Abzug von …, eine Absage an
        # etw., jdm. etw. erklären, etw. aufgeben, Namedropping
        "word or phrase, not a sentence": 11,
        "duplicate pair": 2,
        "no ' :: ' between German and English": 1,
        "'|' sub-entries do not align": 1,
        "empty after removing annotations": 1,
    }


def test_parser_option_keeps_words_and_phrases(ding_file):
    pairs = ding.parse(ding_file, include_phrases=True).pairs
    assert ("Haus", "house") in pairs and ("Häuser", "houses") in pairs
    assert ("Rechner", "computer") in pairs and ("kaputt", "broken") in pairs
    assert ("Abbau", "decay") in pairs  # the ';' inside parentheses does not split the entry
    assert ("eine Absage an etw.", "a rejection of sth.") in pairs
    assert ("Das Haus ist groß.", "The house is big.") in pairs
    # Other spellings and a separable verb's <> go, nested annotations whole.
    assert ("etw. aufgeben", "to give up sth.") in pairs
    assert ("Namedropping", "name-dropping") in pairs
    assert not any(set("<>()") & set(de + en) for de, en in pairs)


def test_split_is_deterministic_disjoint_and_sized():
    pairs = [(f"Satz Nummer {i}.", f"Sentence number {i}.") for i in range(20000)]
    splits = ding.split_pairs(pairs)
    assert ding.split_pairs(pairs) == splits
    assert sum(len(v) for v in splits.values()) == 20000
    seen = [set(de for de, _ in v) for v in splits.values()]
    assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    for split in ("validation", "test"):
        assert 600 <= len(splits[split]) <= 1000, (split, len(splits[split]))


def test_split_keeps_phrases_apart_and_no_sentence_in_two_splits():
    sentences = [(f"Satz Nummer {i}.", f"Sentence number {i}.") for i in range(3000)]
    phrases = [(f"wort{i}", f"word{i}") for i in range(3000)]
    held_out = [de for de, _ in sentences if ding.split_of(de) != "train"]
    # Another German sentence, in train by its hash, with the English of a held-out pair.
    in_train = next(
        f"Anderer Satz {i}." for i in range(100) if ding.split_of(f"Anderer Satz {i}.") == "train"
    )
    shared_english = dict(sentences)[held_out[0]]
    # Phrases that share a side with a held-out sentence: the German of one, the English of another.
    leaking = [
        (held_out[1], "a phrase"),
        ("eine Phrase", dict(sentences)[held_out[2]]),
        (held_out[3].lower().rstrip("."), "one more phrase"),
    ]
    splits = ding.split_pairs(sentences + phrases + leaking + [(in_train, shared_english)])
    assert sorted(splits["phrases"]) == sorted(phrases)  # the leaking phrases are dropped
    assert all(
        ding.split_of(de) == name for name in ("validation", "test") for de, _ in splits[name]
    )
    assert (held_out[0], shared_english) in splits["train"]
    english = [set(en for _, en in pairs) for pairs in splits.values()]
    assert not (english[0] & english[1] or english[0] & english[2] or english[1] & english[2])
    # The held-out splits are the same with and without the phrases.
    without = ding.split_pairs(sentences + [(in_train, shared_english)])
    assert "phrases" not in without
    assert all(without[name] == splits[name] for name in ("train", "validation", "test"))
    # Alternatives are training data only, as phrases are, less the sentence pairs: a group
    # listed with a held-out sentence goes whole, its pairs that share no side with one too
    # (`A; B :: X; Y` with A held out: B, Y is a paraphrase of it). The splits stay as they are.
    trained = [pair for pair in sentences if ding.split_of(pair[0]) == "train"]
    groups = [
        (trained[0], (trained[0][0], "Another sentence.")),
        (("Ein anderer Satz.", trained[1][1]),),
        (("Noch ein Satz.", "One more sentence."), (trained[0][0], "Another sentence.")),
    ]
    held_out_pair = (held_out[4], dict(sentences)[held_out[4]])
    paraphrase = ("Ein Satz dazu.", "A sentence with it.")
    with_held_out = (
        held_out_pair,
        (held_out_pair[0], paraphrase[1]),
        (paraphrase[0], held_out_pair[1]),
        paraphrase,
    )
    with_alternatives = ding.split_pairs(sentences, [*groups, with_held_out])
    assert sorted(with_alternatives.pop("alternatives")) == sorted(  # a pair of two groups once
        [groups[0][1], *groups[1], groups[2][0]]
    )
    assert with_alternatives == ding.split_pairs(sentences)


def test_training_mixture_repeats_each_sentence_among_the_phrases(ding_file, tmp_path):
    with pytest.raises(
        ValueError, match="holds no phrases split: prepare the corpus with include_phrases=True"
    ):
        ding.training_mixture(ding.prepare(tmp_path / "cache", ding_file=ding_file, verbose=0), 3)
    dataset_dir = ding.prepare(
        tmp_path / "cache", ding_file=ding_file, include_phrases=True, verbose=0
    )
    report = json.loads((dataset_dir / "report.json").read_text())
    assert report["splits"]["phrases"] > 0
    sentences = [
        (de.decode(), en.decode()) for de, en in ding.load("train", dataset_dir).as_numpy_iterator()
    ]
    phrases = [
        (de.decode(), en.decode())
        for de, en in ding.load("phrases", dataset_dir).as_numpy_iterator()
    ]
    assert set(phrases) == set(ding.parse(ding_file, include_phrases=True).pairs) - set(
        ding.parse(ding_file).pairs
    )
    mixed = [
        (de.decode(), en.decode())
        for de, en in ding.training_mixture(dataset_dir, 3, seed=1).as_numpy_iterator()
    ]
    assert sorted(mixed) == sorted(sentences * 3 + phrases)
    # With the alternatives: the other sentence pairs of the training sub-entries, repeated as
    # sentences; none of those listed with a validation sentence ("Was ist los?", "Zug 4 ...").
    alternatives = [
        (de.decode(), en.decode())
        for de, en in ding.load("alternatives", dataset_dir).as_numpy_iterator()
    ]
    assert sorted(alternatives) == sorted(
        [
            ("Ich halte das für einen Fehler.", "I regard that as a mistake."),
            ("Vielen Dank!", "Thanks a lot!"),
            ("Danke schön!", "Thank you!"),
            ("Danke schön!", "Thanks a lot!"),
            ("Das gibt Ärger.", "That means trouble."),
        ]
    )
    with_alternatives = [
        (de.decode(), en.decode())
        for de, en in ding.training_mixture(
            dataset_dir, 3, seed=1, alternatives=True
        ).as_numpy_iterator()
    ]
    assert sorted(with_alternatives) == sorted((sentences + alternatives) * 3 + phrases)
    only_first = tmp_path / "only-first"
    only_first.write_text("Haus {n} :: house\nEs regnet. :: It is raining.\n", encoding="utf-8")
    without = ding.prepare(
        tmp_path / "other", ding_file=only_first, include_phrases=True, verbose=0
    )
    with pytest.raises(ValueError, match="holds no alternatives split: its dictionary lists no"):
        ding.training_mixture(without, 3, alternatives=True)
    tagged = [
        (de.decode(), en.decode())
        for de, en in ding.training_mixture(dataset_dir, 3, seed=1, tag=True).as_numpy_iterator()
    ]  # the same pairs in the same order, the phrases' sources (only) behind the tag
    assert tagged == [
        (f"{ding.PHRASE_TAG} {de}" if (de, en) in phrases else de, en) for de, en in mixed
    ]
    reversed_pair = next(
        ding.training_mixture(dataset_dir, 1, reverse=True, seed=1).as_numpy_iterator()
    )
    assert tuple(side.decode() for side in reversed_pair[::-1]) in set(sentences + phrases)
    with pytest.raises(ValueError, match="sentence_repeats must be a positive integer, got 0"):
        ding.training_mixture(dataset_dir, 0)


def test_a_tagged_mixture_tags_the_training_phrases_only(ding_file, tmp_path):
    """--tag-phrases through the programs' Dataset: of the train split only the phrase pairs'
    sources begin with the tag, the other splits hold none, and the tokenizer trained on the
    split keeps the tag one piece."""
    import shutil

    import tensorflow as tf

    from training.datasets import Dataset, train_tokenizer

    cached = tmp_path / "cache" / ding.DEBIAN_PACKAGE / ding.PACKAGE_FILE
    cached.parent.mkdir(parents=True)
    shutil.copyfile(ding_file, cached)  # as fetched: the Dataset prepares it
    dataset = Dataset(
        "ding", data_dir=tmp_path / "cache", phrases=True, sentence_repeats=2, tag_phrases=True
    )
    phrases = [
        de.decode() for de, _ in ding.load("phrases", dataset.dataset_dir).as_numpy_iterator()
    ]
    sentences = [
        de.decode() for de, _ in ding.load("train", dataset.dataset_dir).as_numpy_iterator()
    ]
    tag = f"{ding.PHRASE_TAG} "
    sources = [source for source, _ in dataset.pairs("train")]
    assert sorted(s.removeprefix(tag) for s in sources if s.startswith(tag)) == sorted(phrases)
    assert sorted(s for s in sources if not s.startswith(tag)) == sorted(sentences * 2)
    for split in set(ding.tfds_splits(dataset.dataset_dir)) - {"train", "phrases"}:
        assert not any(ding.PHRASE_TAG in side for pair in dataset.pairs(split) for side in pair)
    tokenizer = train_tokenizer(dataset, 400, tmp_path / "tokenizer.model")
    ids = tokenizer.tokenize(tf.constant([f"{tag}Haus"])).to_list()[0]
    assert ding.PHRASE_TAG in [tokenizer.id_to_piece(i) for i in ids]
    # --sentence-alternatives: the dictionary's other translations repeated with the sentences.
    widened = Dataset(
        "ding",
        data_dir=tmp_path / "cache",
        phrases=True,
        sentence_repeats=2,
        sentence_alternatives=True,
    )
    alternatives = ding.load("alternatives", dataset.dataset_dir).as_numpy_iterator()
    sources = [source for source, _ in widened.pairs("train")]
    assert sorted(sources) == sorted(
        sentences * 2 + [de.decode() for de, _ in alternatives] * 2 + phrases
    )


def fake_tools(tmp_path, apt_exit=0):
    """apt-get and dpkg stand-ins on PATH: download writes a .deb, dpkg -x unpacks the file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f'if [ {apt_exit} -ne 0 ]; then echo "E: Unable to locate package $2" >&2; exit '
        f"{apt_exit}; fi\n"
        'echo fake > "trans-de-en_1.9-6_all.deb"\n'
    )
    (bin_dir / "dpkg").write_text(
        "#!/bin/sh\n"
        'mkdir -p "$3/usr/share/trans" && printf "%s\\n" "Das ist gut. :: That is good." > '
        '"$3/usr/share/trans/de-en"\n'
    )
    for tool in ("apt-get", "dpkg"):
        (bin_dir / tool).chmod(stat.S_IRWXU)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_fetch_downloads_and_extracts_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_tools(tmp_path))
    path = debian.fetch_file(
        ding.DEBIAN_PACKAGE, ding.PACKAGE_FILE, tmp_path / "cache", root=tmp_path / "not-installed"
    )
    assert path == tmp_path / "cache" / "trans-de-en" / "usr/share/trans/de-en"
    assert path.read_text() == "Das ist gut. :: That is good.\n"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["trans-de-en"]  # no temporary left
    monkeypatch.setenv("PATH", "/nonexistent")
    assert (
        debian.fetch_file(
            ding.DEBIAN_PACKAGE,
            ding.PACKAGE_FILE,
            tmp_path / "cache",
            root=tmp_path / "not-installed",
        )
        == path
    )  # cached


def test_fetch_failure_is_clear_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_tools(tmp_path, apt_exit=100))
    with pytest.raises(
        CorpusError,
        match=r"'apt-get download trans-de-en' failed with exit code 100: "
        r"E: Unable to locate package trans-de-en \(run 'apt-get update' first",
    ):
        debian.fetch_file(
            ding.DEBIAN_PACKAGE,
            ding.PACKAGE_FILE,
            tmp_path / "cache",
            root=tmp_path / "not-installed",
        )
    assert list((tmp_path / "cache").iterdir()) == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(CorpusError, match="cannot run apt-get: not found"):
        debian.fetch_file(
            ding.DEBIAN_PACKAGE,
            ding.PACKAGE_FILE,
            tmp_path / "cache",
            root=tmp_path / "not-installed",
        )


def test_prepare_stores_a_tfds_dataset_once(ding_file, tmp_path):
    dataset_dir = ding.prepare(tmp_path / "cache", ding_file=ding_file, verbose=0)
    report = json.loads((dataset_dir / "report.json").read_text())
    assert report["pairs"] == 11 and sum(report["splits"].values()) == 11
    pairs = set()
    for split in (name for name, count in report["splits"].items() if count):
        for de, en in ding.load(split, dataset_dir).as_numpy_iterator():
            assert ding.split_of(de.decode()) == split
            pairs.add((de.decode(), en.decode()))
    assert pairs == set(ding.parse(ding_file).pairs)
    english, german = next(ding.load("train", dataset_dir, reverse=True).as_numpy_iterator())
    assert (german.decode(), english.decode()) in pairs
    info = dataset_dir / "dataset_info.json"
    prepared_at = info.stat().st_mtime_ns
    assert ding.prepare(tmp_path / "cache", ding_file=ding_file, verbose=0) == dataset_dir
    assert info.stat().st_mtime_ns == prepared_at  # prepared once, then reused
    ding_file.write_text(
        FIXTURE + "Wir kommen morgen. :: We are coming tomorrow.\n", encoding="utf-8"
    )
    ding.prepare(tmp_path / "cache", ding_file=ding_file, verbose=0)  # a changed file is re-parsed
    assert json.loads((dataset_dir / "report.json").read_text())["pairs"] == report["pairs"] + 1
    ding_file.unlink()
    with pytest.raises(CorpusError, match="de-en: no such file"):
        ding.prepare(tmp_path / "cache", ding_file=ding_file, verbose=0)
    with pytest.raises(ValueError, match=r"the Ding dataset has splits \[.*'train'.*\], not 'dev'"):
        ding.load("dev", dataset_dir)


def test_command_line(ding_file, tmp_path, capsys):
    """The program's help, a run and a missing file (test_console.py runs it as a command)."""
    from training import prepare_ding

    with pytest.raises(SystemExit) as exit_info:
        prepare_ding.main(["--help"])
    help_text = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "--data-dir" in help_text and "--phrases" in help_text and "--ding-file" in help_text
    prepare_ding.main(["--ding-file", str(ding_file), "--data-dir", str(tmp_path / "cache")])
    printed = capsys.readouterr().out
    assert "11 pairs kept" in printed and "dataset written to" in printed
    with pytest.raises(SystemExit) as exit_info:
        prepare_ding.main(["--ding-file", str(tmp_path / "absent"), "--data-dir", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "absent: no such file" in capsys.readouterr().err
