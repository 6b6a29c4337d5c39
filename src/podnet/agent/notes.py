"""Saying a standing condition once: the agent syncs after every batch of events, and a Node
that stays refused, a next hop that stays off-link or a conflist that still waits for podCIDRs
must not fill the log at every sync. A condition is logged when it appears, and again only
after it has gone away and come back."""

from __future__ import annotations

import logging

__all__ = ["LOG", "Notes"]

#: The agent's logger: one line per change it makes, one per condition it meets.
LOG = logging.getLogger("podnet.agent")


class Notes:
    """Conditions of the current sync, each keyed (a tuple naming what and whom). Call
    :meth:`begin`, :meth:`note` for each condition met, then :meth:`end`: a key seen in the
    previous sync is not logged again; one not seen this time is forgotten."""

    def __init__(self, log: logging.Logger = LOG) -> None:
        self.log = log
        self._said: set[tuple[str, ...]] = set()
        self._now: set[tuple[str, ...]] = set()

    def begin(self) -> None:
        self._now = set()

    def note(self, key: tuple[str, ...], message: str, *, level: int = logging.WARNING) -> None:
        """Log ``message`` unless condition ``key`` was logged and has held since."""
        self._now.add(key)
        if key not in self._said:
            self._said.add(key)
            self.log.log(level, "%s", message)

    def keep(self, prefix: str) -> None:
        """Carry the conditions whose key starts with ``prefix`` over to this sync (a part of
        the sync that did not run this time, so it neither saw nor cleared them)."""
        self._now |= {k for k in self._said if k and k[0] == prefix}

    def end(self) -> None:
        self._said &= self._now
