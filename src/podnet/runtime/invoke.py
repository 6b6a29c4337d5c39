"""The runtime's side of running plugins: the :class:`PluginExec` seam (libcni's ``invoke.Exec``)
and the conversions the runtime adds on top of :mod:`podnet.cni.invoke`, the one module that
finds plugins, builds their environment, runs them and decodes their answers (delegating
plugins use the same one).

The runtime talks to plugins only through a :class:`PluginExec` — ``find`` a type in CNI_PATH,
``run`` a file with stdin and an environment — so tests substitute a fake and the demo wraps
every call in ``ip netns exec <node>``. :class:`SubprocessExec` is the real one.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from podnet import errors as codes
from podnet.cni import invoke
from podnet.cni import version as spec_version
from podnet.cni.result import convert
from podnet.errors import CNIError
from podnet.proc import ToolTimeout
from podnet.runtime.errors import PluginNotFound

DECODE = codes.DECODE_FAILURE

__all__ = [
    "ExecOutput",
    "PluginExec",
    "SubprocessExec",
    "convert_result",
    "decode_error",
    "decode_result",
    "find_in_path",
    "plugin_env",
]


@dataclass(frozen=True)
class ExecOutput:
    """What a plugin run left: exit status, stdout and stderr (bytes)."""

    returncode: int
    stdout: bytes
    stderr: bytes = b""


class PluginExec(Protocol):
    """How the runtime finds and runs plugins (libcni ``invoke.Exec``)."""

    def find(self, plugin_type: str, paths: Sequence[str]) -> str:
        """Absolute path of plugin ``plugin_type``; PluginNotFound when absent."""
        ...

    def run(self, path: str, stdin: bytes, env: Mapping[str, str]) -> ExecOutput:
        """Run the plugin file ``path`` to completion with ``stdin`` and exactly ``env``."""
        ...


def find_in_path(plugin_type: str, paths: Sequence[str]) -> str:
    """The first executable regular file ``<dir>/<plugin_type>`` over ``paths`` (CNI_PATH order).

    A type containing ``/`` is refused (it would escape CNI_PATH). PluginNotFound (7).
    """
    try:
        return invoke.find(plugin_type, paths)
    except CNIError as err:
        raise PluginNotFound(err.msg) from None


class SubprocessExec:
    """Runs plugins as child processes (:func:`podnet.cni.invoke.start`).

    ``wrapper``: argv prefix, e.g. ``("ip", "netns", "exec", "node")`` to run every plugin in
    another network namespace. ``timeout``: seconds per plugin run (None = one hour); a plugin
    that exceeds it is killed and reported as failed. A freshly written plugin file can still
    be open for writing (``ETXTBSY``): the start is retried a few times, as libcni's RawExec does.
    """

    NO_LIMIT = 3600.0

    def __init__(self, *, wrapper: Sequence[str] = (), timeout: float | None = None) -> None:
        self.wrapper = tuple(wrapper)
        self.timeout = timeout

    def find(self, plugin_type: str, paths: Sequence[str]) -> str:
        return find_in_path(plugin_type, paths)

    def run(self, path: str, stdin: bytes, env: Mapping[str, str]) -> ExecOutput:
        delay = 0.05
        for attempt in range(5):
            try:
                spawned = invoke.start(path, stdin, env, wrapper=self.wrapper,
                                       timeout=self.timeout or self.NO_LIMIT)  # fmt: skip
            except CNIError as err:
                cause = err.__cause__.__cause__ if err.__cause__ else None
                busy = isinstance(cause, OSError) and cause.errno == errno.ETXTBSY
                if not busy or attempt == 4:
                    raise
                time.sleep(delay)
                delay *= 2
                continue
            try:
                rc, out, err_out = spawned.wait_raw()
            except ToolTimeout:
                return ExecOutput(-9, b"", f"killed after {self.timeout} s".encode())
            if rc == 127 and b"Text file busy" in err_out and attempt < 4:
                time.sleep(delay)  # the exec failed inside a wrapper (setpriv, ip netns exec)
                delay *= 2
                continue
            return ExecOutput(rc, out, err_out)
        raise AssertionError("unreachable")


#: ``base`` plus the six CNI variables (libcni ``invoke.Args.AsEnv``), from the shared module.
plugin_env = invoke.env


def decode_error(out: ExecOutput) -> CNIError:
    """The CNIError a failed run reported (stdout error JSON), else one built from stderr (999)."""
    return invoke.decode_error(out.stdout, out.stderr, out.returncode, "netplugin")


def decode_result(out: ExecOutput, cni_version: str) -> dict[str, Any]:
    """A successful ADD's stdout → the result converted to ``cni_version``.

    CNIError 6 (decode failure) when stdout is not a result object, 1 when its ``cniVersion``
    is one podnet cannot convert.
    """
    return convert_result(invoke.decode_result(out.stdout), cni_version)


def convert_result(result: Mapping[str, Any], cni_version: str) -> dict[str, Any]:
    """``result`` (any supported version, per its ``cniVersion``) in ``cni_version``; code 1."""
    version = result.get("cniVersion", cni_version)
    if version not in spec_version.SUPPORTED_VERSIONS:
        raise CNIError(
            f"result version {version!r} cannot be converted (podnet handles "
            f"{', '.join(spec_version.SUPPORTED_VERSIONS)})",
            code=codes.INCOMPATIBLE_VERSION,
        )
    return convert({**result, "cniVersion": version}, cni_version)
