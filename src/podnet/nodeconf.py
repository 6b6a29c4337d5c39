"""The node's podnet configuration: one root-owned file, default ``/etc/podnet/podnet.conf``.

A runtime does not call the plugins with one environment: podman runs a container's teardown
DEL from conmon's exit command, which lacks what the shell of ``podman run`` had. What the node
allows therefore lives in a file every plugin call and every ``podnetctl`` command reads:

- ``data_dir = <path>`` (at most once): the node's store — the ``dataDir`` of a NetConf that
  names none, the store of ``podnetctl`` commands given no ``--data-dir``, and a data dir
  NetConfs may name;
- ``allow_data_dir = <path>`` (any number): another data dir NetConfs may name; ``<dir>/*``
  allows every directory below ``<dir>`` (test nodes);
- ``driver = <type>=<module>:<Class>`` (any number, one per type): a network driver the
  administrator adds (:mod:`podnet.drivers`), merged with ``PODNET_DRIVERS`` — here it reaches
  the runtime's cleanup processes too, whose environment lacks ``PODNET_DRIVERS``;
- ``installed = <path>`` (any number): a file ``podnetctl install`` wrote, for
  ``podnetctl uninstall``.

One ``key = value`` per line; blank lines and lines starting with ``#`` are ignored; data
dirs are :func:`podnet.checked.path` other than ``/`` (a store in the root directory, or
every directory of the node), ``installed`` any absolute, normal, printable path without
surrounding blanks. An unknown key, a line without ``=``, a bad path, a second ``data_dir``, a
malformed or repeated ``driver`` type, more than :data:`MAX_BYTES` or bytes that are not UTF-8
make the file malformed. :meth:`NodeConf.render` writes what :func:`parse` reads back equal.
It is read only while no one but root can change it (:mod:`podnet.trusted`'s rule, every
directory on the way included; a regular file). A missing file means the defaults (store
``/var/lib/podnet``, no other data dir). ``PODNET_CONF`` in the environment names another file
(tests); ``PODNET_DATA_DIRS`` may still add data dirs (:func:`podnet.netconf.
allowed_data_dirs`).

Parsed with ``str`` methods only (no ``json``/``re``: the plugins' import budget); read once per
process. Cost on a plugin call: an ``lstat`` per path component, an ``open``, ``fstat`` and
``read``: about 0.2 ms for a present file, measured.
"""

from __future__ import annotations

import os

from podnet.errors import InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: Where the node's configuration lives unless ``PODNET_CONF`` names another file.
NODE_CONF = "/etc/podnet/podnet.conf"
#: The variable (the administrator's, like ``PODNET_DATA_DIRS``) naming another file.
NODE_CONF_ENV = "PODNET_CONF"
#: The store of a node whose configuration names none (the plugins' historical default).
DEFAULT_DATA_DIR = "/var/lib/podnet"
#: The suffix of an ``allow_data_dir`` allowing every directory below it.
BELOW = "/*"
#: A larger file is malformed (it is read on every plugin call).
MAX_BYTES = 65536
KEYS = ("data_dir", "allow_data_dir", "driver", "installed")


class NodeConfError(InvalidConfig):
    """The node configuration is malformed or untrusted (code 7); ``msg`` names the file and,
    for a malformed one, the line."""


class NodeConf:
    """A parsed node configuration: ``path`` (the file), ``data_dir`` (the node's store),
    ``configured`` (whether the file gave ``data_dir``), ``allowed`` (``(directory, below)``
    of each ``allow_data_dir``), ``drivers`` (``(type, "module:Class")`` of each ``driver``)
    and ``installed`` (paths, in order). Equal when every field is."""

    __slots__ = ("path", "data_dir", "configured", "allowed", "installed", "exists", "drivers")

    def __init__(self, path: str, data_dir: str | None = None,
                 allowed: Iterable[tuple[str, bool]] = (), installed: Iterable[str] = (),
                 exists: bool = False,
                 drivers: Iterable[tuple[str, str]] = ()) -> None:  # fmt: skip
        self.path = path
        self.configured = data_dir is not None
        self.data_dir = DEFAULT_DATA_DIR if data_dir is None else data_dir
        self.allowed = list(allowed)
        self.installed = list(installed)
        self.exists = exists
        self.drivers = list(drivers)

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeConf) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "NodeConf(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"

    def data_dirs(self) -> list[tuple[str, bool]]:
        """``(directory, below)`` a NetConf's ``dataDir`` may be: :data:`DEFAULT_DATA_DIR`
        and the configured store (themselves only: a NetConf must not make a second store under
        them) and each ``allow_data_dir``, each once."""
        out = [(DEFAULT_DATA_DIR, False)]
        for entry in [(self.data_dir, False), *self.allowed]:
            if entry not in out:
                out.append(entry)
        return out

    def render(self) -> str:
        """The file's text (what :func:`parse` reads back as this)."""
        lines = [
            "# podnet's node configuration: read by every plugin call and podnetctl command.",
            "# Root's alone (0644); written by podnetctl install, removed by podnetctl uninstall.",
        ]
        if self.configured:
            lines.append(f"data_dir = {self.data_dir}")
        lines += [f"allow_data_dir = {d + BELOW if below else d}" for d, below in self.allowed]
        lines += [f"driver = {kind}={where}" for kind, where in self.drivers]
        lines += [f"installed = {p}" for p in self.installed]
        return "\n".join(lines) + "\n"


def no_store(data_dir: str, hint: str = "") -> str:
    """The one message for a data dir that holds no store (``podnetctl``'s commands, the
    network manager): names ``data_dir`` and where the node's store is configured; ``hint``
    (e.g. ``--init …``) is appended."""
    also = f", or {hint}" if hint else ""
    return (f"No podnet database in {data_dir}: give the data dir of the node's store "
            f"(--data-dir, PODNET_DATA_DIR, data_dir in {conf_path()}){also}")  # fmt: skip


def conf_path() -> str:
    """The node configuration's path: ``PODNET_CONF`` if set and not empty, else
    :data:`NODE_CONF`."""
    return os.environ.get(NODE_CONF_ENV) or NODE_CONF


def data_dir_problem(value: str) -> str | None:
    """Why ``value`` (a checked path) cannot be a data dir or the directory of a below-entry:
    ``/`` is the whole node. None when it can."""
    return "'/' is the root directory: name a directory below it" if value == "/" else None


def installed_path(value: str) -> bool:
    """Whether ``value`` may be an ``installed`` path: absolute, normal, printable, at most
    4096 characters, no blank at either end (the line's own blanks are not the path's)."""
    return (value.startswith("/") and os.path.normpath(value) == value and len(value) <= 4096
            and value.isprintable() and value == value.strip())  # fmt: skip


def driver_entry(value: str) -> tuple[str, str] | None:
    """``type=module:Class`` as ``(type, "module:Class")``: the type and the class
    identifiers, the module dotted identifiers; None otherwise."""
    kind, sep, where = value.partition("=")
    module_name, colon, class_name = where.partition(":")
    if not (sep and colon and kind.isidentifier() and class_name.isidentifier()
            and module_name and all(p.isidentifier() for p in module_name.split("."))):  # fmt: skip
        return None
    return kind, where


def parse(text: str, path: str) -> NodeConf:
    """The configuration in ``text`` (read from ``path``, named in errors). NodeConfError (7)
    naming ``path`` and the line when it is malformed (see the module docstring)."""
    from podnet import checked

    data_dir: str | None = None
    allowed: list[tuple[str, bool]] = []
    installed: list[str] = []
    drivers: list[tuple[str, str]] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()

        def bad(why: str, number: int = number) -> NodeConfError:
            return NodeConfError(f"node config {path}: line {number}: {why}")

        if not sep:
            raise bad(f"not 'key = value': {checked.show(line[:80])}")
        if key not in KEYS:
            raise bad(f"unknown key {checked.show(key[:40])} (known: {', '.join(KEYS)})")
        below = key == "allow_data_dir" and value.endswith(BELOW)
        if key == "installed":  # any file install wrote: longer than a data dir may be
            if not installed_path(value):
                raise bad(f"installed: {checked.show(value[:80])} is not an absolute, normal "
                          "path")  # fmt: skip
        elif key == "driver":
            entry = driver_entry(value)
            if entry is None:
                raise bad(f"driver: {checked.show(value[:80])} is not type=module:Class")
            if any(kind == entry[0] for kind, _ in drivers):
                raise bad(f"driver: type {entry[0]} given twice")
            drivers.append(entry)
            continue
        else:
            if below and value.removesuffix(BELOW) in ("", "/"):
                raise bad(f"{key}: {checked.show(value)} would allow every directory of the "
                          "node: name a directory below /")  # fmt: skip
            try:
                value = checked.path(value.removesuffix(BELOW) if below else value)
            except checked.BadValue as err:
                raise bad(f"{key}: {err}") from None
            problem = data_dir_problem(value)
            if problem:
                raise bad(f"{key}: {problem}")
        if key == "data_dir":
            if data_dir is not None:
                raise bad("data_dir given twice")
            data_dir = value
        elif key == "allow_data_dir":
            allowed.append((value, below))
        else:
            installed.append(value)
    return NodeConf(path, data_dir, allowed, installed, exists=True, drivers=drivers)


def read(path: str | None = None) -> NodeConf:
    """The node configuration in ``path`` (default :func:`conf_path`); the defaults when the
    file does not exist. NodeConfError (7) naming the file when it is malformed, when someone
    other than root could change it or a directory on the way (:func:`podnet.trusted.fault`,
    :func:`podnet.trusted.through_fault`), when it is not a regular file, or when it cannot be
    read."""
    from podnet import trusted

    path = path or conf_path()

    def untrusted(where: str, why: str) -> NodeConfError:
        on_way = "" if where == path else f" (on the way to {path})"
        return NodeConfError(f"node config {path}: {where} {why}{on_way}: podnet reads its node "
                             "configuration only where root alone can change it")  # fmt: skip

    step = trusted.refusing_step(untrusted)

    if not path.startswith("/"):
        raise NodeConfError(f"node config {path}: not an absolute path")
    try:
        real, st, missing = trusted.resolve(path, step)
    except OSError as err:
        raise NodeConfError(f"node config {path}: cannot examine it: {err.strerror}") from None
    if missing:
        return NodeConf(path)
    why = trusted.fault(st, real)
    if why:
        raise untrusted(real, why)
    if st.st_mode & 0o170000 != 0o100000:
        raise NodeConfError(f"node config {path}: {real} is not a regular file")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise NodeConfError(f"node config {path}: cannot open it: {err.strerror}") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise NodeConfError(f"node config {path}: {real} changed while it was read")
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as err:
        raise NodeConfError(f"node config {path}: cannot read it: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise NodeConfError(f"node config {path}: larger than {MAX_BYTES} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise NodeConfError(f"node config {path}: not UTF-8 text") from None
    return parse(text, path)


_loaded: dict[str, NodeConf] = {}


def load() -> NodeConf:
    """:func:`read` of :func:`conf_path`, once per process and path (a plugin call asks for it
    from every verb's config; NodeConfError is raised again each time)."""
    path = conf_path()
    conf = _loaded.get(path)
    if conf is None:
        conf = _loaded[path] = read(path)
    return conf


def forget() -> None:
    """Drop what :func:`load` kept (after the file was written, and in tests)."""
    _loaded.clear()
