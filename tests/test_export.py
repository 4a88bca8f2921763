"""The SavedModel with its translate signature, as TensorFlow Serving would load it."""

import io
import json
import textwrap
from contextlib import chdir

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_python

import keras_transformer as kt
from keras_transformer.exports import read_search_settings
from keras_transformer_cli.versions import export_for_serving


@pytest.fixture(scope="module")
def exported(number_translator, tmp_path_factory):
    model, tokenizer, pairs = number_translator
    base = tmp_path_factory.mktemp("exports") / "numbers"
    return export_for_serving(kt.Translator(model, tokenizer), base), pairs


# The ops a SavedModel's graph uses, printed as one line "OPS {json}" of those core TensorFlow
# registers and those tensorflow_text adds (`ops_of` reads it).
OP_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry
    import tensorflow as tf
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(sys.argv[1] + "/saved_model.pb", "rb").read())
    graph = proto.meta_graphs[0].graph_def
    used = {node.op for node in graph.node}
    for function in graph.library.function:
        used |= {node.op for node in function.node_def}
    functions = {function.signature.name for function in graph.library.function}
    used -= functions  # calls of the graph's own functions
    core = {op for op in used if op_def_registry.get(op) is not None}
    import tensorflow_text  # registers its ops
    text = {op for op in used - core if op_def_registry.get(op) is not None}
    print("OPS " + json.dumps({"used": sorted(used), "core": sorted(core), "text": sorted(text)}))
    """
)


def ops_of(printed):
    """The {"used", "core", "text"} ops of OP_SCRIPT's line in `printed`."""
    (line,) = [line for line in printed.splitlines() if line.startswith("OPS ")]
    return json.loads(line.removeprefix("OPS "))


# One fresh process, as TensorFlow Serving has, where keras_transformer cannot be imported: the
# ops the graph uses (OP_SCRIPT), its translations of the sentences given, then
# `saved_model_cli run` of its signature.
FRESH_PROCESS = (
    'import sys\nsys.modules["keras_transformer"] = None  # any import of it fails\n'
    + OP_SCRIPT
    + textwrap.dedent(
        """
        translate = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
        translations = translate(sentences=tf.constant(sys.argv[2:]))["translation"].numpy()
        print("TRANSLATIONS " + json.dumps([t.decode() for t in translations]))
        print("SAVED_MODEL_CLI", flush=True)
        from tensorflow.python.tools import saved_model_cli
        sys.argv = ["saved_model_cli", "run", "--dir", sys.argv[1], "--tag_set", "serve",
                    "--signature_def", "serving_default",
                    "--input_exprs", 'sentences=["drei eins vier"]']
        saved_model_cli.main()
        """
    )
)


@pytest.fixture(scope="module")
def fresh_process(exported, tmp_path_factory):
    """FRESH_PROCESS run on the export with the held-out sources: (the ops its graph uses, as
    {"used", "core", "text"}; its translations; what `saved_model_cli run` printed)."""
    version_dir, pairs = exported
    out = run_python(
        "-c",
        FRESH_PROCESS,
        str(version_dir),
        *[de for de, _ in pairs],
        cwd=tmp_path_factory.mktemp("fresh-process"),
    ).stdout
    before, cli = out.split("SAVED_MODEL_CLI\n", 1)
    lines = dict(line.split(" ", 1) for line in before.splitlines() if " " in line)
    return json.loads(lines["OPS"]), json.loads(lines["TRANSLATIONS"]), cli


@pytest.mark.slow
def test_translates_exactly_from_a_fresh_process(exported, fresh_process, capsys):
    """The SavedModel translates exactly in a process without keras_transformer; serving.translate
    reads sentences from standard input, and --target-prefix starts the translation."""
    from serving import translate

    version_dir, pairs = exported
    assert version_dir.name == "1"
    _, translations, _ = fresh_process
    assert translations == [en for _, en in pairs]
    translate.main(["--model", str(version_dir.parent)], stdin=io.StringIO(pairs[0][0] + "\n"))
    assert capsys.readouterr().out.splitlines() == [pairs[0][1]]
    other_start = (
        pairs[1][1].split()[0] if pairs[1][1].split()[0] != pairs[0][1].split()[0] else "zero"
    )
    translate.main(["--model", str(version_dir), "--target-prefix", other_start, pairs[0][0]])
    prefixed = capsys.readouterr().out
    assert prefixed.startswith(other_start + " ") and prefixed.strip() != pairs[0][1]


@pytest.mark.slow
def test_load_translator_opens_an_export_in_one_call(exported, number_translator, tmp_path):
    """`kt.load_translator` on the base directory (its highest version): each sentence's best
    translation, its n best (best first, the first being the best), and forced decoding of the
    best giving its own score; what the export cannot do is refused, naming it. A .keras model
    with its tokenizer beside it translates alike."""
    version_dir, pairs = exported
    sources, targets = [s for s, _ in pairs[:4]], [t for _, t in pairs[:4]]
    translator = kt.load_translator(version_dir.parent)
    assert translator.description == f"SavedModel {version_dir}"
    best = translator.translate(sources)
    assert [t.text for t in best] == targets and all(not t.cut for t in best)
    nbest = translator.translate(sources, n_best=3)
    for hypotheses, top in zip(nbest, best):
        scores = [h.score for h in hypotheses]
        assert len(hypotheses) == 3 and hypotheses[0] == top
        assert scores == sorted(scores, reverse=True)
    scored = translator.score(sources, targets)
    np.testing.assert_allclose([s.score for s in scored], [t.score for t in best], rtol=1e-5)
    prefixed = translator.translate(sources[:2], n_best=2, target_prefix=["zero", ""])
    assert all(h.text.startswith("zero ") for h in prefixed[0])
    assert prefixed[1][0].text == best[1].text  # an empty prefix: none
    with pytest.raises(ValueError, match="2 sentences but 1 target_prefix"):
        translator.translate(sources[:2], target_prefix=["zero"])
    with pytest.raises(ValueError, match=r"n_best 5: SavedModel .* keeps the 4 best"):
        translator.translate(sources, n_best=5)
    with pytest.raises(ValueError, match="n_best must be a whole number of at least 1, got 0"):
        translator.translate(sources, n_best=0)
    with pytest.raises(TypeError, match="sentences must be a list of strings, not one string"):
        translator.translate(sources[0])
    with pytest.raises(
        kt.inference.ExportedSearchMismatch,
        match=r"beam_size=2: the SavedModel .*/1 searches with beam_size=4, as it was exported",
    ):
        kt.load_translator(version_dir.parent, beam_size=2)
    with pytest.raises(FileNotFoundError, match="holds no SavedModel"):
        kt.load_translator(tmp_path)
    model, tokenizer, _ = number_translator
    model.save(tmp_path / "model.keras")
    with pytest.raises(FileNotFoundError, match="tokenizer.model: no such tokenizer"):
        kt.load_translator(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    from_keras = kt.load_translator(tmp_path / "model.keras").translate(sources)
    assert [t.text for t in from_keras] == targets


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["variables.data-00000-of-00001", "variables.index"])
def test_a_cut_saved_model_is_named(exported, tmp_path, capsys, cut):
    """A SavedModel whose variables file is cut: the programs that read it say which export and
    what to do, in one line."""
    import shutil

    from serving import score, translate

    version_dir, pairs = exported
    copy = shutil.copytree(version_dir, tmp_path / "numbers" / "1")
    variables = copy / "variables" / cut
    variables.write_bytes(variables.read_bytes()[: variables.stat().st_size // 2])
    (tmp_path / "src").write_text(pairs[0][0] + "\n")
    for program, argv in (
        (translate, [pairs[0][0]]),
        (score, ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "src")]),
    ):
        with pytest.raises(SystemExit) as exit_info:
            program.main(["--model", str(tmp_path / "numbers"), *argv])
        err = capsys.readouterr().err
        assert exit_info.value.code == 1 and len(err.strip().splitlines()) == 1
        assert f"error: {copy}: not a readable SavedModel (" in err
        assert "if a file of it is cut or damaged, copy or export it again" in err


@pytest.mark.slow
def test_translate_program_prints_the_n_best(exported, capsys):
    """`--n-best N`: N lines per sentence, INDEX<TAB>SCORE<TAB>TRANSLATION, best first; more than
    the export keeps is refused naming the flag, none is a usage error."""
    from serving import translate

    version_dir, pairs = exported
    model = ["--model", str(version_dir.parent)]
    translate.main([*model, "--n-best", "2", pairs[0][0], pairs[1][0]])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in rows] == ["0", "0", "1", "1"]
    assert [rows[0][2], rows[2][2]] == [pairs[0][1], pairs[1][1]]
    assert float(rows[0][1]) >= float(rows[1][1]) and float(rows[2][1]) >= float(rows[3][1])
    with pytest.raises(SystemExit) as exit_info:
        translate.main([*model, "--n-best", "5", pairs[0][0]])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1 and captured.out == ""
    assert f"--n-best 5: SavedModel {version_dir} keeps the 4 best translations" in captured.err
    with pytest.raises(SystemExit) as exit_info:
        translate.main([*model, "--n-best", "0", pairs[0][0]])
    assert exit_info.value.code == 2
    assert "argument --n-best: expected an integer of at least 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_score_program(exported, tmp_path, capsys):
    """serving.score writes one score per line of --target (the SavedModel's score signature),
    with token scores (--normalized: test_serving's command line); a --target out of line with
    --source, or missing, is refused in one line."""
    from serving import score as score_program

    version_dir, pairs = exported
    (tmp_path / "de.txt").write_text("".join(f"{de}\n" for de, _ in pairs[:5]))
    (tmp_path / "en.txt").write_text("".join(f"{en}\n" for _, en in pairs[:5]))
    (tmp_path / "short.txt").write_text(pairs[0][1] + "\n")
    files = ["--source", str(tmp_path / "de.txt"), "--target", str(tmp_path / "en.txt")]
    output = tmp_path / "scores.txt"
    model = ["--model", str(version_dir)]
    score_program.main([*model, *files, "--tokens", "--output", str(output)])
    score = tf.saved_model.load(str(version_dir)).signatures["score"]
    expected = score(
        sources=tf.constant([de for de, _ in pairs[:5]]),
        targets=tf.constant([en for _, en in pairs[:5]]),
    )
    lines = [line.split("\t") for line in output.read_text().splitlines()]
    np.testing.assert_allclose([float(s) for s, _ in lines], expected["log_prob"], atol=1e-5)
    for (_, tokens), row in zip(lines, expected["token_scores"].numpy()):
        np.testing.assert_allclose([float(t) for t in tokens.split()], row[row != 0], atol=1e-5)
    capsys.readouterr()
    for argv, status, message in (
        (files[:3] + [str(tmp_path / "short.txt")], 1, "has 1 lines for 5 source sentences"),
        (files[:2], 2, "the following arguments are required: --target"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            score_program.main([*model, *argv])
        assert exit_info.value.code == status
        assert message in capsys.readouterr().err


@pytest.mark.slow
def test_graph_uses_only_core_and_tensorflow_text_ops(fresh_process):
    ops, _, _ = fresh_process
    unknown = set(ops["used"]) - set(ops["core"]) - set(ops["text"])
    assert not unknown, f"ops neither core TensorFlow nor tensorflow-text: {unknown}"
    assert not [op for op in ops["used"] if op.startswith("Xla") or "PyFunc" in op]
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= set(
        ops["text"]
    )


TRANSLATION_OUTPUTS = {
    "translation": tf.string,
    "score": tf.float32,
    "tokens": tf.int32,
    "nbest_translations": tf.string,
    "nbest_scores": tf.float32,
    "alignment": tf.float32,
    "source_tokens": tf.int32,
    "source_cut": tf.bool,
}
SIGNATURES = {  # name: (inputs, outputs)
    "serving_default": ({"sentences"}, TRANSLATION_OUTPUTS),
    "translate": ({"sentences", "target_prefix"}, {**TRANSLATION_OUTPUTS, "prefix_cut": tf.bool}),
    "score": (
        {"sources", "targets"},
        {
            "score": tf.float32,
            "log_prob": tf.float32,
            "token_scores": tf.float32,
            "tokens": tf.int32,
            "source_cut": tf.bool,
            "target_cut": tf.bool,
        },
    ),
}


@pytest.mark.slow
def test_signature_outputs_are_dense_with_a_batch_dimension(exported):
    from tensorflow.core.protobuf import saved_model_pb2

    version_dir, _ = exported
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((version_dir / "saved_model.pb").read_bytes())
    signatures = proto.meta_graphs[0].signature_def
    assert set(signatures) - {"__saved_model_init_op"} == set(SIGNATURES)
    for signature_name, (inputs, expected) in SIGNATURES.items():
        signature = signatures[signature_name]
        assert set(signature.inputs) == inputs
        assert all(info.dtype == tf.string.as_datatype_enum for info in signature.inputs.values())
        assert set(signature.outputs) == set(expected)
        for name, info in signature.outputs.items():
            assert info.dtype == expected[name].as_datatype_enum, name  # not DT_INVALID (ragged)
            dims = [d.size for d in info.tensor_shape.dim]
            assert dims and dims[0] == -1, (name, dims)


@pytest.mark.slow
def test_saved_model_cli_runs_the_signature(fresh_process):
    _, _, out = fresh_process
    assert "three one four" in out


@pytest.mark.slow
def test_warmup_records_are_prediction_logs_the_model_answers(exported):
    from tensorflow_serving.apis import prediction_log_pb2

    version_dir, _ = exported
    path = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    records = [
        prediction_log_pb2.PredictionLog.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(str(path))
    ]
    assert records and all(r.HasField("predict_log") for r in records)
    translate = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    for record in records:
        request = record.predict_log.request
        assert request.model_spec.signature_name == "serving_default"
        assert (
            request.model_spec.name == version_dir.parent.name
        )  # the model name TF Serving loads it under
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        outputs = translate(**{name: tf.constant(value) for name, value in inputs.items()})
        assert outputs["translation"].shape[0] == len(inputs["sentences"])


@pytest.mark.slow
def test_bad_input_never_errors_and_stays_bounded(exported, number_translator):
    version_dir, _ = exported
    translate = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    empty = translate(sentences=tf.constant([], tf.string))
    assert empty["translation"].shape == (0,) and empty["score"].shape == (0,)
    inputs = [
        b"",
        b"   ",
        b"zwei " * 2000,
        b"drei \xff\xfe vier",
        "😀👍🏽 日本語 Привет".encode(),
        b"eins",
    ]
    outputs = translate(sentences=tf.constant(inputs))
    assert outputs["translation"].shape == (len(inputs),) and outputs["score"].shape == (
        len(inputs),
    )
    assert np.all(np.isfinite(outputs["score"].numpy()))
    for text in outputs["translation"].numpy():
        text.decode("utf-8")  # always valid UTF-8


@pytest.mark.slow
def test_long_sources_are_truncated_and_outputs_bounded(number_translator):
    model, tokenizer, _ = number_translator
    translator = kt.Translator(model, tokenizer, beam_size=2, extra_length=3, max_source_length=8)
    sentences = tf.constant(["zwei " * 2000, "drei vier", ""])
    source, cut = (t.numpy() for t in translator.source_ids(sentences))
    assert source.shape == (3, 8) and source[0, -1] == 3  # 7 pieces, then eos
    assert cut.tolist() == [True, False, False]  # said, not silent
    translated = translator.translate(sentences)
    assert translated["source_cut"].numpy().tolist() == [True, False, False]
    tokens = translated["tokens"].numpy()
    for row, src in zip(tokens, source):
        assert np.count_nonzero(row) <= np.count_nonzero(src) + 3
    with pytest.raises(
        ValueError, match="max_source_length must be in 2..config.max_length=32, got 64"
    ):
        kt.Translator(model, tokenizer, max_source_length=64)


@pytest.mark.slow
def test_export_is_atomic_and_never_overwrites(number_translator, tmp_path, monkeypatch):
    model, tokenizer, _ = number_translator
    translator = kt.Translator(model, tokenizer, beam_size=1)
    assert export_for_serving(translator, tmp_path / "m").name == "1"
    assert export_for_serving(translator, tmp_path / "m").name == "2"
    assert export_for_serving(translator, tmp_path / "m", version=7).name == "7"
    with pytest.raises(
        FileExistsError, match="7 already exists; a served version is never overwritten"
    ):
        export_for_serving(translator, tmp_path / "m", version=7)

    def failing_save(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(RuntimeError, match="disk full"):
        export_for_serving(translator, tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "1",
        "2",
        "7",
    ]  # nothing half-written
    assert oct((tmp_path / "m" / "1").stat().st_mode & 0o777) == "0o755"
    with pytest.raises(RuntimeError, match="disk full"):  # into folders it had to make
        export_for_serving(translator, tmp_path / "new" / "m")
    assert not (tmp_path / "new").exists()  # a failed export leaves nothing it made


@pytest.mark.slow
def test_export_program(number_translator, tmp_path, capsys):
    """serving.export's and serving.translate's --help name --model; serving.export writes a
    .keras model's export as version 1, naming it, and refuses an existing version."""
    from serving import export, translate

    model, tokenizer, pairs = number_translator
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    for program in (export, translate):
        with pytest.raises(SystemExit) as exit_info:
            program.main(["--help"])
        assert exit_info.value.code == 0 and "--model" in capsys.readouterr().out
    flags = ["--model", str(tmp_path / "model.keras")]
    flags += ["--export-dir", str(tmp_path / "exports" / "numbers")]
    export.main([*flags, "--beam-size", "2"])
    out = capsys.readouterr().out
    assert out.strip().endswith(str(tmp_path / "exports" / "numbers" / "1"))
    with pytest.raises(SystemExit) as exit_info:
        export.main([*flags, "--version", "1"])
    assert exit_info.value.code == 1 and "already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_translator_refuses_a_mismatched_tokenizer(number_translator):
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=1000))
    with pytest.raises(
        ValueError, match="the tokenizer has .* pieces but the model's vocab_size is"
    ):
        kt.Translator(model, number_translator[1])


@pytest.mark.slow
def test_attention_of_a_translation(number_translator):
    """Translator.attention: one row per output piece (eos included), one column per source
    piece (eos included), each row a distribution, for the translation the model gives."""
    model, tokenizer, pairs = number_translator
    source, target = pairs[0]
    translator = kt.Translator(model, tokenizer, beam_size=1)
    pieces, translation, weights = translator.attention(source)
    config = model.config
    assert pieces == [
        tokenizer.id_to_piece(int(i)) for i in tokenizer.tokenize([source])[0].numpy()
    ] + ["</s>"]
    assert (
        translation[-1] == "</s>"
        and "".join(translation[:-1]).replace("\u2581", " ").strip() == target
    )
    assert weights.shape == (config.num_layers, config.num_heads, len(translation), len(pieces))
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_nbest_and_alignment_outputs(exported, number_translator):
    model, tokenizer, _ = number_translator
    version_dir, pairs = exported
    translate = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    sentences = tf.constant([de for de, _ in pairs[:5]] + [""])  # sources of several lengths
    out = {name: value.numpy() for name, value in translate(sentences=sentences).items()}

    # The n-best list: K = the beam size, best first; column 0 is the translation.
    assert out["nbest_translations"].shape == out["nbest_scores"].shape == (6, 4)
    np.testing.assert_array_equal(out["nbest_translations"][:, 0], out["translation"])
    np.testing.assert_array_equal(out["nbest_scores"][:, 0], out["score"])
    assert (np.diff(out["nbest_scores"], axis=1) <= 0).all()
    assert len(set(out["nbest_translations"][0])) == 4  # distinct hypotheses

    # The alignment: [B, L, S] over the best translation's tokens and the source ids.
    translator = kt.Translator(model, tokenizer)
    np.testing.assert_array_equal(out["source_tokens"], translator.source_ids(sentences)[0].numpy())
    longest = int((out["tokens"] != 0).sum(axis=1).max())  # the rows stop there
    tokens, source = out["tokens"][:, :longest], out["source_tokens"]
    assert (out["tokens"][:, longest:] == 0).all()
    alignment = out["alignment"]
    assert alignment.shape == (6, longest, source.shape[1])
    real_rows, real_columns = tokens != 0, source != 0
    np.testing.assert_allclose(alignment.sum(-1)[real_rows], 1.0, atol=1e-5)
    assert (alignment[~real_rows] == 0).all()
    assert (alignment.transpose(0, 2, 1)[~real_columns] == 0).all()
    # It is the last decoder layer's attention averaged over heads, as recomputed here.
    target_in = np.concatenate([np.full((6, 1), 2), tokens[:, :-1]], axis=1)
    weights = kt.encoder_decoder_attention(model, source, target_in)[-1].numpy()
    np.testing.assert_allclose(alignment[real_rows], weights.mean(axis=1)[real_rows], atol=1e-6)


@pytest.mark.slow
def test_translator_lists_fewer_hypotheses_when_asked(number_translator):
    model, tokenizer, pairs = number_translator
    out = kt.Translator(model, tokenizer, beam_size=4, nbest=2).translate(
        tf.constant([pairs[0][0]])
    )
    assert out["nbest_translations"].shape == out["nbest_scores"].shape == (1, 2)
    assert out["nbest_translations"][0, 0].numpy().decode() == pairs[0][1]
    with pytest.raises(ValueError, match="nbest must be in 1..beam_size=4, got 5"):
        kt.Translator(model, tokenizer, beam_size=4, nbest=5)


@pytest.mark.slow
def test_xla_translator_translates_as_the_exported_one(number_translator):
    """jit_compile pads the source to a multiple of 16 for XLA and cuts the outputs back: the
    same translations, scores and token shapes (its export: test_xla_export.py)."""
    model, tokenizer, pairs = number_translator
    sentences = tf.constant([source for source, _ in pairs[:6]] + ["", "7 " * 20])
    plain = kt.Translator(model, tokenizer).translate(sentences)
    xla_translator = kt.Translator(model, tokenizer, jit_compile=True)
    compiled = xla_translator.translate(sentences)
    for name in ("translation", "nbest_translations", "tokens", "source_tokens"):
        np.testing.assert_array_equal(compiled[name].numpy(), plain[name].numpy(), err_msg=name)
    for name in ("score", "nbest_scores", "alignment"):
        np.testing.assert_allclose(compiled[name], plain[name], atol=1e-4, err_msg=name)


@pytest.mark.slow
def test_prefix_and_score_signatures_answer_as_the_library(exported, number_translator):
    """`translate` with empty prefixes answers as `serving_default`; a prefix starts the
    translation, as kt.beam_search with its ids does; `score` gives forced decoding's scores
    (kt.score), and for a translation it equals the score beam search reported."""
    model, tokenizer, _ = number_translator
    version_dir, pairs = exported
    signatures = tf.saved_model.load(str(version_dir)).signatures
    sentences = tf.constant([de for de, _ in pairs[:4]])
    plain = signatures["serving_default"](sentences=sentences)
    empty = signatures["translate"](sentences=sentences, target_prefix=tf.constant([""] * 4))
    for name, value in plain.items():
        np.testing.assert_array_equal(empty[name], value, err_msg=name)

    prefixes = ["", "five", "seven seven", "one"]
    prefixed = signatures["translate"](sentences=sentences, target_prefix=tf.constant(prefixes))
    texts = [t.decode() for t in prefixed["translation"].numpy()]
    assert all(text.startswith(prefix) for text, prefix in zip(texts, prefixes))
    assert texts[0] == plain["translation"][0].numpy().decode() and texts[1:] != [
        t.decode() for t in plain["translation"].numpy()[1:]
    ]
    prefix_ids = tokenizer.tokenize(tf.constant(prefixes), padded=True)
    source, _ = kt.Translator(model, tokenizer).source_ids(sentences)
    ids, scores = kt.beam_search(model, source, target_prefix=prefix_ids)
    width = prefixed["tokens"].shape[1]
    np.testing.assert_array_equal(prefixed["tokens"], ids[:, 0, :width])
    np.testing.assert_allclose(prefixed["score"], scores[:, 0], atol=1e-5)

    scored = signatures["score"](sources=sentences, targets=prefixed["translation"])
    ended = (prefixed["tokens"].numpy() == 3).any(axis=1)  # not cut at the bound: eos scored
    assert ended.sum() >= 3
    length = scored["tokens"].shape[1]
    np.testing.assert_array_equal(scored["tokens"][ended], prefixed["tokens"][:, :length][ended])
    np.testing.assert_allclose(scored["score"][ended], prefixed["score"][ended], atol=1e-4)
    tokens, sums = kt.score(model, source, scored["tokens"])
    np.testing.assert_allclose(scored["token_scores"], tokens, atol=1e-5)
    np.testing.assert_allclose(scored["log_prob"], sums, atol=1e-5)


@pytest.mark.slow
def test_a_saved_model_without_a_signature_says_to_export_again(exported):
    """A SavedModel whose `translate` takes sentences alone and that has no `score` signature:
    a prefix or a score is refused, naming what to do; plain translation works."""
    from keras_transformer.inference import SignatureTranslator

    version_dir, pairs = exported
    loaded = tf.saved_model.load(str(version_dir)).signatures
    old = {"serving_default": loaded["serving_default"], "translate": loaded["serving_default"]}
    engine = SignatureTranslator(old, "SavedModel old/1")
    assert engine.translate([pairs[0][0]])[0].text == pairs[0][1]
    with pytest.raises(
        ValueError, match="old/1 has no 'translate' signature taking 'target_prefix'"
    ):
        engine.translate([pairs[0][0]], target_prefix=["one"])
    with pytest.raises(ValueError, match="no 'score' signature .* export the model again"):
        engine.score([pairs[0][0]], [pairs[0][1]])


@pytest.mark.slow
def test_a_saved_model_refuses_a_search_it_was_not_exported_with(exported, tmp_path, capsys):
    """The search is part of the exported graph (beam 4, alpha 0.6 here): a program asked for
    another refuses, naming the flag and how to export one; the export's own settings, or none
    given, translate."""
    from serving import score, translate

    version_dir, pairs = exported
    settings = read_search_settings(version_dir)
    assert settings["beam_size"] == 4 and settings["alpha"] == 0.6 and not settings["sampling"]
    assert settings["max_length"] == 32 == settings["max_source_length"]
    sentence = pairs[0][0]
    for program, argv, flag in (
        (translate, ["--beam-size", "1", sentence], "--beam-size 1"),
        (translate, ["--extra-length", "5", sentence], "--extra-length 5"),
        (score, ["--alpha", "1.0", "--source", "S", "--target", "T"], "--alpha 1.0"),
    ):
        (tmp_path / "S").write_text(sentence + "\n")
        (tmp_path / "T").write_text(pairs[0][1] + "\n")
        with pytest.raises(SystemExit) as exit_info:
            with chdir(tmp_path):
                program.main(["--model", str(version_dir), *argv])
        assert exit_info.value.code == 1
        own = {"--beam-size": 4, "--extra-length": 50, "--alpha": 0.6}[flag.split()[0]]
        assert (
            f"{flag}: the SavedModel {version_dir} searches with {flag.split()[0]} {own}, as it "
            "was exported; leave" in capsys.readouterr().err
        )
    translate.main(["--model", str(version_dir), "--beam-size", "4", sentence])
    assert capsys.readouterr().out.strip() == pairs[0][1]
