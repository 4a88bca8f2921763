"""The serving client without a model: what importing it loads, how it reads a REST answer into
the library's types, and its timeout against a loopback server that answers slowly."""

import http.server
import json
import threading
import time

import pytest
from conftest import run_python

import keras_transformer as kt
from serving import client as serving_client

ANSWER = {
    "predictions": [
        {
            "translation": "one two",
            "score": -0.5,
            "nbest_translations": ["one two", "one"],
            "nbest_scores": [-0.5, -1.5],
            "tokens": [7, 8, 3, 0],
            "source_tokens": [5, 6, 3, 0, 0],
            "alignment": [[0.5, 0.25, 0.25, 0.0, 0.0]] * 3 + [[0.0] * 5],
            "source_cut": False,
            "prefix_cut": True,
        },
        {"translation": "three", "score": -0.25},
    ]
}


class Loopback(http.server.ThreadingHTTPServer):
    """A server on 127.0.0.1 that answers every POST with `ANSWER`, sent a byte every `trickle`
    seconds (status line and headers too) when `trickle` is set."""

    daemon_threads = True

    def __init__(self, trickle=0.0):
        super().__init__(("127.0.0.1", 0), Handler)
        self.trickle = trickle

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self.shutdown()
        self.server_close()

    @property
    def flags(self):
        return ["--host", "127.0.0.1", "--port", str(self.server_address[1])]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps(ANSWER).encode("utf-8")
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        answer = f"{head}\r\n\r\n".encode("ascii") + body
        if not self.server.trickle:
            self.wfile.write(answer)
            return
        for byte in answer:
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client hung up
                return
            time.sleep(self.server.trickle)

    def log_message(self, *args):
        pass


def test_importing_the_client_loads_neither_keras_nor_tensorflow():
    completed = run_python(
        "-c",
        "import sys, serving.client; "
        "print(sorted({'keras', 'tensorflow'} & {name.split('.')[0] for name in sys.modules}))",
    )
    assert completed.stdout.strip() == "[]"


def test_the_client_answers_the_librarys_translation():
    """A served answer becomes kt.Translation: text, score and the cut inputs, and where the
    export gives them the n best, the token ids and the alignment without padding."""
    with Loopback() as server:
        port = server.server_address[1]
        first, second = serving_client.RestClient("127.0.0.1", port).translate(["eins", "zwei"])
    assert serving_client.Translation is kt.Translation and isinstance(first, kt.Translation)
    assert (first.text, first.score, first.cut) == ("one two", -0.5, ("prefix",))
    assert first.n_best == (("one two", -0.5), ("one", -1.5))
    assert (first.tokens, first.source_tokens) == ((7, 8, 3), (5, 6, 3))
    assert first.alignment == ((0.5, 0.25, 0.25),) * 3
    assert second == kt.Translation("three", -0.25)


def test_the_timeout_bounds_the_whole_call(capsys):
    """A server that sends its answer a byte every half second (for about 10 s) ends the call
    at --timeout, in one line naming the URL and the timeout, with status 1."""
    with Loopback(trickle=0.5) as server:
        start = time.monotonic()
        with pytest.raises(SystemExit) as exit_info:
            serving_client.main([*server.flags, "--timeout", "1", "--retries", "0", "eins"])
        elapsed = time.monotonic() - start
    assert elapsed < 3.0
    assert exit_info.value.code == 1
    error = capsys.readouterr().err
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/models/transformer:predict"
    assert error == f"error: {url}: no answer within 1 s\n"
