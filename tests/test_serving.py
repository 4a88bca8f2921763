"""The TensorFlow Serving clients and configuration, against a protocol-faithful stand-in
(tests/serving_standin.py) that runs real exported SavedModels."""

import io
import json
import pathlib
import re
import socket
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
import yaml
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,
)
from serving_standin import ModelServerStandIn
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    model_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

import keras_transformer as kt
from keras_transformer_cli.versions import export_for_serving
from serving import client as serving_client
from serving.client import GrpcClient, RestClient, ServingError

REPO = pathlib.Path(__file__).resolve().parents[1]
SERVING = REPO / "serving"
CLIENTS = [RestClient, GrpcClient]


@pytest.fixture(scope="module")
def server(number_translator, tmp_path_factory):
    """Model `numbers`: version 1 (beam 4) and version 2 (greedy), labelled stable and canary."""
    model, tokenizer, pairs = number_translator
    base = tmp_path_factory.mktemp("models") / "numbers"
    export_for_serving(kt.Translator(model, tokenizer, beam_size=4), base)
    export_for_serving(kt.Translator(model, tokenizer, beam_size=1), base)
    with ModelServerStandIn("numbers", base, labels={"stable": 1, "canary": 2}) as stand_in:
        stand_in.pairs = pairs[:6]
        yield stand_in


@pytest.fixture(autouse=True)
def _healthy(request):
    """Tests that use the stand-in find it without delay or pending failures."""
    if "server" in request.fixturenames:
        server = request.getfixturevalue("server")
        server.delay = 0.0
        server.fail_next(0)


def client_for(server, kind, **options):
    port = server.rest_port if kind is RestClient else server.grpc_port
    return kind("127.0.0.1", port, model="numbers", **options)


def http(server, path, body=None):
    """(status, JSON answer) of a raw REST request."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"http://127.0.0.1:{server.rest_port}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# The REST protocol.


@pytest.mark.slow
def test_rest_status_and_metadata(server):
    status, answer = http(server, "/v1/models/numbers")
    assert status == 200
    assert answer == {
        "model_version_status": [
            {
                "version": str(v),
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
            for v in (2, 1)
        ]
    }
    assert (
        http(server, "/v1/models/numbers/versions/1")[1]["model_version_status"][0]["version"]
        == "1"
    )

    status, answer = http(server, "/v1/models/numbers/labels/stable/metadata")
    assert status == 200
    assert answer["model_spec"] == {"name": "numbers", "signature_name": "", "version": "1"}
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate", "score"} <= set(signatures)
    translate = signatures["translate"]
    assert translate["method_name"] == "tensorflow/serving/predict"
    assert set(translate["inputs"]) == {"sentences", "target_prefix"}
    for name in ("sentences", "target_prefix"):
        assert translate["inputs"][name]["dtype"] == "DT_STRING"
        assert translate["inputs"][name]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]
    assert set(signatures["score"]["inputs"]) == {"sources", "targets"}
    assert {name: output["dtype"] for name, output in translate["outputs"].items()} == {
        "translation": "DT_STRING",
        "score": "DT_FLOAT",
        "tokens": "DT_INT32",
        "nbest_translations": "DT_STRING",
        "nbest_scores": "DT_FLOAT",
        "alignment": "DT_FLOAT",
        "source_tokens": "DT_INT32",
        "source_cut": "DT_BOOL",
        "prefix_cut": "DT_BOOL",
    }


@pytest.mark.slow
def test_rest_predict_row_and_columnar(server):
    german, english = zip(*server.pairs)
    status, rows = http(server, "/v1/models/numbers:predict", {"instances": list(german)})
    assert status == 200
    assert [p["translation"] for p in rows["predictions"]] == list(english)
    stable = http(server, "/v1/models/numbers/labels/stable:predict", {"instances": german})[1]
    for p in rows["predictions"] + stable["predictions"]:  # the row format: all outputs of one
        assert p["score"] < 0 and p["nbest_translations"][0] == p["translation"]
        assert p["nbest_scores"][0] == p["score"]
        assert len(p["nbest_scores"]) == (4 if p in stable["predictions"] else 1)  # the beam
    for answer in (rows, stable):  # alignment rows: the batch's longest translation, with eos
        longest = max(sum(t != 0 for t in p["tokens"]) for p in answer["predictions"])
        for p in answer["predictions"]:
            assert len(p["alignment"]) == longest
            assert {len(row) for row in p["alignment"]} == {len(p["source_tokens"])}

    named = http(
        server,
        "/v1/models/numbers:predict",
        {
            "signature_name": "translate",
            "instances": [{"sentences": s, "target_prefix": ""} for s in german],
        },
    )[1]
    assert not any(p.pop("prefix_cut") for p in named["predictions"])  # an empty prefix fits
    assert named == rows

    status, columns = http(
        server, "/v1/models/numbers:predict", {"inputs": {"sentences": list(german)}}
    )
    assert status == 200
    assert columns["outputs"]["translation"] == list(english)
    assert columns["outputs"]["score"] == [p["score"] for p in rows["predictions"]]
    assert http(server, "/v1/models/numbers:predict", {"inputs": list(german)})[1] == columns

    # Version 2 (greedy) by label and by number; the numbers task needs no beam to be exact.
    canary = http(server, "/v1/models/numbers/labels/canary:predict", {"instances": list(german)})[
        1
    ]
    assert [p["translation"] for p in canary["predictions"]] == list(english)
    assert (
        http(server, "/v1/models/numbers/versions/2:predict", {"instances": list(german)})[1]
        == canary
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "path, body, status, message",
    [
        (
            "/v1/models/words:predict",
            {"instances": ["eins"]},
            404,
            r"Servable not found for request: Latest\(words\)",
        ),
        (
            "/v1/models/numbers/versions/7:predict",
            {"instances": ["eins"]},
            404,
            r"Specific\(numbers, 7\)",
        ),
        (
            "/v1/models/numbers:predict",
            {"signature_name": "classify", "instances": ["eins"]},
            400,
            r'Serving signature name: "classify" not found in signature def',
        ),
        ("/v1/models/numbers:predict", b"{'instances': [", 400, r"JSON Parse error"),
        (
            "/v1/models/numbers:predict",
            {"instances": ["eins"], "inputs": ["eins"]},
            400,
            r"expecting only one of 'inputs' or 'instances' keys to exist",
        ),
        (
            "/v1/models/numbers:predict",
            {"signature_name": "translate"},
            400,
            r"Missing 'inputs' or 'instances' key",
        ),
        ("/v1/models/numbers:predict", {"instances": []}, 400, r"No values in 'instances' array"),
        (
            "/v1/models/numbers:predict",
            {"instances": [{"text": "eins"}]},
            400,
            r"keys of every object must be equal to \['sentences'\]",
        ),
        (
            "/v1/models/numbers:classify",
            {"instances": ["eins"]},
            400,
            r"Malformed request: POST /v1/models/numbers:classify",
        ),
        ("/v1/models/words", None, 404, r"Could not find any versions of model words"),
        ("/v1/models/numbers/versions/7", None, 404, r"Could not find version 7 of model numbers"),
    ],
)
def test_rest_errors(server, path, body, status, message):
    answer_status, answer = http(server, path, body)
    assert answer_status == status
    assert set(answer) == {"error"} and re.search(message, answer["error"])


# The gRPC protocol, with the official protos.


@pytest.mark.slow
def test_grpc_predict_and_metadata(server):
    german, english = zip(*server.pairs)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name="numbers", signature_name="translate")
        )
        request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(list(german), dtype=tf.string))
        prefixes = tf.make_tensor_proto([""] * len(german), dtype=tf.string)
        request.inputs["target_prefix"].CopyFrom(prefixes)
        response = stub.Predict(request, timeout=60)
        assert [t.decode() for t in tf.make_ndarray(response.outputs["translation"])] == list(
            english
        )
        assert (
            response.model_spec.version.value == 2
            and response.model_spec.signature_name == "translate"
        )
        assert tf.make_ndarray(response.outputs["tokens"]).shape[0] == len(german)

        metadata = stub.GetModelMetadata(
            get_model_metadata_pb2.GetModelMetadataRequest(
                model_spec=model_pb2.ModelSpec(name="numbers", version_label="stable"),
                metadata_field=["signature_def"],
            ),
            timeout=60,
        )
        signatures = get_model_metadata_pb2.SignatureDefMap()
        assert metadata.metadata["signature_def"].Unpack(signatures)
        assert metadata.model_spec.version.value == 1
        assert (
            signatures.signature_def["serving_default"].inputs["sentences"].dtype
            == tf.string.as_datatype_enum
        )

        request.model_spec.name = "words"
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, timeout=60)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert "Servable not found for request: Latest(words)" in error.value.details()


# The clients.


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_client_translates_and_reports(server, kind):
    german, english = zip(*server.pairs)
    results = client_for(server, kind).translate(german)
    assert [r.text for r in results] == list(english)
    assert all(isinstance(r, kt.Translation) and r.score < 0 for r in results)
    for result in client_for(server, kind, label="stable").translate(german):  # beam 4
        assert result.n_best[0] == (result.text, result.score) and len(result.n_best) == 4
        assert [score for _, score in result.n_best] == sorted(
            (score for _, score in result.n_best), reverse=True
        )
        # One row per real token (the words and eos), one column per source piece and eos.
        assert len(result.alignment) == len(result.tokens) and result.tokens[-1] == 3
        assert result.source_tokens[-1] == 3
        assert all(len(row) == len(result.source_tokens) for row in result.alignment)
        np.testing.assert_allclose([sum(row) for row in result.alignment], 1.0, atol=1e-5)
    assert [r.text for r in client_for(server, kind, label="canary").translate(german)] == list(
        english
    )
    calls = server.calls
    assert [r.text for r in client_for(server, kind, batch_size=4).translate(german)] == list(
        english
    )
    assert server.calls - calls == 2  # 6 sentences, at most 4 a request

    # A target prefix (the translate signature) and scores (the score signature).
    prefixes = ["zero"] + [""] * (len(german) - 1)
    prefixed = client_for(server, kind, label="stable").translate(german, target_prefix=prefixes)
    assert prefixed[0].text.startswith("zero ") and prefixed[0].text != english[0]
    assert [r.text for r in prefixed[1:]] == list(english[1:])
    scored = client_for(server, kind, label="stable").score(german, english)
    beam = client_for(server, kind, label="stable").translate(german)
    np.testing.assert_allclose([s.score for s in scored], [r.score for r in beam], atol=1e-4)
    assert [len(s.token_scores) for s in scored] == [len(r.tokens) for r in beam]
    np.testing.assert_allclose(
        [s.log_prob for s in scored], [sum(s.token_scores) for s in scored], atol=1e-4
    )

    # Status and metadata in the REST JSON form, whichever the protocol.
    assert client_for(server, kind).status() == http(server, "/v1/models/numbers")[1]
    assert (
        client_for(server, kind, version=1).status()
        == http(server, "/v1/models/numbers/versions/1")[1]
    )
    assert (
        client_for(server, kind, label="stable").metadata()
        == http(server, "/v1/models/numbers/labels/stable/metadata")[1]
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_client_errors_carry_the_servers_message(server, kind):
    with pytest.raises(
        ServingError, match=r'Serving signature name: "classify" not found'
    ) as error:
        client_for(server, kind, signature="classify").translate(["eins"])
    assert error.value.code in (400, "INVALID_ARGUMENT")
    with pytest.raises(
        ServingError, match=r"Servable not found for request: Specific\(numbers, 9\)"
    ) as error:
        client_for(server, kind, version=9).translate(["eins"])
    assert error.value.code in (404, "NOT_FOUND")


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_client_retries_unavailable_a_bounded_number_of_times(server, kind):
    server.fail_next(2)
    calls = server.calls
    assert client_for(server, kind, retries=2).translate(["eins zwei"])[0].text == "one two"
    assert server.calls - calls == 3

    server.fail_next(10)
    calls = server.calls
    with pytest.raises(
        ServingError,
        match=(
            r"unavailable \((REST|gRPC), 3 attempts within 30 s\): the model server is not ready "
            r"yet"
        ),
    ) as error:
        client_for(server, kind, retries=2).translate(["eins"])
    assert error.value.code == "UNAVAILABLE" and server.calls - calls == 3


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_the_server_says_which_sentences_it_cut(server, kind):
    """A server answers every sentence of a batch: the outputs source_cut and prefix_cut say
    which inputs were longer than the model holds, and the client hands them on."""
    long = " ".join(["eins zwei drei vier fünf"] * 10)
    answers = client_for(server, kind).translate(["eins", long], target_prefix=["", long])
    assert [answer.cut for answer in answers] == [(), ("source", "prefix")]
    scored = client_for(server, kind).score(["eins", "zwei"], ["one", long])
    assert [result.cut for result in scored] == [(), ("target",)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_client_gives_up_at_its_timeout(server, kind):
    server.delay = 3.0
    start = time.monotonic()
    with pytest.raises(ServingError, match="no answer within") as error:
        client_for(server, kind, timeout=0.5).translate(["eins"])
    assert time.monotonic() - start < server.delay  # it did not wait for the server's answer
    assert error.value.code == "DEADLINE_EXCEEDED"


@pytest.mark.parametrize("kind", CLIENTS)
def test_unreachable_server_is_reported_within_the_timeout(kind):
    with socket.socket() as probe:  # a port on which nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ServingError, match=rf"127.0.0.1:{port} is unavailable") as error:
        kind("127.0.0.1", port, timeout=2.0, retries=100).translate(["eins"])
    assert time.monotonic() - start < 2.0 + 1.0
    assert error.value.code == "UNAVAILABLE"


@pytest.mark.slow
@pytest.mark.parametrize("kind", CLIENTS)
def test_client_refuses_empty_and_oversized_requests_before_sending(server, kind):
    calls = server.calls
    with pytest.raises(ValueError, match="nothing to translate"):
        client_for(server, kind).translate([])
    with pytest.raises(
        ValueError, match=r"the request for 2 sentences is \d+ bytes, over the limit of 200 bytes"
    ):
        client_for(server, kind, max_request_bytes=200).translate(["eins " * 20, "zwei " * 20])
    with pytest.raises(TypeError, match="sentence 1 is a bytes, not a str"):
        client_for(server, kind).translate(["eins", b"zwei"])
    assert server.calls == calls


@pytest.mark.slow
def test_command_line(server, capsys, tmp_path):
    german, english = zip(*server.pairs)
    rest = ["--port", str(server.rest_port), "--host", "127.0.0.1", "--model-name", "numbers"]
    serving_client.main([*rest, *german[:2]])
    assert capsys.readouterr().out.splitlines() == list(english[:2])

    (tmp_path / "de.txt").write_text("\n".join(german) + "\n", encoding="utf-8")
    serving_client.main(
        [
            "--protocol",
            "grpc",
            "--port",
            str(server.grpc_port),
            "--host",
            "127.0.0.1",
            "--model-name",
            "numbers",
            "--source",
            str(tmp_path / "de.txt"),
            "--batch-size",
            "4",
            "--scores",
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in lines] == list(english)
    assert all(float(line.split("\t")[0]) < 0 for line in lines)

    serving_client.main(rest, stdin=io.StringIO(german[0] + "\n"))
    assert capsys.readouterr().out.splitlines() == [english[0]]

    serving_client.main([*rest, "--status"])
    assert json.loads(capsys.readouterr().out)["model_version_status"][0]["version"] == "2"

    serving_client.main([*rest, "--target-prefix", "zero", german[0]])
    assert capsys.readouterr().out.startswith("zero ")
    (tmp_path / "en.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    (tmp_path / "short.txt").write_text(english[0] + "\n", encoding="utf-8")
    files = ["--source", str(tmp_path / "de.txt"), "--target", str(tmp_path / "en.txt")]
    serving_client.main([*rest, *files, "--normalized", "--tokens"])
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    tokens = [[float(t) for t in tokens.split()] for _, tokens in lines]
    assert len(lines) == len(german) and all(float(score) < 0 for score, _ in lines)
    assert [float(score) for score, _ in lines] == pytest.approx(  # log P / lp, alpha 0.6
        [sum(t) / ((5 + len(t)) / 6) ** 0.6 for t in tokens], abs=1e-4
    )

    long = " ".join(["eins zwei drei vier fünf"] * 10)  # beyond the model's 32 positions
    with pytest.raises(SystemExit) as exit_info:
        serving_client.main([*rest, german[0], long])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1 and captured.out.splitlines()[0] == english[0]
    assert "sentence 2: the source is longer than the served model holds" in captured.err

    for arguments, stdin, message in [
        (rest, "", "nothing to translate: give sentences as arguments, with --source, or on stdin"),
        (
            [*rest, "--source", str(tmp_path / "missing.txt")],
            "",
            r"--source .*missing.txt: no such file",
        ),
        ([*rest, "--model-name", "words", "eins"], "", r"HTTP 404: Servable not found"),
        (
            [*rest, *files[:3], str(tmp_path / "short.txt")],
            "",
            r"--target .*short.txt has 1 lines for 6 source sentences",
        ),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            serving_client.main(arguments, stdin=io.StringIO(stdin))
        assert exit_info.value.code == 1
        assert re.search(message, capsys.readouterr().err)


# The files in serving/.


def config_message(name, fields):
    """A message class for a TensorFlow Serving config proto, built from its field list in
    tensorflow_serving (the pip package ships the API protos, not these two)."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{name}.proto",
        package="tensorflow.serving",
        dependency=["google/protobuf/wrappers.proto"],
        syntax="proto3",
    )
    for message_name, message_fields in fields.items():
        message = file.message_type.add(name=message_name)
        for number, (field, kind, label) in enumerate(message_fields, start=1):
            entry = message.field.add(name=field, number=number, label=label)
            if kind.startswith("."):
                entry.type, entry.type_name = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, kind
            else:
                entry.type = getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{kind}")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))


OPTIONAL, REPEATED = (
    descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
)
INT64 = (".google.protobuf.Int64Value", OPTIONAL)
BatchingParameters = config_message(
    "BatchingParameters",
    {
        "BatchingParameters": [  # session_bundle_config.proto
            ("max_batch_size", *INT64),
            ("batch_timeout_micros", *INT64),
            ("max_enqueued_batches", *INT64),
            ("num_batch_threads", *INT64),
            ("thread_pool_name", ".google.protobuf.StringValue", OPTIONAL),
            ("allowed_batch_sizes", "INT64", REPEATED),
            ("pad_variable_length_inputs", "BOOL", OPTIONAL),
        ]
    },
)
MonitoringConfig = config_message(
    "MonitoringConfig",
    {  # monitoring_config.proto
        "PrometheusConfig": [("enable", "BOOL", OPTIONAL), ("path", "STRING", OPTIONAL)],
        "MonitoringConfig": [
            ("prometheus_config", ".tensorflow.serving.PrometheusConfig", OPTIONAL)
        ],
    },
)


def test_models_config_is_a_model_server_config():
    config = text_format.Parse(
        (SERVING / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "transformer",
        "/models/transformer",
        "tensorflow",
    )
    assert model.model_version_policy.latest.num_versions == 1


def test_documented_rollout_configs_parse():
    """The roll-out and roll-back configs of docs/serving.md are valid ModelServerConfig text
    protos."""
    page = (REPO / "docs" / "serving.md").read_text()
    blocks = re.findall(r"```(?:protobuf|textproto)\n(.*?)```", page, re.S)
    policies = []
    for block in blocks:
        config = text_format.Parse(block, model_server_config_pb2.ModelServerConfig())
        (model,) = config.model_config_list.config
        policies.append(
            (list(model.model_version_policy.specific.versions), dict(model.version_labels))
        )
    assert ([1, 2], {"stable": 1}) in policies  # roll-out: both versions served
    assert ([1, 2], {"stable": 1, "canary": 2}) in policies  # then version 2 labelled
    assert ([1], {"stable": 1}) in policies  # roll-back: version 1 only


def test_batching_and_monitoring_configs_parse():
    batching = text_format.Parse((SERVING / "batching.config").read_text(), BatchingParameters())
    assert (
        batching.max_batch_size.value == serving_client.BATCH_SIZE
    )  # the client's default request size
    assert batching.num_batch_threads.value >= 1
    assert batching.batch_timeout_micros.value > 0
    monitoring = text_format.Parse((SERVING / "monitoring.config").read_text(), MonitoringConfig())
    assert monitoring.prometheus_config.enable
    assert monitoring.prometheus_config.path == "/monitoring/prometheus/metrics"


def test_compose_file_pins_the_tensorflow_release():
    compose = yaml.safe_load((SERVING / "docker-compose.yml").read_text())
    release = ".".join(tf.__version__.split(".")[:2])
    cpu, gpu = compose["services"]["serving"], compose["services"]["serving-gpu"]
    assert cpu["image"] == f"tensorflow/serving:{release}.0"
    assert gpu["image"] == f"tensorflow/serving:{release}.0-gpu" and gpu["profiles"] == ["gpu"]
    assert cpu["ports"] == ["8500:8500", "8501:8501"]
    flags = dict(flag.lstrip("-").split("=", 1) for flag in cpu["command"])
    assert flags["enable_batching"] == "true"
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in cpu["volumes"]}
    for flag in ("model_config_file", "batching_parameters_file", "monitoring_config_file"):
        assert (SERVING / mounts[flags[flag]]).is_file(), flag
    assert mounts["/models"] == "../exports"
