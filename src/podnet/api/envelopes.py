"""LXD's response envelopes (``api.ResponseRaw``), shared by the application and the request
guard in front of it::

    {"type": "sync", "status": "Success", "status_code": 200, "operation": "", "error_code": 0,
     "error": "", "metadata": ...}
    {"type": "error", "status": "", "status_code": 0, "operation": "", "error_code": N,
     "error": "...", "metadata": null}                       (HTTP status N)
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

__all__ = ["error", "sync"]


def sync(metadata: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    """A sync envelope; HTTP ``status`` (201 for a create) while the body says 200 "Success",
    as LXD's ``SyncResponseLocation`` does."""
    body = {"type": "sync", "status": "Success", "status_code": 200, "operation": "",
            "error_code": 0, "error": "", "metadata": metadata}  # fmt: skip
    return JSONResponse(body, status_code=status, headers=headers)


def error(status: int, message: str, *, close: bool = False) -> JSONResponse:
    """An error envelope with HTTP status ``status``; ``close``: with ``Connection: close``, so
    the server closes the connection once the answer is sent (the rest of a refused body is
    never read, a refused client is not kept)."""
    body = {"type": "error", "status": "", "status_code": 0, "operation": "",
            "error_code": status, "error": message, "metadata": None}  # fmt: skip
    headers = {"X-Content-Type-Options": "nosniff"}
    if close:
        headers["Connection"] = "close"
    return JSONResponse(body, status_code=status, headers=headers)
