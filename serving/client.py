"""Translate sentences with a TensorFlow Serving model server, or show the model's status or
metadata.

    python -m serving.client "Guten Morgen." "Wo ist der Bahnhof?"          # REST, localhost:8501
    python -m serving.client --protocol grpc --source sentences.de.txt     # gRPC, localhost:8500
    echo "Guten Morgen." | python -m serving.client --scores
    python -m serving.client --target-prefix "Good" "Guten Morgen."    # the translate signature
    python -m serving.client --source de.txt --target en.txt          # score translations
    python -m serving.client --status          # or --metadata

In Python:

    client = RestClient("localhost", model="transformer")   # or GrpcClient(...)
    for result in client.translate(["Guten Morgen."]):    # [kt.Translation]
        print(result.score, result.text, result.n_best, result.alignment)
    client.translate(["Guten Morgen."], target_prefix=["Good"])   # each starts with its prefix
    client.score(["Guten Morgen."], ["Good morning."])            # [Scored(score, log_prob, ...)]

REST follows TensorFlow Serving's REST API (row-format `instances` requests); gRPC its
`PredictionService` and `ModelService` with the `tensorflow-serving-api` protos. A call gives up
after `timeout` seconds, retries a server that answers UNAVAILABLE (or cannot be reached yet) at
most `retries` times within that time, and raises `ServingError` with the server's message.
"""

import contextlib
import http.client
import json
import socket
import sys
import threading
import time
import types
import urllib.parse

from keras_transformer.results import Scored, Translation, per_sentence
from keras_transformer_cli import console, flags
from keras_transformer_cli.translators import refuse_cut_inputs

SIGNATURE = "serving_default"
PREFIX_SIGNATURE = "translate"  # serving_default's outputs, with a target_prefix input too
SCORE_SIGNATURE = "score"
TRANSLATION_OUTPUTS = ("translation", "score")
SERVED = types.SimpleNamespace(limits=None)  # a served model's limits are not known here
SCORE_OUTPUTS = ("score", "log_prob", "token_scores", "tokens")
MAX_REQUEST_BYTES = 4 << 20
BATCH_SIZE = 32  # serving/batching.config's max_batch_size: the server refuses larger requests


class ServingError(RuntimeError):
    """A request the server refused or could not answer; `code` is the HTTP status or the gRPC
    status name, `message` the server's own error message."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class _Unavailable(Exception):
    """Raised inside an attempt when the server is not ready; the attempt is repeated."""


class TranslationClient:
    """What the REST and gRPC clients share: input checks, the size limit, the deadline and the
    bounded retry, and requests of at most `batch_size` sentences. A model version or a version
    label may be pinned (not both)."""

    protocol = None
    default_port = None

    def __init__(
        self,
        host="localhost",
        port=None,
        model="transformer",
        signature=SIGNATURE,
        version=None,
        label=None,
        timeout=30.0,
        retries=3,
        max_request_bytes=MAX_REQUEST_BYTES,
        batch_size=BATCH_SIZE,
    ):
        if version is not None and label is not None:
            raise ValueError("pin a model version or a version label, not both")
        if timeout <= 0 or retries < 0 or max_request_bytes <= 0 or batch_size < 1:
            raise ValueError(
                "timeout, max_request_bytes and batch_size must be positive and retries at least 0"
            )
        self.host, self.port = host, port or self.default_port
        self.model, self.signature, self.version, self.label = model, signature, version, label
        self.timeout, self.retries, self.max_request_bytes = timeout, retries, max_request_bytes
        self.batch_size = batch_size

    def close(self):
        """Releases the connection (a gRPC channel); REST keeps none open."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def target(self):
        return f"{self.host}:{self.port}"

    def translate(self, sentences, target_prefix=None):
        """Translations with their scores, one per sentence, in order; with `target_prefix`
        (one string per sentence, "" for none) each starts with its prefix (the `translate`
        signature, unless another than serving_default was chosen). Sent `batch_size`
        sentences a request, and nothing is sent unless every request is within the size limit."""
        inputs = {"sentences": _strings(sentences, "sentence")}
        signature = self.signature
        if target_prefix is not None:
            inputs["target_prefix"] = _strings(target_prefix, "target prefix", len(sentences))
            signature = PREFIX_SIGNATURE if signature == SIGNATURE else signature
        rows = self._answers(signature, inputs, TRANSLATION_OUTPUTS)
        return [self._read(Translation, row, signature) for row in rows]

    def score(self, sources, targets):
        """Forced decoding of each target given its source (the `score` signature): a
        `kt.Scored` (score over the length penalty, log P, token log-probabilities) per pair."""
        inputs = {
            "sources": _strings(sources, "source"),
            "targets": _strings(targets, "target", len(sources)),
        }
        rows = self._answers(SCORE_SIGNATURE, inputs, SCORE_OUTPUTS)
        return [self._read(Scored, row, SCORE_SIGNATURE) for row in rows]

    def _answers(self, signature, inputs, outputs):
        """The answer rows of `signature` for `inputs` (equal lists by input name), each with
        `outputs`, in `batch_size` requests all checked against the size limit first."""
        count = len(next(iter(inputs.values())))
        batches = [
            {name: values[start : start + self.batch_size] for name, values in inputs.items()}
            for start in range(0, count, self.batch_size)
        ]
        requests = [self._predict_request(signature, batch) for batch in batches]
        for batch, (_, size) in zip(batches, requests):
            if size > self.max_request_bytes:
                raise ValueError(
                    f"the request for {len(next(iter(batch.values())))} sentences is {size} "
                    f"bytes, over the limit of {self.max_request_bytes} bytes; send fewer or "
                    "shorter sentences per request"
                )
        rows = []
        for batch, (request, _) in zip(batches, requests):
            answer = self._call(
                lambda timeout, request=request: self._predict(request, timeout, outputs)
            )
            sent = len(next(iter(batch.values())))
            if len(answer) != sent:
                raise ServingError(
                    f"{self.target} answered {len(answer)} translations for {sent} sentences"
                )
            rows += answer
        return rows

    @property
    def endpoint(self):
        """Where translations are asked for, as errors name it."""
        return self.target

    def _read(self, result, row, signature):
        """`result` (kt.Translation or kt.Scored) of one answer row; ServingError naming what
        is missing or malformed."""
        try:
            return result.from_outputs(row)
        except KeyError as error:
            raise ServingError(
                f"{self.endpoint}: the answer lacks the output {error.args[0]!r} (signature "
                f"{signature!r}); is it a keras-transformer translator?"
            ) from None
        except (TypeError, ValueError, AttributeError) as error:
            raise ServingError(f"{self.endpoint}: a malformed answer ({error})") from None

    def status(self):
        """The model's version states, as TensorFlow Serving's REST status JSON (over gRPC too)."""
        return self._call(self._status)

    def metadata(self):
        """The model spec and its signature definitions, as TensorFlow Serving's REST metadata
        JSON (over gRPC too)."""
        return self._call(self._metadata)

    def _call(self, attempt):
        deadline, attempts, last = time.monotonic() + self.timeout, 0, None
        while attempts <= self.retries and time.monotonic() < deadline:
            if attempts:
                time.sleep(min(0.1 * 2 ** (attempts - 1), max(0.0, deadline - time.monotonic())))
                if time.monotonic() >= deadline:  # the back-off used the time that was left
                    break
            attempts += 1
            try:
                return attempt(max(deadline - time.monotonic(), 1e-3))
            except _Unavailable as error:
                last = error
        raise ServingError(
            f"{self.target} is unavailable ({self.protocol}, {attempts} attempts within "
            f"{self.timeout:g} s): {last}",
            code="UNAVAILABLE",
        )


class RestClient(TranslationClient):
    """TensorFlow Serving's REST API (port 8501); a call ends within `timeout`, however the
    server answers."""

    protocol, default_port = "REST", 8501

    @property
    def endpoint(self):
        return self._url(":predict")

    def _url(self, suffix=""):
        url = f"http://{self.host}:{self.port}/v1/models/{urllib.parse.quote(self.model, safe='')}"
        if self.version is not None:
            url += f"/versions/{int(self.version)}"
        elif self.label is not None:
            url += f"/labels/{urllib.parse.quote(self.label, safe='')}"
        return url + suffix

    def _predict_request(self, signature, inputs):
        """The row format: a list of values for one input, else one object per sentence."""
        names = list(inputs)
        rows = (
            inputs[names[0]]
            if len(names) == 1
            else [dict(zip(names, row)) for row in zip(*inputs.values())]
        )
        body = json.dumps({"signature_name": signature, "instances": rows}).encode("utf-8")
        return body, len(body)

    def _predict(self, body, timeout, outputs):
        answer = self._http(self._url(":predict"), body, timeout)
        try:
            predictions = answer["predictions"]
            if not all(all(name in p for name in outputs) for p in predictions):
                raise KeyError(outputs[0])
            return predictions
        except (KeyError, TypeError) as error:
            raise ServingError(
                f"{self._url(':predict')}: unexpected answer {str(answer)[:200]!r}"
            ) from error

    def _status(self, timeout):
        return self._http(self._url(), None, timeout)

    def _metadata(self, timeout):
        return self._http(self._url("/metadata"), None, timeout)

    def _http(self, url, body, timeout):
        """One request (POST with a body, else GET) within `timeout` seconds in all: connect,
        send and the whole answer. A socket timeout bounds each read, not their sum, so a timer
        also shuts the connection at the deadline: a server that trickles its answer ends the
        call too. The deadline is checked after connecting (the timer may fire before there is
        a socket to shut) and after reading (a shut socket reads as the answer's end)."""
        parts = urllib.parse.urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        expired = threading.Event()

        def expire():
            expired.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            connection.connect()
            if expired.is_set():
                raise TimeoutError
            connection.request(
                "GET" if body is None else "POST",
                parts.path + (f"?{parts.query}" if parts.query else ""),
                body=body,
                headers={"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            status, text = response.status, response.read().decode("utf-8", "replace")
            if expired.is_set():
                raise TimeoutError
        except (OSError, http.client.HTTPException) as error:
            if expired.is_set() or isinstance(error, TimeoutError):
                raise ServingError(
                    f"{url}: no answer within {self.timeout:g} s", code="DEADLINE_EXCEEDED"
                ) from error
            if isinstance(error, http.client.HTTPException):  # broke off mid-answer
                raise _Unavailable(f"{type(error).__name__}: {error}") from error
            raise _Unavailable(error) from error
        finally:
            timer.cancel()
            connection.close()
        return self._answer(url, status, text)

    @staticmethod
    def _answer(url, status, text):
        """The JSON of an answer; ServingError (or _Unavailable for 503) with the server's
        {"error": ...} message when it is an error."""
        if status >= 400:
            try:
                text = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                pass
            if status == 503:
                raise _Unavailable(text)
            raise ServingError(f"{url}: HTTP {status}: {text}", code=status)
        try:
            return json.loads(text)
        except ValueError:
            raise ServingError(
                f"{url}: the answer is not JSON ({text[:60]!r}...); is this TensorFlow "
                "Serving's REST port?"
            ) from None


class GrpcClient(TranslationClient):
    """TensorFlow Serving's gRPC API (port 8500): PredictionService and ModelService."""

    protocol, default_port = "gRPC", 8500

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self._grpc = grpc
        limit = self.max_request_bytes + (1 << 16)
        self._channel = grpc.insecure_channel(
            self.target,
            options=[
                ("grpc.max_send_message_length", limit),
                ("grpc.max_receive_message_length", -1),
            ],
        )
        self._predictions = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def _model_spec(self, spec, signature=None):
        spec.name = self.model
        if signature:
            spec.signature_name = signature
        if self.version is not None:
            spec.version.value = int(self.version)
        elif self.label is not None:
            spec.version_label = self.label

    def _predict_request(self, signature, inputs):
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._model_spec(request.model_spec, signature)
        for name, values in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=tf.string))
        return request, request.ByteSize()

    def _predict(self, request, timeout, outputs):
        import tensorflow as tf

        response = self._rpc(self._predictions.Predict, request, timeout)
        if not all(name in response.outputs for name in outputs):
            raise ServingError(
                f"{self.target}: the answer lacks one of the outputs {', '.join(outputs)} "
                f"(signature {request.model_spec.signature_name!r})"
            )
        return per_sentence(
            {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
        )

    def _status(self, timeout):
        from tensorflow_serving.apis import get_model_status_pb2

        request = get_model_status_pb2.GetModelStatusRequest()
        self._model_spec(request.model_spec)
        response = self._rpc(self._models.GetModelStatus, request, timeout)
        return _as_json(response)

    def _metadata(self, timeout):
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._model_spec(request.model_spec)
        response = self._rpc(self._predictions.GetModelMetadata, request, timeout)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        spec = response.model_spec
        return {
            "model_spec": {
                "name": spec.name,
                "signature_name": spec.signature_name,
                "version": str(spec.version.value),
            },
            "metadata": {"signature_def": _as_json(signatures)},
        }

    def _rpc(self, method, request, timeout):
        try:
            return method(request, timeout=timeout)
        except self._grpc.RpcError as error:
            code = error.code()
            if code == self._grpc.StatusCode.UNAVAILABLE:
                raise _Unavailable(error.details()) from error
            if code == self._grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ServingError(
                    f"{self.target}: no answer within {self.timeout:g} s", code=code.name
                ) from error
            raise ServingError(
                f"{self.target}: {code.name}: {error.details()}", code=code.name
            ) from error


def _strings(values, what, count=None):
    """`values` as a list of str, `count` of them if given; ValueError or TypeError naming
    `what` otherwise."""
    values = list(values)
    if not values:
        raise ValueError(f"nothing to translate: give at least one {what}")
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"{what} {index} is a {type(value).__name__}, not a str")
    if count is not None and len(values) != count:
        raise ValueError(f"{len(values)} {what}s for {count} sentences: give one each")
    return values


def _as_json(message):
    """A proto as TensorFlow Serving's REST API writes it: field names as in the .proto, default
    values included."""
    from google.protobuf import json_format

    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


CLIENTS = {"rest": RestClient, "grpc": GrpcClient}


def build_parser():
    parser = flags.parser(__doc__, "serving.client")
    flags.add_sentences(parser)
    parser.add_argument(
        "--protocol",
        choices=sorted(CLIENTS),
        default="rest",
        help="REST (port 8501) or gRPC (port 8500)",
    )
    parser.add_argument("--host", default="localhost", help="the model server's host")
    parser.add_argument(
        "--port",
        type=flags.port,
        default=None,
        help="its port (default: 8501 for REST, 8500 for gRPC)",
    )
    parser.add_argument(
        "--model-name", default="transformer", help="the model's name in the server's models.config"
    )
    parser.add_argument("--signature", default=SIGNATURE, help="the signature to call")
    pinned = parser.add_mutually_exclusive_group()
    flags.add_version(pinned)
    pinned.add_argument("--label", default=None, help="a version label, e.g. stable or canary")
    parser.add_argument(
        "--timeout",
        type=flags.positive,
        default=30.0,
        help="seconds before a call gives up, retries included",
    )
    parser.add_argument(
        "--retries",
        type=flags.AMOUNT,
        default=3,
        help="retries while the server answers UNAVAILABLE",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=flags.COUNT,
        default=MAX_REQUEST_BYTES,
        help="larger requests are refused before they are sent",
    )
    flags.add_batch_size(parser, BATCH_SIZE)
    flags.add_scores(parser)
    flags.add_target_prefix(parser)
    flags.add_targets(parser)
    flags.add_score_format(parser)
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--status", action="store_true", help="print the model's version status (JSON)"
    )
    action.add_argument(
        "--metadata", action="store_true", help="print the model's signatures (JSON)"
    )
    return parser


@console.program
def main(argv=None, stdin=None):
    args = flags.parse(build_parser(), argv)

    client = None
    try:
        client = CLIENTS[args.protocol](
            args.host,
            args.port,
            model=args.model_name,
            signature=args.signature,
            version=args.version,
            label=args.label,
            timeout=args.timeout,
            retries=args.retries,
            max_request_bytes=args.max_request_bytes,
            batch_size=args.batch_size,
        )
        if args.status or args.metadata:
            print(json.dumps(client.status() if args.status else client.metadata(), indent=2))
            return
        sentences = flags.read_sentences(args, stdin or sys.stdin)
        if not sentences:
            raise ValueError(
                "nothing to translate: give sentences as arguments, with --source, or on stdin"
            )
        if args.target:
            results = client.score(sentences, flags.read_targets(args, sentences))
            lines = [scored.line(args.normalized, args.tokens) for scored in results]
        else:
            prefixes = None
            if args.target_prefix is not None:
                prefixes = [args.target_prefix] * len(sentences)
            results = client.translate(sentences, prefixes)
            lines = [f"{r.score:.4f}\t{r.text}" if args.scores else r.text for r in results]
        print("\n".join(lines))
        # The server answers every sentence; one that it had to cut fails the command, after
        # the answers are shown (the server says how long a sentence it holds: not here).
        refuse_cut_inputs(args, SERVED, results, answered=True)
    except (ValueError, TypeError, ServingError) as error:
        console.fail(error)
    finally:
        if client is not None:
            client.close()


if __name__ == "__main__":
    main()
