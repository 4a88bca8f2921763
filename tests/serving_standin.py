"""A stand-in for TensorFlow Serving's model server, for tests only (not a product server).

The model server binary cannot be installed here, so the clients are tested against this:
the REST API of TensorFlow Serving's `api_rest.md` and the gRPC `PredictionService` /
`ModelService`, with the official protos, over real SavedModels in `base_path/<version>/`.
It implements what the clients and the tests use, the way the server answers it:

    GET  /v1/models/NAME[/versions/N|/labels/L]            status JSON
    GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature JSON
    POST /v1/models/NAME[/versions/N|/labels/L]:predict    "instances" (row) or "inputs" (columnar)

and errors as {"error": "..."} with the HTTP status the server maps its error code to, in the
order the server checks (JSON, then model and version, then signature, then the inputs).
Test hooks: `fail_next(n)` answers the next n calls with UNAVAILABLE, `delay` holds every
answer back.
"""

import concurrent.futures
import http.server
import json
import pathlib
import re
import threading
import time

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the tokenizer ops of the exported graph)
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    status_pb2,
)

HTTP_STATUS = {  # TensorFlow Serving's mapping of its error codes to HTTP (http_rest_api_util).
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.INTERNAL: 500,
}
MODEL_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?(?P<rest>.*)$"
)


class ServingFailure(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


class Servable:
    """One loaded version: its signatures as functions and as SignatureDef protos."""

    def __init__(self, version_dir):
        self.dir = pathlib.Path(version_dir)
        proto = saved_model_pb2.SavedModel()
        proto.ParseFromString((self.dir / "saved_model.pb").read_bytes())
        self.signature_defs = proto.meta_graphs[0].signature_def
        self.functions = tf.saved_model.load(str(self.dir)).signatures

    def run(self, signature_name, inputs):
        """`inputs`: {name: numpy array}; returns {name: numpy array}, checked like the server."""
        signature_name = signature_name or "serving_default"
        if signature_name not in self.signature_defs:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'Serving signature name: "{signature_name}" not found in signature def',
            )
        expected = self.signature_defs[signature_name].inputs
        if set(inputs) != set(expected):
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input names {sorted(inputs)} do not match the signature's {sorted(expected)}",
            )
        try:
            tensors = {
                name: tf.constant(value, tf.as_dtype(expected[name].dtype))
                for name, value in inputs.items()
            }
            outputs = self.functions[signature_name](**tensors)
        except (TypeError, ValueError, tf.errors.InvalidArgumentError) as error:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT, str(error).splitlines()[0]
            ) from error
        return {name: value.numpy() for name, value in outputs.items()}


class ModelServerStandIn:
    """Serves `base_path/<version>` SavedModels as model `name` on REST and gRPC (ports chosen
    free on 127.0.0.1). `versions` (default: all) are loaded; `labels` maps labels to versions."""

    def __init__(self, name, base_path, versions=None, labels=None):
        self.name, self.base_path = name, pathlib.Path(base_path)
        found = sorted(int(p.name) for p in self.base_path.iterdir() if p.name.isdigit())
        self.servables = {v: Servable(self.base_path / str(v)) for v in (versions or found)}
        self.labels = dict(labels or {})
        self.delay, self._failures, self.calls = 0.0, 0, 0
        self._lock = threading.Lock()

    # The model server's behaviour, shared by both protocols.

    def fail_next(self, count):
        self._failures = count

    def _enter(self):
        with self._lock:
            self.calls += 1
            failing = self._failures > 0
            self._failures -= failing
        time.sleep(self.delay)
        if failing:
            raise ServingFailure(grpc.StatusCode.UNAVAILABLE, "the model server is not ready yet")

    def servable(self, name, version=None, label=None):
        """The version a request names: explicit, by label, or the latest."""
        if name != self.name:
            raise ServingFailure(
                grpc.StatusCode.NOT_FOUND, f"Servable not found for request: Latest({name})"
            )
        if label is not None:
            if label not in self.labels:
                raise ServingFailure(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Unrecognized servable version label: {label}",
                )
            version = self.labels[label]
        if version is None:
            version = max(self.servables)
        if int(version) not in self.servables:
            raise ServingFailure(
                grpc.StatusCode.NOT_FOUND,
                f"Servable not found for request: Specific({name}, {version})",
            )
        return int(version), self.servables[int(version)]

    def status(self, name, version=None):
        """The server's GetModelStatus: one version, or all (newest first; labels are ignored)."""
        self._enter()
        if name != self.name:
            raise ServingFailure(
                grpc.StatusCode.NOT_FOUND, f"Could not find any versions of model {name}"
            )
        if version is not None and int(version) not in self.servables:
            raise ServingFailure(
                grpc.StatusCode.NOT_FOUND, f"Could not find version {version} of model {name}"
            )
        versions = [int(version)] if version is not None else sorted(self.servables, reverse=True)
        return get_model_status_pb2.GetModelStatusResponse(
            model_version_status=[
                get_model_status_pb2.ModelVersionStatus(
                    version=v,
                    state=get_model_status_pb2.ModelVersionStatus.AVAILABLE,
                    status=status_pb2.StatusProto(),
                )
                for v in versions
            ]
        )

    def metadata(self, name, version=None, label=None):
        self._enter()
        version, servable = self.servable(name, version, label)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name, response.model_spec.version.value = name, version
        response.metadata["signature_def"].Pack(
            get_model_metadata_pb2.SignatureDefMap(signature_def=servable.signature_defs)
        )
        return response

    def predict(self, request):
        """A PredictRequest answered with a PredictResponse (both protocols end here)."""
        self._enter()
        spec = request.model_spec
        version, servable = self.servable(
            spec.name,
            spec.version.value if spec.HasField("version") else None,
            spec.version_label or None,
        )
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        outputs = servable.run(spec.signature_name, inputs)
        response = predict_pb2.PredictResponse()
        response.model_spec.name, response.model_spec.version.value = spec.name, version
        response.model_spec.signature_name = spec.signature_name or "serving_default"
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        return response

    # REST: JSON in and out, as api_rest.md describes.

    def rest_predict(self, name, version, label, body):
        try:
            payload = json.loads(body)
        except ValueError as error:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT, f"JSON Parse error: {error}"
            ) from error
        if not isinstance(payload, dict):
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT, f"JSON Value: {body[:100]!r} Is not object"
            )
        if "instances" in payload and "inputs" in payload:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                "JSON object: expecting only one of 'inputs' or 'instances' keys to exist",
            )
        if "instances" not in payload and "inputs" not in payload:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT, "Missing 'inputs' or 'instances' key"
            )
        signature_name = payload.get("signature_name", "serving_default")
        _, servable = self.servable(name, version, label)
        if signature_name not in servable.signature_defs:
            raise ServingFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'Serving signature name: "{signature_name}" not found in signature def',
            )
        input_names = list(servable.signature_defs[signature_name].inputs)
        if "instances" in payload:
            rows = payload["instances"]
            if not isinstance(rows, list) or not rows:
                raise ServingFailure(
                    grpc.StatusCode.INVALID_ARGUMENT, "No values in 'instances' array"
                )
            if all(isinstance(row, dict) for row in rows):
                if any(set(row) != set(input_names) for row in rows):
                    raise ServingFailure(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "instances: the keys of every object must be equal to "
                        f"{sorted(input_names)}",
                    )
                inputs = {key: [row[key] for row in rows] for key in input_names}
            elif len(input_names) == 1:
                inputs = {input_names[0]: rows}
            else:
                raise ServingFailure(
                    grpc.StatusCode.INVALID_ARGUMENT, "instances must be objects naming the inputs"
                )
        else:
            columns = payload["inputs"]
            inputs = columns if isinstance(columns, dict) else {input_names[0]: columns}
        request = predict_pb2.PredictRequest()
        request.model_spec.name, request.model_spec.signature_name = name, signature_name
        if version is not None:
            request.model_spec.version.value = int(version)
        if label is not None:
            request.model_spec.version_label = label
        for key, value in inputs.items():
            try:
                request.inputs[key].CopyFrom(
                    tf.make_tensor_proto(np.array(value, dtype=object if _is_text(value) else None))
                )
            except (TypeError, ValueError) as error:
                raise ServingFailure(
                    grpc.StatusCode.INVALID_ARGUMENT, f"input {key!r}: {error}"
                ) from error
        outputs = {
            key: _to_json(tf.make_ndarray(proto))
            for key, proto in self.predict(request).outputs.items()
        }
        single = (
            next(iter(outputs.values())) if len(outputs) == 1 else None
        )  # one output: plain values
        if "instances" in payload:
            batch = len(next(iter(outputs.values())))
            return {
                "predictions": single
                if single is not None
                else [{k: v[i] for k, v in outputs.items()} for i in range(batch)]
            }
        return {"outputs": single if single is not None else outputs}

    def rest_get(self, name, version, label, rest):
        if rest == "":
            status = self.status(name, version)
            return json_format.MessageToDict(
                status, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
        if rest == "/metadata":
            response = self.metadata(name, version, label)
            signatures = get_model_metadata_pb2.SignatureDefMap()
            response.metadata["signature_def"].Unpack(signatures)
            return {
                "model_spec": {
                    "name": name,
                    "signature_name": "",
                    "version": str(response.model_spec.version.value),
                },
                "metadata": {
                    "signature_def": json_format.MessageToDict(
                        signatures,
                        preserving_proto_field_name=True,
                        always_print_fields_with_no_presence=True,
                    )
                },
            }
        raise ServingFailure(
            grpc.StatusCode.INVALID_ARGUMENT, f"Malformed request: GET /v1/models/{name}{rest}"
        )

    # Starting and stopping both servers.

    def __enter__(self):
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self._answer(
                    lambda match: stand_in.rest_get(
                        match["name"], match["version"], match["label"], match["rest"]
                    )
                )

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))

                def predict(match):
                    if match["rest"] != ":predict":
                        raise ServingFailure(
                            grpc.StatusCode.INVALID_ARGUMENT, f"Malformed request: POST {self.path}"
                        )
                    return stand_in.rest_predict(
                        match["name"], match["version"], match["label"], body
                    )

                self._answer(predict)

            def _answer(self, handle):
                match = MODEL_PATH.match(self.path)
                try:
                    if not match:
                        raise ServingFailure(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"Malformed request: {self.command} {self.path}",
                        )
                    status, answer = 200, handle(match)
                except ServingFailure as failure:
                    status, answer = HTTP_STATUS.get(failure.code, 500), {"error": failure.message}
                data = json.dumps(answer).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.rest_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

        class Predictions(prediction_service_pb2_grpc.PredictionServiceServicer):
            def Predict(self, request, context):
                return _grpc_answer(context, lambda: stand_in.predict(request))

            def GetModelMetadata(self, request, context):
                if not request.metadata_field:
                    context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "GetModelMetadataRequest must specify at least one metadata_field",
                    )
                for field in request.metadata_field:
                    if field != "signature_def":
                        context.abort(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"Metadata field {field} is not supported",
                        )
                spec = request.model_spec
                version = spec.version.value if spec.HasField("version") else None
                return _grpc_answer(
                    context,
                    lambda: stand_in.metadata(spec.name, version, spec.version_label or None),
                )

        class Models(model_service_pb2_grpc.ModelServiceServicer):
            def GetModelStatus(self, request, context):
                spec = request.model_spec
                version = spec.version.value if spec.HasField("version") else None
                return _grpc_answer(context, lambda: stand_in.status(spec.name, version))

        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            Predictions(), self._grpc
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(Models(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        return self

    def __exit__(self, *exc_info):
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=None)


def _grpc_answer(context, handle):
    try:
        return handle()
    except ServingFailure as failure:
        context.abort(failure.code, failure.message)


def _is_text(value):
    return isinstance(value, str) or (isinstance(value, list) and any(_is_text(v) for v in value))


def _to_json(array):
    """Tensor values as TensorFlow Serving writes them in JSON: strings as text, numbers as
    numbers."""
    if array.dtype == object:
        return (
            np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).tolist()
            if array.size
            else array.tolist()
        )
    return array.tolist()
