"""The one error of the networks layer: a request podnet refuses, with the HTTP status the API
answers (400 invalid, 404 not found, 409 conflict, 412 stale ETag) and LXD's message text."""

from __future__ import annotations

__all__ = ["NetworkError"]


class NetworkError(ValueError):
    """Refused: ``str(err)`` is the message (LXD's wording where LXD has one), ``status`` the
    HTTP status (default 400). The CLI prints ``Error: <message>`` and exits 1."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
