"""Running one plugin: finding it, its environment and stdin, decoding its answer.

Modeled on libcni's ``pkg/invoke`` (CNI SPEC 1.1.0 "Parameters", "Error"): the runtime talks to
plugins only through a :class:`PluginExec` — ``find`` a type in CNI_PATH, ``run`` a file with
stdin and an environment — so tests substitute a fake and the demo wraps every call in
``ip netns exec <node>``. :class:`SubprocessExec` is the real one (subprocess is fine here: the
runtime is not on a per-call latency budget the way a plugin is).

Environment (libcni ``invoke.Args.AsEnv``): the caller's environment with ``CNI_COMMAND``,
``CNI_CONTAINERID``, ``CNI_NETNS``, ``CNI_ARGS``, ``CNI_IFNAME`` and ``CNI_PATH`` set last.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from podnet.cni import errors as codes
from podnet.cni import version as spec_version
from podnet.cni.errors import CNIError
from podnet.cni.result import convert
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
    if not plugin_type or "/" in plugin_type or plugin_type in (".", ".."):
        raise PluginNotFound(f"invalid plugin type {plugin_type!r}")
    for d in paths:
        candidate = os.path.join(d, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise PluginNotFound(f'failed to find plugin "{plugin_type}" in path [{" ".join(paths)}]')


class SubprocessExec:
    """Runs plugins as child processes.

    ``wrapper``: argv prefix, e.g. ``("ip", "netns", "exec", "node")`` to run every plugin in
    another network namespace. ``timeout``: seconds per plugin run (None = no limit); a plugin
    that exceeds it is killed and reported as failed. A freshly written plugin file can still
    be open for writing (``ETXTBSY``): the start is retried a few times, as libcni's RawExec does.
    """

    def __init__(self, *, wrapper: Sequence[str] = (), timeout: float | None = None) -> None:
        self.wrapper = tuple(wrapper)
        self.timeout = timeout

    def find(self, plugin_type: str, paths: Sequence[str]) -> str:
        return find_in_path(plugin_type, paths)

    def run(self, path: str, stdin: bytes, env: Mapping[str, str]) -> ExecOutput:
        argv = [*self.wrapper, path]
        delay = 0.05
        for attempt in range(5):
            try:
                proc = subprocess.run(
                    argv,
                    input=stdin,
                    capture_output=True,
                    env=dict(env),
                    timeout=self.timeout,
                    check=False,
                )
                return ExecOutput(proc.returncode, proc.stdout, proc.stderr)
            except OSError as err:
                if err.errno != errno.ETXTBSY or attempt == 4:
                    raise CNIError(f"cannot execute {path}: {err}", code=codes.IO_FAILURE) from err
                time.sleep(delay)
                delay *= 2
            except subprocess.TimeoutExpired:
                return ExecOutput(-9, b"", f"killed after {self.timeout} s".encode())
        raise AssertionError("unreachable")


def plugin_env(
    base: Mapping[str, str],
    *,
    command: str,
    container_id: str = "",
    netns: str = "",
    ifname: str = "",
    cni_args: str = "",
    cni_path: Sequence[str] = (),
) -> dict[str, str]:
    """``base`` plus the six CNI variables (which override any inherited ones)."""
    env = dict(base)
    env.update(
        CNI_COMMAND=command,
        CNI_CONTAINERID=container_id,
        CNI_NETNS=netns,
        CNI_ARGS=cni_args,
        CNI_IFNAME=ifname,
        CNI_PATH=os.pathsep.join(cni_path),
    )
    return env


def decode_error(out: ExecOutput) -> CNIError:
    """The CNIError a failed run reported (stdout error JSON), else one built from stderr (999)."""
    text = out.stdout.strip()
    if text:
        try:
            raw = json.loads(text)
        except ValueError:
            raw = None
        if isinstance(raw, dict) and ("code" in raw or "msg" in raw):
            code = raw.get("code")
            return CNIError(
                str(raw.get("msg", "")),
                str(raw.get("details", "") or ""),
                code=code if isinstance(code, int) and code > 0 else codes.INTERNAL,
            )
        return CNIError(
            f"netplugin failed but its output is not an error object: {_clip(text)!r}",
            code=codes.INTERNAL,
        )
    err = out.stderr.strip()
    if err:
        return CNIError(f"netplugin failed: {_clip(err)!r}", code=codes.INTERNAL)
    return CNIError(
        f"netplugin failed with no error message (exit status {out.returncode})",
        code=codes.INTERNAL,
    )


def decode_result(out: ExecOutput, cni_version: str) -> dict[str, Any]:
    """A successful ADD's stdout → the result converted to ``cni_version``.

    CNIError 6 (decode failure) when stdout is not a result object, 1 when its ``cniVersion``
    is one podnet cannot convert.
    """
    try:
        raw = json.loads(out.stdout)
    except ValueError as err:
        raise CNIError(
            f"plugin printed an invalid result: {err}", code=codes.DECODE_FAILURE
        ) from None
    if not isinstance(raw, dict):
        raise CNIError(
            "plugin printed a result that is not a JSON object", code=codes.DECODE_FAILURE
        )
    return convert_result(raw, cni_version)


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


def _clip(data: bytes, limit: int = 500) -> str:
    text = data.decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"
