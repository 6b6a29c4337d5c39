"""The one error of the networks layer: a request podnet refuses, with the HTTP status the API
answers (400 invalid, 404 not found, 409 conflict, 412 stale ETag) and LXD's message text."""

from __future__ import annotations

from podnet.checked import one_line

__all__ = ["NetworkError", "in_use"]

#: Users a refusal names; the rest are counted.
SHOWN_USERS = 10


class NetworkError(ValueError):
    """Refused: ``str(err)`` is the message (LXD's wording where LXD has one) on one line
    (:func:`one_line`), ``status`` the HTTP status (default 400). The CLI prints ``Error:
    <message>`` and exits 1. ``detail``: what a tool or a remote server said, for the server's
    log only (never in an API answer: it may carry what a client must not learn)."""

    def __init__(self, message: str, status: int = 400, *, detail: str = "") -> None:
        super().__init__(one_line(message))
        self.status = status
        self.detail = detail

    @classmethod
    def lines(cls, *lines: str, status: int = 400) -> NetworkError:
        """A message of several lines, as some of LXD's are (``yaml: unmarshal errors:`` and
        one line per field): each line is made one line by itself, so a refused value still
        cannot add a line of its own."""
        err = cls("", status)
        err.args = ("\n".join(one_line(line) for line in lines),)
        return err


def in_use(users: list[str]) -> NetworkError:
    """400 ``The network is currently in use`` (LXD's words) naming what uses it: ``users``
    (container IDs of its pods, networks on it), the first :data:`SHOWN_USERS` and how many
    more."""
    users = list(dict.fromkeys(users))  # a pod with two interfaces is one user
    shown = ", ".join(users[:SHOWN_USERS])
    more = f" and {len(users) - SHOWN_USERS} more" if len(users) > SHOWN_USERS else ""
    return NetworkError(f"The network is currently in use by {shown}{more}" if users
                        else "The network is currently in use")  # fmt: skip
