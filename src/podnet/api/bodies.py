"""The request and response bodies of the REST API, as LXD's ``shared/api`` types define them
(``NetworkPut``, ``NetworksPost``, ``NetworkForwardPut``, ``NetworkForwardsPost``,
``CertificatesPost``), and the check of the read-only fields PUT and PATCH may carry."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from podnet.networks.errors import NetworkError
from podnet.networks.model import ForwardPort, canonical_address

__all__ = [
    "ERRORS",
    "FORWARD_READ_ONLY",
    "NETWORK_READ_ONLY",
    "CertificatesPost",
    "Envelope",
    "ForwardPut",
    "ForwardsPost",
    "NetworkPut",
    "NetworksPost",
    "PortBody",
    "ServerPut",
    "check_read_only",
    "ports",
    "validation_message",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PortBody(_Strict):
    """``NetworkForwardPort``."""

    description: str = ""
    protocol: str = ""
    listen_port: str = ""
    target_port: str = ""
    target_address: str = ""


_READ_ONLY = "Read-only: accepted when it equals the stored value, else 400."


class ForwardWritable(_Strict):
    """``NetworkForwardPut``: what a forward's PUT replaces (PATCH keeps what is absent)."""

    description: str | None = None
    config: dict[str, str] | None = None
    ports: list[PortBody] | None = None


class ForwardPut(ForwardWritable):
    """The body of a forward's PUT/PATCH: ``NetworkForwardPut``, or the whole
    ``NetworkForward`` as GET returns it."""

    listen_address: str | None = Field(None, description=_READ_ONLY)
    location: str | None = Field(None, description=_READ_ONLY)


class ForwardsPost(ForwardWritable):
    """``NetworkForwardsPost``."""

    listen_address: str


class NetworkWritable(_Strict):
    """``NetworkPut``: what a network's PUT replaces (PATCH merges ``config``)."""

    description: str | None = None
    config: dict[str, str] | None = None


class NetworkPut(NetworkWritable):
    """The body of a network's PUT/PATCH: ``NetworkPut``, or the whole ``Network`` as GET
    returns it."""

    name: str | None = Field(None, description=_READ_ONLY)
    type: str | None = Field(None, description=_READ_ONLY)
    managed: bool | None = Field(None, description=_READ_ONLY)
    status: str | None = Field(None, description=_READ_ONLY)
    locations: list[str] | None = Field(None, description=_READ_ONLY)
    used_by: list[str] | None = Field(None, description=_READ_ONLY)


class ServerPut(BaseModel):
    """``ServerPut``: the server config, as ``lxc config set`` sends it. The other fields of
    ``GET /1.0`` are read-only and ignored, as LXD ignores them."""

    model_config = ConfigDict(extra="ignore")
    config: dict[str, str] | None = None


class NetworksPost(NetworkWritable):
    """``NetworksPost`` (``type`` "" means bridge)."""

    name: str
    type: str | None = None


class CertificatesPost(_Strict):
    """``CertificatesPost`` (LXD shared/api/certificate.go): an untrusted client sends a trust
    token as ``password`` (lxc 5.0) or ``trust_token`` (later LXD); a trusted one may send a
    ``certificate`` (base64 DER) to trust, as ``lxc config trust add FILE`` does."""

    name: str = ""
    type: str = "client"
    restricted: bool = False
    projects: list[str] | None = None
    certificate: str = ""
    password: str = ""
    token: bool = False
    trust_token: str = ""


class Envelope(BaseModel):
    """LXD's response envelope (sync or error)."""

    type: str
    status: str
    status_code: int
    operation: str
    error_code: int
    error: str
    metadata: Any = Field(default=None)


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Envelope, "description": text}
    for code, text in ((400, "Invalid request"), (403, "Not authorized"), (404, "Not found"),
                       (409, "Conflict"), (412, "ETag mismatch"), (413, "Body over 1 MiB"),
                       (415, "Body not application/json"), (500, "Kernel or store failure"),
                       (503, "Store busy"))  # fmt: skip
}


def validation_message(err: RequestValidationError) -> str:
    """The 400 message for a body FastAPI refused: the first error, naming its field."""
    first = err.errors()[0] if err.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    kind = first.get("type", "")
    if kind == "json_invalid":
        reason = first.get("ctx", {}).get("error", first.get("msg"))
        return f"Invalid JSON in request body: {reason}"
    if kind == "extra_forbidden":
        return f'Unknown field "{where}" in request body'
    if kind == "missing":
        return f'Missing field "{where}" in request body'
    return f"Invalid request body: {where}: {first.get('msg', 'invalid')}" if where else \
        f"Invalid request body: {first.get('msg', 'invalid')}"  # fmt: skip


def ports(items: list[PortBody] | None) -> list[ForwardPort] | None:
    """A body's ``ports`` as the model's :class:`ForwardPort` values (None: not sent)."""
    return None if items is None else [ForwardPort(**p.model_dump()) for p in items]


def _same(field: str, sent: Any, stored: Any) -> bool:
    if field in ("locations", "used_by"):
        return sorted(sent) == sorted(stored)
    if field == "listen_address":
        return bool(canonical_address(sent) == stored)
    return bool(sent == stored)


def check_read_only(body: BaseModel, current: dict[str, Any], fields: tuple[str, ...]) -> None:
    """400 ``Read-only field "<name>" cannot be changed`` for the first of ``fields`` that the
    body carries with a value other than ``current`` (the object as GET returns it)."""
    for name in fields:
        sent = getattr(body, name)
        if sent is not None and not _same(name, sent, current[name]):
            raise NetworkError(f'Read-only field "{name}" cannot be changed')


NETWORK_READ_ONLY = ("name", "type", "managed", "status", "locations", "used_by")
FORWARD_READ_ONLY = ("listen_address", "location")
