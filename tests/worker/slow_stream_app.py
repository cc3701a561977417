"""A WSGI app for tests/worker/test_gunicorn_streaming.py: a download streamed over several
seconds, as a long list CSV is (rows written as they are read), ending with a last line."""

from __future__ import annotations

import os
import time

CHUNKS = int(os.environ.get("SLOW_STREAM_CHUNKS", "20"))
PAUSE = float(os.environ.get("SLOW_STREAM_PAUSE", "0.5"))


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/csv")])

    def rows():
        for n in range(CHUNKS):
            yield f"row {n}\n".encode()
            time.sleep(PAUSE)
        yield b"end of file\n"

    return rows()
