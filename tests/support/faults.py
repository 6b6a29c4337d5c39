"""Fault injection for plugin calls made the way a container runtime makes them.

- :func:`install_plugins`: the plugins as ``podnetctl install`` writes them, so every call runs
  the installed ``#!<python> -IS`` file (no ``site``, no ``json`` pre-imported by a test);
- :func:`run_plugin`: one call inside a node namespace with an explicit environment
  (``env -i``; bytes allowed, for non-UTF-8 values), optionally with tools made unavailable
  (``hide``) — each hidden tool is a ``/dev/null`` bind mount inside a private mount namespace
  of that call only (``unshare -m``), so the host never sees it; podnet's tool lookup also tries
  /usr/sbin, /sbin, /usr/bin, … after PATH, so a PATH without a tool does not hide it;
- :class:`FakeTools`: a directory put first on PATH whose ``nft``/``ip``/``conntrack`` fail
  (always, or only for some arguments or input lines, with a realistic stderr) or hang;
- :class:`SmallFs` (a tiny tmpfs, filled up) and :class:`ReadOnlyDir` (a read-only bind mount)
  for a dataDir; both unmounted by ``close()``;
- :func:`snapshot`: the node's state — every table of ``<dataDir>/podnet.db`` (or "none"), host
  veths, ``nft list ruleset`` and the iptables nat tables of the node (and of given pods), files
  under given directories — and :func:`integrity`: ``PRAGMA integrity_check``;
- :func:`processes_mentioning` / :func:`kill_mentioning`: processes left behind by a call.

Nothing here touches the host's network, mounts or files outside the test's own directories
and namespaces.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns import PLUGIN_ENV, VENV_BIN, sh
from portmap_helpers import normalized, save_tool

PLUGINS = ("podnet", "podnet-ipam", "podnet-portmap", "podnet-redirect")
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
NO_SBIN_PATH = "/usr/bin:/bin"
#: Where podnet looks tools up after $PATH (podnet.proc._FALLBACK_PATH), plus the usual PATH.
TOOL_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin")
CNI_PATH = "/usr/lib/cni"
ERROR_KEYS = {"cniVersion", "code", "msg", "details"}


# --- installed plugins ------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """Plugin files written by ``podnetctl install`` into ``bin_dir``."""

    bin_dir: Path

    def path(self, plugin: str) -> str:
        return str(self.bin_dir / plugin)

    def shebang(self, plugin: str = "podnet") -> list[str]:
        """The ``#!`` line of an installed plugin as argv (``[interpreter, "-IS"]``)."""
        first = Path(self.path(plugin)).read_text().splitlines()[0]
        assert first.startswith("#!"), first
        return first[2:].split()


def install_plugins(root: Path) -> Installed:
    """``podnetctl install --bin-dir <root>/bin --conf-dir <root>/conf``; the files must run
    under ``-IS`` (what this suite is about)."""
    bin_dir, conf_dir = root / "bin", root / "conf"
    sh(str(VENV_BIN / "podnetctl"), "install", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir))
    installed = Installed(bin_dir)
    for plugin in PLUGINS:
        argv = installed.shebang(plugin)
        assert argv[1:] == ["-IS"], f"{plugin} is not installed to run under -IS: {argv}"
    return installed


# --- running a call ---------------------------------------------------------------------------


def cni_env(command: str, *, container_id: str = "", netns: str | None = None, ifname: str = "eth0",
            path: str = BASE_PATH, cni_path: str = CNI_PATH, **extra: str) -> dict[str, str]:
    """The environment a runtime gives a plugin (``netns``: a name under /run/netns, or a path)."""
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": "" if not netns else (netns if netns.startswith("/") else f"/run/netns/{netns}"),
        "CNI_IFNAME": ifname,
        "CNI_PATH": cni_path,
        "PATH": path,
        **PLUGIN_ENV,
    }
    env.update(extra)
    return env


@dataclass
class Outcome:
    """What one plugin process did: exit status, stdout, stderr; ``timed_out`` when it had to
    be killed at the caller's deadline (``seconds``: how long it ran)."""

    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def answer(self) -> Any:
        """stdout parsed as JSON (None when empty; the raw text when it is not JSON)."""
        text = self.stdout.strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def describe(self) -> str:
        tail = f"; stderr: {self.stderr.strip()[-600:]}" if self.stderr.strip() else ""
        state = f"killed after {self.seconds:.1f} s (no answer)" if self.timed_out else f"exit {self.rc}"
        return f"{state}; stdout: {self.stdout.strip()[:800]!r}{tail}"

    def cni_error(self) -> dict[str, Any]:
        """The CNI error object this call printed; AssertionError (naming what was printed)
        unless it failed with exactly one well-formed error that is not 999."""
        assert not self.timed_out, f"call did not return: {self.describe()}"
        assert self.rc != 0, f"call succeeded (exit 0) but must fail: {self.describe()}"
        err = self.answer
        assert isinstance(err, dict), f"stdout is not one JSON object: {self.describe()}"
        assert set(err) <= ERROR_KEYS and isinstance(err.get("code"), int) and isinstance(err.get("msg"), str) \
            and err["msg"], f"not a CNI error object: {self.describe()}"
        assert err["code"] != 999, f"code 999 (internal error): {self.describe()}"
        return err


def answer_problems(out: Outcome, code: int, *, names: Sequence[str] = (), details: Sequence[str] = ()) -> list[str]:
    """What is wrong with ``out`` as a CNI error of ``code`` whose msg or details contain every
    string of ``names`` and whose details contain every string of ``details`` (empty: right)."""
    if out.timed_out:
        return [f"no answer: {out.describe()}"]
    if out.rc == 0:
        return [f"exit 0 (success), want code {code}: {out.describe()}"]
    err = out.answer
    if not isinstance(err, dict) or not isinstance(err.get("code"), int) or not set(err) <= ERROR_KEYS:
        return [f"stdout is not one CNI error object: {out.describe()}"]
    found = []
    if err["code"] != code:
        found.append(f"code {err['code']}, want {code}: {out.describe()}")
    text = f"{err.get('msg', '')} {err.get('details', '')}"
    for n in names:
        if n not in text:
            found.append(f"msg/details do not name {n!r}: {out.describe()}")
    for d in details:
        if d not in str(err.get("details", "")):
            found.append(f"details lack {d!r}: {out.describe()}")
    return found


def _hide_prefix(tools: Iterable[str], path: str) -> list[str]:
    """argv prefix running the rest with every file named ``tool`` in PATH and podnet's
    fallback directories replaced by /dev/null (not executable), in a private mount namespace."""
    targets: list[str] = []
    for tool in tools:
        found = False
        for d in [*path.split(":"), *TOOL_DIRS]:
            candidate = os.path.join(d, tool)
            if d and os.path.lexists(candidate):
                found = True
                real = os.path.realpath(candidate)
                if real not in targets:
                    targets.append(real)
        if not found:
            raise AssertionError(f"{tool} is not installed here: nothing to hide")
    script = 'for t in $PODNET_TEST_HIDE; do mount --bind /dev/null "$t"; done; exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "env", f"PODNET_TEST_HIDE={' '.join(targets)}",
            "sh", "-ec", script, "hide"]


def plugin_argv(node: str, plugin: str, env: Mapping[Any, Any], *, hide: Sequence[str] = ()) -> list[Any]:
    """argv of one call in ``node``: ``ip netns exec <node> [hide…] env -i K=V… <plugin>``.
    Keys and values may be bytes (non-UTF-8 values)."""
    items: list[Any] = []
    for k, v in env.items():
        if isinstance(k, bytes) or isinstance(v, bytes):
            kb = k if isinstance(k, bytes) else k.encode()
            vb = v if isinstance(v, bytes) else v.encode()
            items.append(kb + b"=" + vb)
        else:
            items.append(f"{k}={v}")
    path = env.get("PATH", BASE_PATH)
    path = path.decode() if isinstance(path, bytes) else path
    prefix = _hide_prefix(hide, path) if hide else []
    return ["ip", "netns", "exec", node, *prefix, "env", "-i", *items, plugin]


def run_plugin(node: str, plugin: str, env: Mapping[Any, Any], stdin: bytes | str | dict[str, Any], *,
               hide: Sequence[str] = (), timeout: float = 60) -> Outcome:
    """One plugin call in ``node`` (see :func:`plugin_argv`); ``stdin`` a config dict, text or
    bytes. The call runs in a session of its own: at ``timeout`` the whole process group (the
    plugin and every tool it started) is killed and the outcome is ``timed_out``."""
    if isinstance(stdin, dict):
        stdin = json.dumps(stdin)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    argv = plugin_argv(node, plugin, env, hide=hide)
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(data, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate()
        timed_out = True
    shown = [a.decode(errors="replace") if isinstance(a, bytes) else a for a in argv]
    return Outcome(shown, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.monotonic() - started, timed_out)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- fake tools -------------------------------------------------------------------------------


def real_tool(tool: str) -> str:
    for d in TOOL_DIRS:
        candidate = os.path.join(d, tool)
        if os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError(f"{tool} is not installed")


class FakeTools:
    """A directory of fake tools to put first on PATH (``.path``). Each fake is a shell script
    built from rules, checked in order; a call no rule matches runs the real tool (by absolute
    path) with the same arguments and input. ``marker`` is a unique string in the command line
    of every process a hanging fake leaves (see :func:`processes_mentioning`)."""

    def __init__(self, root: Path) -> None:
        self.dir = root / f"fake-tools-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir(parents=True)
        # A unique sleep duration identifies the hung tools of this test.
        self.marker = f"987{int.from_bytes(os.urandom(2), 'big'):05d}.{os.getpid() % 1000:03d}"
        self.rules: dict[str, list[str]] = {}
        self.inputs: dict[str, bool] = {}  # tool → whether a rule tests its input

    @property
    def path(self) -> str:
        return f"{self.dir}:{BASE_PATH}"

    def fail(self, tool: str, stderr: str, *, args: str = "*", input: str = "", code: int = 1,
             touch: Path | None = None) -> None:
        """``tool`` exits ``code`` printing ``stderr`` when its arguments (joined by spaces, one
        space added each side) match the shell pattern ``args`` (e.g. ``'*" link del "*'``)
        and, with ``input`` (a grep regex), when a line of its stdin (an ``nft -f -`` or
        ``ip -batch -`` script) matches it. ``touch``: a file created when the rule fires."""
        action = f"printf '%s\\n' {_sh_quote(stderr)} >&2; exit {code}"
        if touch is not None:
            action = f"touch {_sh_quote(str(touch))}; {action}"
        self._rule(tool, args, input, action)

    def hang(self, tool: str, *, args: str = "*", input: str = "") -> None:
        """``tool`` never finishes (sleeps ~1000 s, as the same process) for matching calls."""
        self._rule(tool, args, input, f'rm -f "$in"; exec sleep {self.marker}')

    def _rule(self, tool: str, args: str, input: str, action: str) -> None:
        if input:
            test = f"grep -q -e {_sh_quote(input)} \"$in\""
        else:
            test = "true"
        self.rules.setdefault(tool, []).append(f'case " $* " in {args}) if {test}; then {action}; fi;; esac')
        self.inputs.setdefault(tool, False)
        self.inputs[tool] |= bool(input)
        real = real_tool(tool)
        if self.inputs[tool]:  # a rule reads the whole input first (no line-by-line answers)
            body = "\n".join([
                'in=$(mktemp)',
                'trap \'rm -f "$in"\' EXIT',
                'cat > "$in"',
                *self.rules[tool],
                f'{real} "$@" < "$in"',
            ])
        else:  # stdin streams through: `ip -batch` answers each line as it is read
            body = "\n".join([*self.rules[tool], f'exec {real} "$@"'])
        script = self.dir / tool
        script.write_text("#!/bin/sh\n" + body + "\n")
        script.chmod(0o755)

    def close(self) -> None:
        kill_mentioning(self.marker)
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()

    def __enter__(self) -> FakeTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- database directory faults ------------------------------------------------------------------


class SmallFs:
    """A tmpfs of ``size`` bytes mounted on ``root/<name>`` (the test's own directory); unmounted
    and removed by :meth:`close` even when a plugin still holds files open (lazy unmount)."""

    def __init__(self, root: Path, size: int, name: str = "smallfs") -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        sh("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(self.dir))
        self.mounted = True
        self.holder: sqlite3.Connection | None = None

    def fill(self, leave: int = 0, name: str = ".filler") -> None:
        """Write a filler file until the filesystem is full, then give back ``leave`` bytes."""
        filler = self.dir / name
        with open(filler, "ab", buffering=0) as f:
            chunk = b"\0" * 4096
            try:
                while f.write(chunk):
                    pass
            except OSError:
                pass
        if leave:
            size = filler.stat().st_size
            os.truncate(filler, max(0, size - leave))

    def hold_wal(self, db: str = "podnet.db") -> None:
        """Keep a connection to ``db`` (in this filesystem) that has read from it, until
        :meth:`make_room`: while a connection is open SQLite keeps the database's WAL and
        shared-memory files (https://sqlite.org/wal.html), so a writer on the full filesystem
        still opens the database and fails inside its transaction."""
        self.holder = sqlite3.connect(self.dir / db)
        self.holder.execute("SELECT count(*) FROM pods").fetchone()

    def make_room(self, name: str = ".filler") -> None:
        """Close the :meth:`hold_wal` connection, if any, and remove the filler file, if any."""
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        (self.dir / name).unlink(missing_ok=True)

    def free(self) -> int:
        st = os.statvfs(self.dir)
        return st.f_bavail * st.f_frsize

    def close(self) -> None:
        if self.mounted:
            sh("umount", "-l", str(self.dir), check=False)
            self.mounted = False
        if self.dir.exists() and not os.path.ismount(self.dir):
            self.dir.rmdir()


class ReadOnlyDir:
    """``path`` made read-only for everyone, root included (a read-only bind mount of itself);
    :meth:`close` unmounts it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        sh("mount", "--bind", str(path), str(path))
        self.mounted = True
        sh("mount", "-o", "remount,bind,ro", str(path))

    def close(self) -> None:
        if self.mounted:
            sh("umount", "-l", str(self.path), check=False)
            self.mounted = False


# --- state ----------------------------------------------------------------------------------------


def _connect_ro(db: Path) -> sqlite3.Connection:
    """A connection that only reads. A read-write one is tried first: as the last connection it
    checkpoints and removes the -wal and -shm files on close, so reading leaves the directory as
    it was; a read-only filesystem gets an ``immutable`` one."""
    for uri in (f"file:{db}?mode=rw", f"file:{db}?mode=ro", f"file:{db}?immutable=1"):
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=30)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error:
            continue
    raise sqlite3.OperationalError(f"cannot read {db}")


def db_tables(data_dir: Path) -> dict[str, str]:
    """``{table: sha256 of its rows}`` of ``<data_dir>/podnet.db``; ``{"": "none"}`` without a
    database, ``{"": "unreadable: …"}`` when SQLite cannot read it."""
    db = data_dir / "podnet.db"
    if not db.exists():
        return {"": "none"}
    try:
        conn = _connect_ro(db)
        try:
            # sqlite_sequence (AUTOINCREMENT counters) is SQLite's bookkeeping, not node state: a
            # rolled-back or undone insert may advance it.
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                                 "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            out = {}
            for t in tables:
                rows = conn.execute(f'SELECT * FROM "{t}" ORDER BY 1').fetchall()
                out[t] = f"{len(rows)} rows " + hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()[:16]
            return out
        finally:
            conn.close()
    except sqlite3.Error as err:
        return {"": f"unreadable: {err}"}


def db_rows(data_dir: Path, table: str) -> list[tuple[Any, ...]]:
    db = data_dir / "podnet.db"
    if not db.exists():
        return []
    conn = _connect_ro(db)
    try:
        known = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
        return conn.execute(f'SELECT * FROM "{table}"').fetchall() if known else []
    finally:
        conn.close()


def integrity(data_dir: Path) -> str:
    """``PRAGMA integrity_check`` of ``<data_dir>/podnet.db`` ("ok"; "none" without one)."""
    db = data_dir / "podnet.db"
    if not db.exists():
        return "none"
    try:
        conn = _connect_ro(db)
        try:
            return "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check").fetchall())
        finally:
            conn.close()
    except sqlite3.Error as err:
        return f"cannot check: {err}"


def veths(ns: str) -> list[str]:
    """Names of the veths in ``ns``."""
    out = sh("ip", "-n", ns, "-j", "link", "show", "type", "veth").stdout
    return sorted(link["ifname"] for link in json.loads(out or "[]"))


def links(ns: str) -> list[str]:
    """Names of every link in ``ns``."""
    out = sh("ip", "-n", ns, "-j", "link", "show").stdout
    return sorted(link["ifname"] for link in json.loads(out or "[]"))


def nft_ruleset(ns: str) -> str:
    """``nft list ruleset`` of ``ns`` with its tables sorted by name: a table that is deleted and
    created again with the same content (podnet's rebuild) moves to the end of nft's listing."""
    out = sh("ip", "netns", "exec", ns, "nft", "list", "ruleset").stdout
    tables: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("table ") or not tables:
            tables.append([])
        tables[-1].append(line)
    return "\n".join("\n".join(t) for t in sorted(tables, key=lambda t: t[0]))


def iptables_nat(ns: str, family: int) -> str:
    """``ip(6)tables-save -t nat`` of ``ns`` without comments and counters ("" when absent)."""
    out = sh("ip", "netns", "exec", ns, save_tool(family), "-t", "nat", check=False).stdout
    return "\n".join(normalized(out))


def portmap_leftovers(ns: str) -> list[str]:
    """podnet-portmap's per-container state in ``ns``: CNI-DN chains and CNI-HOSTPORT-DNAT
    entry rules (iptables, both families), and containers' chains or map elements of ``table
    inet podnet_portmap``."""
    left = []
    for family in (4, 6):
        for line in iptables_nat(ns, family).splitlines():
            if "CNI-DN-" in line:
                left.append(f"IPv{family}: {line}")
    out = sh("ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", "podnet_portmap", check=False)
    if out.returncode == 0:
        for item in json.loads(out.stdout)["nftables"]:
            if "chain" in item and item["chain"]["name"].startswith("dn-"):
                left.append(f"nft chain {item['chain']['name']}")
            if "map" in item and item["map"].get("elem"):
                left.append(f"nft map {item['map']['name']}: {json.dumps(item['map']['elem'])[:200]}")
    return left


def files_under(root: Path, skip: Sequence[str] = ()) -> list[str]:
    """``relative/path size`` of every file under ``root`` (names in ``skip`` left out)."""
    if not root.exists():
        return []
    out = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name in skip:
                continue
            p = Path(dirpath) / name
            try:
                size = p.lstat().st_size
            except FileNotFoundError:
                continue
            out.append(f"{p.relative_to(root)} {size}")
    return sorted(out)


DB_FILES = ("podnet.db", "podnet.db-wal", "podnet.db-shm")


@dataclass(frozen=True)
class Snapshot:
    """Named parts of a node's state; ``==`` compares all, :meth:`diff` says what changed."""

    parts: dict[str, str] = field(default_factory=dict)

    def diff(self, other: Snapshot) -> str:
        out = []
        for key in sorted(set(self.parts) | set(other.parts)):
            a, b = self.parts.get(key, "<absent>"), other.parts.get(key, "<absent>")
            if a != b:
                lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "before", "after", lineterm="", n=1))
                out.append(f"[{key}]\n" + "\n".join(lines[2:][:60]))
        return "\n".join(out)

    def changed(self, other: Snapshot) -> list[str]:
        return [k for k in sorted(set(self.parts) | set(other.parts)) if self.parts.get(k) != other.parts.get(k)]


def snapshot(node: str, data_dir: Path | None, *, pods: Sequence[str] = (), dirs: Sequence[Path] = (),
             iptables: bool = True) -> Snapshot:
    """The state a plugin call may change: the database (every table), the node's veths, its
    nftables ruleset and iptables nat tables; per pod netns its links and ruleset; the files
    under ``dirs`` (and the dataDir, database files aside)."""
    parts: dict[str, str] = {}
    if data_dir is not None:
        parts["db"] = "\n".join(f"{t}: {d}" for t, d in db_tables(data_dir).items())
        parts["dataDir files"] = "\n".join(files_under(data_dir, DB_FILES))
    parts["node veths"] = "\n".join(veths(node))
    parts["node nft"] = nft_ruleset(node)
    if iptables:
        parts["node iptables nat"] = iptables_nat(node, 4)
        parts["node ip6tables nat"] = iptables_nat(node, 6)
    for pod in pods:
        parts[f"{pod} links"] = "\n".join(links(pod))
        parts[f"{pod} nft"] = nft_ruleset(pod)
    for d in dirs:
        parts[f"files {d}"] = "\n".join(files_under(d))
    return Snapshot(parts)


def addresses_and_routes(ns: str) -> set[str]:
    """Every address (``addr <ifname> <address>/<prefix>``) and every route of every table, both
    families (``route4|route6 <ip route line>``), of namespace ``ns``."""
    found = set()
    addrs = json.loads(sh("ip", "-n", ns, "-j", "addr", "show").stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            found.add(f"addr {link['ifname']} {a['local']}/{a['prefixlen']}")
    for family in ("4", "6"):
        for line in sh("ip", "-n", ns, f"-{family}", "route", "show", "table", "all").stdout.splitlines():
            found.add(f"route{family} {line.strip()}")
    return found


def podnet_leftovers(node: str, data_dir: Path, baseline: set[str] | None = None) -> list[str]:
    """What podnet would have left: rows of pods/portmap_entries, ``pn…`` veths, elements of the
    hostport maps of ``table inet podnet``, and (given the node's ``baseline`` of
    :func:`addresses_and_routes` before any pod) every address and route the node has beyond
    it or lacks from it (empty when all is clean)."""
    left = []
    if baseline is not None:
        now = addresses_and_routes(node)
        if now != baseline:
            left.append(f"addresses/routes added {sorted(now - baseline)[:6]}, "
                         f"gone {sorted(baseline - now)[:6]}")
    for table in ("pods", "portmap_entries"):
        rows = db_rows(data_dir, table)
        if rows:
            left.append(f"{len(rows)} rows in {table}: {rows[:3]}")
    pn = [v for v in veths(node) if v.startswith("pn")]
    if pn:
        left.append(f"podnet veths: {pn}")
    elements = hostport_elements(node)
    if elements:
        left.append(f"elements in table inet podnet: {elements[:6]}")
    return left


def hostport_elements(node: str) -> list[str]:
    """Elements of every map of ``table inet podnet`` (none when the table is absent)."""
    out = sh("ip", "netns", "exec", node, "nft", "-j", "list", "table", "inet", "podnet", check=False)
    if out.returncode != 0:
        return []
    found = []
    for item in json.loads(out.stdout)["nftables"]:
        m = item.get("map")
        if m:
            found += [f"{m['name']}: {json.dumps(e)}" for e in m.get("elem", [])]
    return found


# --- processes ----------------------------------------------------------------------------------


def processes_mentioning(*needles: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of live processes whose command line contains any needle."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if cmd and any(n in cmd for n in needles):
            found.append((int(entry), cmd))
    return found


def kill_mentioning(*needles: str) -> None:
    for pid, _ in processes_mentioning(*needles):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def children_of(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc/*/stat)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (field 6 of /proc/*/stat): a call started
    with ``start_new_session`` and everything it spawned, also a child that is between its
    (v)fork and its exec when the call dies, whose command line is still the plugin's."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
