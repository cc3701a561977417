"""Upload handling for the datasets pages: size caps, spooled to disk, never in memory.

An upload is refused before its body is read when the request says it is too big
(Content-Length), and while it streams when it grows past the cap anyway (a chunked or lying
client). Files always go to a temporary file, so a 100,000-line manifest streams to disk and
recovery.intake.manifests reads it from there exactly as `createrun` reads a path.

Views that set handlers must run before the CSRF check reads the body (Django's rule), so they
are csrf_exempt on the outside and csrf_protect inside, after `accept()`.
"""

from __future__ import annotations

from django.core.files.uploadhandler import StopUpload, TemporaryFileUploadHandler
from django.http import HttpRequest

# Room for the multipart envelope and the small form fields around the file.
ENVELOPE = 64 * 1024


class CappedUpload(TemporaryFileUploadHandler):
    """Spools each file to disk and stops the upload once it passes `cap` bytes."""

    def __init__(self, request: HttpRequest, cap: int) -> None:
        super().__init__(request)
        self.cap = cap
        self.received = 0
        self.too_large = False

    def receive_data_chunk(self, raw_data: bytes, start: int):
        self.received += len(raw_data)
        if self.received > self.cap:
            self.too_large = True
            # Keep the connection: the rest of the body is drained so the page can answer.
            raise StopUpload(connection_reset=False)
        return super().receive_data_chunk(raw_data, start)


def accept(request: HttpRequest, cap: int) -> CappedUpload:
    handler = CappedUpload(request, cap)
    request.upload_handlers = [handler]
    return handler


def declared_too_large(request: HttpRequest, cap: int) -> bool:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return length > cap + ENVELOPE


def too_large_message(cap: int, what: str) -> str:
    return (
        f"The {what} is larger than the upload limit of {cap / 1_000_000:g} MB: nothing was "
        "stored. Split it, or use the command line."
    )
