"""The one CNI error type and the spec's well-known error codes.

Source: CNI SPEC.md 1.1.0, "Error" section. Codes 1-99 are reserved by the spec; podnet's own
codes start at 100 and are listed in README "Error codes".

Every failure a plugin reports is a :class:`CNIError`; anything else that escapes a verb is turned
into code 999 (internal) by the skeleton, as libcni's skel does.
"""

from __future__ import annotations

# Spec codes.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
UNAVAILABLE = 50
UNAVAILABLE_DISRUPTED = 51
INTERNAL = 999

# podnet's own codes (>= 100).
NO_FREE_ADDRESS = 100
HOSTPORT_CONFLICT = 101
INTERFACE_EXISTS = 102
CHECK_FAILED = 103
KERNEL_FAILURE = 104
ADDRESS_IN_USE = 105


class CNIError(Exception):
    """A CNI error: ``code`` (int), ``msg`` (one line), ``details`` (free text, may be empty).

    Printed by the skeleton as ``{"cniVersion", "code", "msg", "details"}`` on stdout with a
    non-zero exit status. Subclasses only fix the code; raise them with context, e.g.
    ``raise KernelError("failed to create veth pn1234") from err``.
    """

    code = INTERNAL

    def __init__(self, msg: str, details: str = "", *, code: int | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details
        if code is not None:
            self.code = code

    def to_json(self, cni_version: str) -> dict[str, object]:
        """The spec's error object for ``cni_version``."""
        from podnet.checked import one_line

        out: dict[str, object] = {"cniVersion": cni_version, "code": self.code,
                                  "msg": one_line(self.msg)}  # fmt: skip
        if self.details:
            out["details"] = self.details
        return out


class InvalidConfig(CNIError):
    """The network configuration is invalid (code 7); ``msg`` names the key."""

    code = INVALID_CONFIG


class InvalidEnv(CNIError):
    """A required CNI_* environment variable is missing or malformed (code 4)."""

    code = INVALID_ENV


class IncompatibleVersion(CNIError):
    """The config's cniVersion is not supported or too old for the verb (code 1)."""

    code = INCOMPATIBLE_VERSION


class DecodeFailure(CNIError):
    """stdin is not a JSON object (code 6)."""

    code = DECODE_FAILURE


class TryAgainLater(CNIError):
    """The state database stayed locked past its busy timeout (code 11)."""

    code = TRY_AGAIN_LATER


class Unavailable(CNIError):
    """STATUS: the plugin cannot serve another ADD, e.g. no free address (code 50)."""

    code = UNAVAILABLE


class NoFreeAddress(CNIError):
    """Every configured range of a family is full (code 100). Only that: an address asked for
    that is held is :class:`AddressInUse`."""

    code = NO_FREE_ADDRESS


class AddressInUse(CNIError):
    """An address the runtime asked for (``runtimeConfig.ips``, CNI_ARGS ``IP=``) is already
    held (code 105); ``msg`` names the holder."""

    code = ADDRESS_IN_USE


class HostPortConflict(CNIError):
    """A hostPort is already held by another container (code 101); ``msg`` names the holder."""

    code = HOSTPORT_CONFLICT


class InterfaceExists(CNIError):
    """ADD found CNI_IFNAME already present in the pod's netns (code 102)."""

    code = INTERFACE_EXISTS


class CheckFailed(CNIError):
    """CHECK found the state differing from what ADD set up (code 103); ``msg`` names it."""

    code = CHECK_FAILED


class KernelError(CNIError):
    """An ``ip``/``nft``/``conntrack`` call or a sysctl write failed (code 104).

    ``details`` carries the tool's stderr.
    """

    code = KERNEL_FAILURE
