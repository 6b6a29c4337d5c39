"""The plugin skeleton: environment, stdin, verb dispatch, result and error printing.

Modeled on libcni's ``pkg/skel`` (CNI SPEC 1.1.0 "Parameters", "Error"): env, stdin and stdout
are parameters so it is testable; a per-verb table says which ``CNI_*`` variables are required
and which config version a verb needs; anything that escapes a verb and is not a
:class:`CNIError` becomes code 999. Nothing but the result or the error goes to stdout; logs go
to ``logFile`` (config) or ``CNI_LOG_FILE``.
"""

from __future__ import annotations

import os
import sys
import time

from podnet import errors
from podnet.cni import fastjson, version
from podnet.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import IO, Any

VERBS = ("ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS")


class Call:
    """One invocation: ``command``, ``container_id``, ``netns``, ``ifname``, ``args`` (CNI_ARGS
    as a dict), ``path`` (CNI_PATH list), ``config`` (parsed stdin), ``stdin`` (raw bytes),
    ``log`` (a :class:`Log`: ``call.log.warn(...)`` for failures that must not fail the call)."""

    __slots__ = ("command", "container_id", "netns", "ifname", "args", "path", "config", "stdin",
                 "log")  # fmt: skip

    def __init__(
        self, env: Mapping[str, str], stdin: bytes, config: dict[str, Any], log: Log | None = None
    ) -> None:
        from podnet.cni.netconf import parse_cni_args

        self.command = env.get("CNI_COMMAND", "")
        self.container_id = env.get("CNI_CONTAINERID", "")
        self.netns = env.get("CNI_NETNS", "")
        self.ifname = env.get("CNI_IFNAME", "")
        self.args = parse_cni_args(env.get("CNI_ARGS", ""))
        self.path = [p for p in env.get("CNI_PATH", "").split(os.pathsep) if p]
        self.config = config
        self.stdin = stdin
        self.log = log or Log("", "")


def version_info(requested: str) -> dict[str, Any]:
    """The VERSION answer (spec "VERSION"): ``{"cniVersion", "supportedVersions"}``."""
    shown = requested if requested in version.SUPPORTED_VERSIONS else version.CURRENT_VERSION
    return {"cniVersion": shown, "supportedVersions": list(version.SUPPORTED_VERSIONS)}


#: How :class:`Log` opens its file: appending, never through a symlink planted at the path
#: (``O_NOFOLLOW``: ELOOP, the line is dropped), never blocking (``O_NONBLOCK``: no effect on
#: a regular file); created 0600 with ``O_CREAT | O_EXCL``.
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LOG_MODE = 0o600
#: The first line of every log file podnet writes. podnet appends only to a regular file that
#: is empty (it writes this line first) or begins with it: a NetConf author's ``logFile`` can
#: name any path, and root must not append to /etc/sudoers or a crontab.
LOG_HEADER = b"# podnet log: one line per event; podnet appends only to files that begin so\n"
_S_IFMT, _S_IFREG = 0o170000, 0o100000


class Log:
    """Appends one line per event to ``logFile``/``CNI_LOG_FILE``; a no-op without a path.

    The path comes from the NetConf or the runtime's environment, not from the node's
    administrator, and the plugin runs as root: the file is opened with :data:`_LOG_FLAGS`
    (mode 0600, ``O_EXCL``, when it is created), written only when it is a regular file that
    podnet made (created now, or beginning with :data:`LOG_HEADER`; anything else at the path —
    a device, a FIFO, a symlink — is never opened), and a line that cannot be written is
    dropped without failing the call. A NetConf's ``logFile`` (``confined``) lies in
    /var/log/podnet (:func:`podnet.cni.netconf.log_file`), written only while no one but root
    can change a directory on the way; CNI_LOG_FILE (the administrator's) is taken as given.
    A line is one line (line breaks in a message are written ``\\n``); five system calls for
    an existing log (lstat, open, pread, write, close; a confined log one ``lstat`` more per
    directory), and the logging module would add ~5 ms of imports to every plugin call.
    """

    def __init__(self, path: str, prefix: str, *, confined: bool = False) -> None:
        self.path = path
        self.prefix = prefix
        #: A NetConf's log (its author is not the administrator): written only while its
        #: directory is one that no one but root can change (:meth:`_directory_ok`).
        self.confined = confined

    def _directory_ok(self) -> bool:
        """For a confined log: its directory exists (made 0700 when missing) and it, and
        every directory on the way, can be changed by root alone (:mod:`podnet.trusted`) — so
        no one else can have planted a symlink anywhere on the path."""
        from podnet import trusted

        directory = self.path.rpartition("/")[0]

        def step(parent: str, parent_st: os.stat_result, child: str,
                 child_st: os.stat_result) -> None:  # fmt: skip
            if trusted.through_fault(parent_st, child_st, parent) is not None:
                raise PermissionError(child)

        try:
            real, real_st, missing = trusted.resolve(directory, step)
            if missing:
                if trusted.fault(real_st, real) or len(missing) > 1:
                    return False
                os.mkdir(directory, 0o700)
                real, real_st, missing = trusted.resolve(directory, step)
        except OSError:
            return False
        return not missing and trusted.fault(real_st, real) is None and \
            real_st.st_mode & _S_IFMT == 0o040000  # fmt: skip

    def warn(self, message: str) -> None:
        """A failure the call survives (e.g. a conntrack flush): logged and on stderr, which
        runtimes keep in their own logs; never on stdout."""
        self(f"warning: {message}")
        try:
            os.write(2, f"{self.prefix}: warning: {message}\n".encode(errors="replace"))
        except OSError:
            pass

    def __call__(self, message: str) -> None:
        if not self.path:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        text = "\\n".join(message.splitlines())
        line = f"{stamp} {self.prefix} {text}\n".encode(errors="backslashreplace")
        if self.confined and not self._directory_ok():
            return
        # what is at the path decides before anything is opened: a device node is never
        # opened (opening /dev/watchdog arms it), a missing file is created, never taken over
        try:
            mode: int | None = os.lstat(self.path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError:
            return  # a broken (or planted) log file must not fail the network setup
        if mode is not None and mode & _S_IFMT != _S_IFREG:
            return
        new = mode is None
        try:
            fd = os.open(self.path, _LOG_FLAGS | (os.O_CREAT | os.O_EXCL if new else 0),
                         _LOG_MODE)  # fmt: skip
        except OSError:
            return
        try:
            if new:
                line = LOG_HEADER + line
            elif os.pread(fd, len(LOG_HEADER), 0) != LOG_HEADER:
                return  # not a log podnet made
            os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)


def main(plugin: str, handlers: Mapping[str, Callable[[Call], dict[str, Any] | None]]) -> None:
    """A plugin's console script: :func:`run` one CNI call, flush stdout, and leave with
    :func:`os._exit` and the call's status (0, or 1 after a CNI error on stdout). Interpreter
    finalisation only costs time here: every file, child and the database are closed by then.
    Never returns."""
    status = run(plugin, handlers)
    sys.stdout.flush()
    os._exit(status)


def run(
    plugin: str,
    handlers: Mapping[str, Callable[[Call], dict[str, Any] | None]],
    *,
    env: Mapping[str, str] | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
) -> int:
    """Run one plugin call; returns the exit status (0 success, 1 CNI error).

    ``handlers`` maps verbs to functions returning a result (1.x shape, converted here to the
    config's ``cniVersion``) or None (nothing printed). VERSION is answered here without
    calling anything else.
    """
    env = os.environ if env is None else env
    out = sys.stdout if stdout is None else stdout
    raw_stdin = (sys.stdin.buffer if stdin is None else stdin).read()
    command = env.get("CNI_COMMAND", "")
    cni_version = version.CURRENT_VERSION
    log = Log(env.get("CNI_LOG_FILE", ""), f"{plugin}[{os.getpid()}]")
    started = time.monotonic()
    try:
        if command not in VERBS:
            raise errors.InvalidEnv(
                f"unknown CNI_COMMAND {command!r}: must be one of {', '.join(VERBS)}"
            )
        try:
            config = fastjson.loads(raw_stdin) if raw_stdin.strip() else None
        except ValueError as err:
            raise errors.DecodeFailure(f"error reading network config from stdin: {err}") from None
        except RecursionError:
            raise errors.DecodeFailure("network config on stdin is nested too deeply") from None
        if command == "VERSION":
            requested = config.get("cniVersion", "") if isinstance(config, dict) else ""
            out.write(fastjson.dumps(version_info(str(requested))) + "\n")
            return 0
        if not isinstance(config, dict):
            raise errors.DecodeFailure("network config on stdin must be a JSON object")
        if config.get("cniVersion") in version.SUPPORTED_VERSIONS:
            cni_version = config["cniVersion"]
        from podnet import proc
        from podnet.cni import env as cni_env
        from podnet.cni.netconf import log_file, require_version, tool_timeout

        cni_version = require_version(config)
        confined = log_file(config)
        if confined:
            log.path, log.confined = confined, True
        proc.Limits.timeout = tool_timeout(config)
        minimum = version.MIN_VERSION_FOR_VERB.get(command)
        if minimum and not version.at_least(cni_version, minimum):
            raise errors.IncompatibleVersion(
                f"config version {cni_version} does not allow {command} (needs >= {minimum})"
            )
        cni_env.check(command, env)
        handler = handlers.get(command)
        if handler is None:
            raise CNIError(f"{plugin} does not implement {command}", code=errors.INTERNAL)
        call = Call(env, raw_stdin, config, log)
        result = handler(call)
        if result is not None:
            from podnet.cni.result import convert

            out.write(fastjson.dumps(convert(result, cni_version)) + "\n")
        log(_describe(env, command) + f" ok in {1000 * (time.monotonic() - started):.1f} ms")
        return 0
    except CNIError as err:
        out.write(fastjson.dumps(err.to_json(cni_version)) + "\n")
        detail = f" ({err.details})" if err.details else ""
        log(f"{_describe(env, command)} error {err.code}: {err.msg}{detail}")
        return 1
    except Exception as err:  # noqa: BLE001 - the spec wants every failure as a CNI error
        wrapped = CNIError(f"{type(err).__name__}: {err}", code=errors.INTERNAL)
        out.write(fastjson.dumps(wrapped.to_json(cni_version)) + "\n")
        import traceback

        log(f"{_describe(env, command)} internal error: {traceback.format_exc()}")
        return 1


def _describe(env: Mapping[str, str], command: str) -> str:
    cid = env.get("CNI_CONTAINERID", "")
    ifname = env.get("CNI_IFNAME", "")
    return f"{command} container={cid or '-'} ifname={ifname or '-'}"
