"""Running one CNI plugin: finding it in CNI_PATH, its environment, running it with a deadline,
and decoding its answer — libcni's ``pkg/invoke``, shared by the runtime (``podnetctl net``,
:mod:`podnet.runtime.invoke`) and by plugins that delegate (:mod:`podnet.ipam.delegate`).

It is on the plugin path, so it imports only :mod:`podnet.proc` and :mod:`podnet.cni.fastjson`
(no subprocess, json or typing at run time).

Environment (libcni ``invoke.Args.AsEnv``): the caller's environment with ``CNI_COMMAND``,
``CNI_CONTAINERID``, ``CNI_NETNS``, ``CNI_ARGS``, ``CNI_IFNAME`` and ``CNI_PATH`` set last.
Errors (CNI SPEC 1.1.0 "Error"): a plugin that printed an error object gives a
:class:`~podnet.errors.CNIError` with its own ``code``, ``msg`` and ``details``; one that
failed without one gives code 999 naming it and quoting its output; a result that is not a JSON
object gives code 6.
"""

from __future__ import annotations

import os

from podnet import errors
from podnet.errors import CNIError, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from podnet.proc import Spawned

#: How much of a plugin's output an error message quotes.
CLIP = 500


def find(plugin_type: str, paths: Sequence[str]) -> str:
    """The first executable regular file ``<dir>/<plugin_type>`` over ``paths`` (CNI_PATH
    order), as an absolute path. A type containing ``/`` (it would escape CNI_PATH), ``.`` or
    ``..`` is refused. Code 7 (libcni: ``failed to find plugin "x" in path [...]``)."""
    if not plugin_type or "/" in plugin_type or plugin_type in (".", ".."):
        raise InvalidConfig(f"invalid plugin type {plugin_type!r}")
    for d in paths:
        candidate = os.path.join(d, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise InvalidConfig(f'failed to find plugin "{plugin_type}" in path [{" ".join(paths)}]')


def env(
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
    out = dict(base)
    out.update(
        CNI_COMMAND=command,
        CNI_CONTAINERID=container_id,
        CNI_NETNS=netns,
        CNI_ARGS=cni_args,
        CNI_IFNAME=ifname,
        CNI_PATH=os.pathsep.join(cni_path),
    )
    return out


def start(
    path: str,
    stdin: bytes,
    environ: Mapping[str, str],
    *,
    wrapper: Sequence[str] = (),
    timeout: float | None = None,
) -> Spawned:
    """Start the plugin file ``path`` (behind ``wrapper``, e.g. ``ip netns exec node``) with
    ``stdin`` and exactly ``environ``; ``timeout`` seconds (default: :mod:`podnet.proc`'s tool
    deadline). Collect with ``.wait_raw()``. Code 5 when it cannot be started."""
    from podnet import proc

    try:
        return proc.spawn([*wrapper, path], stdin, environ, timeout, die_with_parent=True)
    except proc.ToolMissing:
        raise
    except errors.KernelError as err:
        raise CNIError(f"cannot execute {path}: {err.msg}", err.details,
                       code=errors.IO_FAILURE) from err  # fmt: skip


def clip(data: bytes | str, limit: int = CLIP) -> str:
    """Output text for a message: decoded, stripped, at most ``limit`` characters."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def decode_error(stdout: bytes | str, stderr: bytes | str, returncode: int,
                 what: str = "plugin") -> CNIError:  # fmt: skip
    """The error a failed run reported: its error object on stdout (code, msg, details passed
    through; a missing or invalid code becomes 999), else code 999 naming ``what`` and quoting
    its stdout or stderr."""
    from podnet.cni.fastjson import loads

    text = clip(stdout, 1 << 20)
    raw: Any = None
    if text:
        try:
            raw = loads(text)
        except ValueError:
            raw = None
    if isinstance(raw, dict) and ("code" in raw or "msg" in raw):
        code = raw.get("code")
        valid = isinstance(code, int) and not isinstance(code, bool) and code > 0
        return CNIError(
            str(raw.get("msg", "")),
            str(raw.get("details", "") or ""),
            code=code if valid else errors.INTERNAL,
        )
    if text:
        return CNIError(f"{what} failed but its output is not an error object: {clip(text)!r}",
                        code=errors.INTERNAL)  # fmt: skip
    err = clip(stderr)
    if err:
        return CNIError(f"{what} failed: {err!r}", code=errors.INTERNAL)
    return CNIError(f"{what} failed with no error message (exit status {returncode})",
                    code=errors.INTERNAL)  # fmt: skip


def decode_result(stdout: bytes | str, what: str = "plugin") -> dict[str, Any]:
    """A successful ADD's stdout → the result object (any spec version). Code 6 when it is not
    a JSON object."""
    from podnet.cni.fastjson import loads

    try:
        raw = loads(stdout)
    except ValueError as err:
        raise CNIError(f"{what} printed an invalid result: {err}",
                       code=errors.DECODE_FAILURE) from None  # fmt: skip
    if not isinstance(raw, dict):
        raise CNIError(f"{what} printed a result that is not a JSON object",
                       code=errors.DECODE_FAILURE)  # fmt: skip
    return raw
