"""The XLA export (`serving.export --jit-compile`): its search is one function marked for XLA
(tokenizing, detokenizing and the alignment outside it), it translates as the graph export does,
and where XLA compilation is disabled, as in TensorFlow Serving started without
--xla_cpu_compilation_enabled=true, its warm-up request (the server replays it on load) fails
while the graph export's answers."""

import textwrap

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_python
from test_export import OP_SCRIPT, ops_of

import keras_transformer as kt
from keras_transformer.exports import read_search_settings


@pytest.fixture(scope="module")
def exports(number_translator, tmp_path_factory):
    """The number translator exported by the program without and with --jit-compile: {"graph":
    version 1, "xla": version 2}, and its held-out pairs."""
    from serving import export

    model, tokenizer, pairs = number_translator
    root = tmp_path_factory.mktemp("xla-exports")
    model.save(root / "model.keras")
    tokenizer.save(root / "tokenizer.model")
    argv = ["--model", str(root / "model.keras"), "--export-dir", str(root / "numbers")]
    export.main(argv)
    export.main([*argv, "--jit-compile"])
    return {"graph": root / "numbers" / "1", "xla": root / "numbers" / "2"}, pairs


def compiled_whole(version_dir):
    """{name: ops} of the saved functions marked `_XlaMustCompile` (compiled whole by XLA), each
    with the ops of the functions it calls (its loop's body and condition)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((version_dir / "saved_model.pb").read_bytes())
    library = {f.signature.name: f for f in proto.meta_graphs[0].graph_def.library.function}

    def ops(name):
        found = set()
        for node in library[name].node_def:
            found.add(node.op)
            for value in node.attr.values():
                called = [value.func.name, *(f.name for f in value.list.func)]
                found |= set().union(*(ops(c) for c in called if c in library))
        return found

    return {
        name: ops(name)
        for name, function in library.items()
        if "_XlaMustCompile" in function.attr and function.attr["_XlaMustCompile"].b
    }


@pytest.mark.slow
def test_the_xla_export_translates_as_the_graph_export(exports):
    """Both translating signatures answer alike (translations, n-best and tokens exactly; scores
    and alignment to float tolerance); the XLA export's search is its one function marked for
    XLA, with no tokenizer op inside; without the flag, nothing is marked."""
    version_dirs, pairs = exports
    sentences = tf.constant([de for de, _ in pairs[:5]] + ["", "sieben " * 20])
    prefixes = tf.constant(["", "five", "", "one one", "", "", "two"])
    answers = {}
    for kind in ("graph", "xla"):
        signatures = tf.saved_model.load(str(version_dirs[kind])).signatures
        answers[kind] = (
            signatures["serving_default"](sentences=sentences),
            signatures["translate"](sentences=sentences, target_prefix=prefixes),
        )
    for graph, xla in zip(answers["graph"], answers["xla"]):
        assert set(graph) == set(xla)
        for name, expected in graph.items():
            if expected.dtype == tf.float32:
                np.testing.assert_allclose(xla[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)
            else:
                np.testing.assert_array_equal(xla[name], expected, err_msg=name)
    translations = [t.decode() for t in answers["xla"][0]["translation"].numpy()]
    assert translations[:5] == [en for _, en in pairs[:5]]

    marked = compiled_whole(version_dirs["xla"])
    assert marked and all(name.startswith("__inference_search_ids_") for name in marked)
    assert all({"While", "MatMul"} <= ops for ops in marked.values())  # the whole search
    assert not any(op.startswith("Sentencepiece") for ops in marked.values() for op in ops)
    assert compiled_whole(version_dirs["graph"]) == {}
    settings = {kind: read_search_settings(d)["jit_compile"] for kind, d in version_dirs.items()}
    assert settings == {"graph": False, "xla": True}
    xla_dir = version_dirs["xla"]
    assert kt.load_translator(xla_dir.parent).description == f"SavedModel {xla_dir}, XLA"


# In one fresh process: the ops of the export argv[1] (OP_SCRIPT); then what
# tensorflow_model_server's main() does without --xla_cpu_compilation_enabled=true
# (tensorflow::DisableXlaCompilation, called through its C++ symbol), and the warm-up requests
# of the exports argv[2:], which the server replays on load: a failed one fails the version's load.
WITHOUT_XLA = OP_SCRIPT + textwrap.dedent(
    """
    import ctypes
    import tensorflow_text
    from tensorflow_serving.apis import prediction_log_pb2
    library = ctypes.CDLL(tf.sysconfig.get_lib() + "/libtensorflow_cc.so.2")
    getattr(library, "_ZN10tensorflow21DisableXlaCompilationEv")()
    for version_dir in sys.argv[2:]:
        signatures = tf.saved_model.load(version_dir).signatures
        warmup = version_dir + "/assets.extra/tf_serving_warmup_requests"
        for record in tf.data.TFRecordDataset(warmup):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            request = log.predict_log.request
            inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
            try:
                signatures[request.model_spec.signature_name](**inputs)
                print("answered")
            except tf.errors.InternalError as error:
                print("refused:", " ".join(error.message.split()))
    """
)


@pytest.mark.slow
def test_the_xla_export_is_refused_where_xla_compilation_is_disabled(exports):
    """The server's model loader sees core TensorFlow and tensorflow-text ops only, as in the
    graph export; without XLA compilation the graph export answers its warm-up request and the
    XLA export's fails, naming the cause."""
    version_dirs, _ = exports
    graph, xla = str(version_dirs["graph"]), str(version_dirs["xla"])
    out = run_python("-c", WITHOUT_XLA, xla, graph, xla).stdout
    ops = ops_of(out)
    assert set(ops["used"]) == set(ops["core"]) | set(ops["text"])
    answered, refused = [line for line in out.splitlines() if not line.startswith("OPS ")]
    assert answered == "answered"
    assert refused.startswith("refused:") and "XLA compilation disabled" in refused


def test_the_flag_is_documented_and_takes_no_value(capsys):
    from serving import export

    parser = export.build_parser()
    assert "--xla_cpu_compilation_enabled=true" in " ".join(parser.format_help().split())
    assert parser.parse_args(["--model", "m", "--export-dir", "e", "--jit-compile"]).jit_compile
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--model", "m", "--export-dir", "e", "--jit-compile=yes"])
    assert exit_info.value.code == 2
    assert "argument --jit-compile: ignored explicit argument 'yes'" in capsys.readouterr().err
