#!/usr/bin/env python3
"""Build the self-contained podnet tree the image carries and its init container installs on a
node: an interpreter, its standard library, podnet and its runtime dependencies, the tools the
agent and the plugins run (``ip``, ``nft``, ``setpriv``, ``nsenter``), and every shared library
all of them load, down to the dynamic loader. Nothing on the node is used but its kernel.

Usage (deploy/build.sh runs it with the interpreter of the venv to bundle)::

    python deploy/bundle.py --rootfs DIR [--prefix /opt/podnet]

It writes a root file system for ``FROM scratch`` under DIR and prints the bundle's directory:

- ``<prefix>/<version>/`` — the bundle, named ``podnet-<package version>-<content hash>`` so a
  new build never lands over the files of a running one (the install step copies it whole and
  keeps the old one while its plugin files may still run):

  - ``bin/python3``: a copy of the interpreter the venv runs on, its ``PT_INTERP`` set to the
    bundle's own ``lib/ld-linux-*.so.*`` and its ``DT_RPATH`` to ``lib/`` (patchelf), so it
    and every extension module it loads resolve their libraries in the bundle (``DT_RPATH``,
    not ``RUNPATH``: it also serves the dependencies of what is dlopen'ed). The standard
    library beside it in ``lib/python3.X`` is found by the interpreter's own landmark search
    (``lib/python3.X/os.py`` above ``bin/``), so no environment variable is needed;
  - ``lib/podnet/``: the ``podnet`` package alone (plus its dist-info), first on the plugins'
    ``sys.path``; ``lib/site-packages/``: its runtime dependencies, copied from the venv's
    installed distributions (their ``RECORD``), so the bundle holds the versions the tests ran;
  - ``sbin/``: the tools, patched like the interpreter;
  - ``bin/podnetctl``: the command line, ``#!<bundle>/bin/python3 -IS``;
  - ``BUNDLE``: the version, written last (a copy without it is incomplete).

  Everything is byte-compiled with ``--invalidation-mode unchecked-hash``: a copy that does not
  keep modification times (``kubectl cp``, an image layer) still uses the ``.pyc`` files.
- ``/usr/sbin/{ip,nft,setpriv,nsenter}`` and ``/usr/bin/podnetctl``: symlinks into the bundle
  (the agent's ``PATH`` in the container);
- the machine's ``/etc/iproute2``, ``/etc/protocols`` and ``/etc/services`` (names ``ip`` and
  ``nft`` resolve); empty ``/tmp`` (1777), ``/run``, ``/var/lib/podnet``.

Requires ``patchelf`` (Debian package ``patchelf``) and ``ldd`` (libc-bin).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

#: The tools the agent and the plugins run (Debian: iproute2, nftables, util-linux).
TOOLS = ("ip", "nft", "setpriv", "nsenter")
#: Parts of the standard library no podnet code path or dependency uses (the kubernetes
#: client imports ``pydoc``, libraries ``unittest.mock`` or ``doctest``: those stay).
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
               "site-packages", "dist-packages", "__pycache__", "venv", "turtle.py"}
#: Extension modules left out (the libraries they need are large and nothing imports them).
DYNLOAD_SKIP = ("_tkinter", "_curses", "_curses_panel", "_dbm", "_gdbm", "readline", "nis",
                "audioop", "_test", "xxlimited", "_xxtestfuzz", "_ctypes_test")  # fmt: skip


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def needed_libs(paths: list[Path]) -> dict[str, Path]:
    """Every shared library ``paths`` load, by soname → resolved path (``ldd``), loader too."""
    out: dict[str, Path] = {}
    for path in paths:
        for line in run("ldd", str(path)).splitlines():
            m = re.match(r"\s*(\S+) => (/\S+) \(0x", line) or re.match(r"\s*(/\S+) \(0x", line)
            if not m:
                continue
            if len(m.groups()) == 2:
                out[m.group(1)] = Path(m.group(2)).resolve()
            else:
                out[os.path.basename(m.group(1))] = Path(m.group(1)).resolve()
    return out


def runtime_closure(name: str = "podnet") -> list[metadata.Distribution]:
    """``name``'s distribution and every one its requirements pull in (no extras), as installed
    in this interpreter's environment."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a venv without it: pip's copy
        from pip._vendor.packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return list(seen.values())


def copy_dist(dist: metadata.Distribution, dest: Path) -> None:
    """Copy what ``dist`` installed under its site-packages (RECORD) into ``dest``."""
    base = Path(str(dist.locate_file(""))).resolve()
    for item in dist.files or []:
        src = Path(str(dist.locate_file(item))).resolve()
        try:
            rel = src.relative_to(base)
        except ValueError:
            continue  # console scripts in bin/
        if "__pycache__" in rel.parts or not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def copy_tree(src: Path, dest: Path, skip: set[str]) -> None:
    shutil.copytree(src, dest, symlinks=False, dirs_exist_ok=True,
                    ignore=lambda _d, names: [n for n in names if n in skip or n.endswith(".pyc")])


def content_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def build(rootfs: Path, prefix: str) -> Path:
    import podnet

    version = metadata.version("podnet")
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stage = rootfs / prefix.lstrip("/") / ".stage"
    if stage.exists():
        shutil.rmtree(stage)
    lib = stage / "lib"
    # the standard library and the extension modules this interpreter was built with
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    copy_tree(stdlib, lib / py, STDLIB_SKIP)
    dynload = lib / py / "lib-dynload"
    for so in list(dynload.glob("*.so")):
        if so.name.split(".", 1)[0] in DYNLOAD_SKIP:
            so.unlink()
    # podnet alone, then its dependencies
    own = lib / "podnet"
    copy_tree(Path(podnet.__file__).resolve().parent, own / "podnet", {"__pycache__"})
    dists = runtime_closure()
    for dist in dists:
        if dist.metadata["Name"].lower() == "podnet":
            info = own / f"podnet-{version}.dist-info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "METADATA").write_text(str(dist.read_text("METADATA") or ""))
            continue
        copy_dist(dist, lib / "site-packages")
    # the interpreter and the tools, then every library they and the extension modules load
    base_exe = Path(os.path.realpath(sys.executable))
    (stage / "bin").mkdir(parents=True, exist_ok=True)
    (stage / "sbin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(base_exe, stage / "bin" / "python3")
    tools = []
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")
        if found is None:
            raise SystemExit(f"bundle: {tool} is not installed")
        shutil.copy2(os.path.realpath(found), stage / "sbin" / tool)
        tools.append(stage / "sbin" / tool)
    elves = [base_exe, *tools, *dynload.glob("*.so"), *(lib / "site-packages").rglob("*.so")]
    libs = needed_libs(elves)
    for soname, path in libs.items():
        shutil.copy2(path, lib / soname)
    # the name: the package version and a hash of everything in the bundle
    name = f"podnet-{version}-{content_hash(stage)}"
    final = rootfs / prefix.lstrip("/") / name
    if final.exists():
        shutil.rmtree(final)
    stage.rename(final)
    home = f"{prefix.rstrip('/')}/{name}"
    loader = next(s for s in libs if s.startswith("ld-linux"))
    for exe in [final / "bin" / "python3", *(final / "sbin" / t for t in TOOLS)]:
        run("patchelf", "--set-interpreter", f"{home}/lib/{loader}", "--force-rpath",
            "--set-rpath", f"{home}/lib", str(exe))
    (final / "bin" / "podnetctl").write_text(
        f"#!{home}/bin/python3 -IS\n"
        "# podnet's command line in a self-contained bundle (deploy/bundle.py)\n"
        "import sys, site\n"
        f"sys.path.insert(0, {str(Path(home, 'lib', 'podnet'))!r})\n"
        f"site.addsitedir({str(Path(home, 'lib', 'site-packages'))!r})\n"
        "from podnet.cli.main import main\n"
        "sys.exit(main())\n")  # fmt: skip
    (final / "bin" / "podnetctl").chmod(0o755)
    # byte-compile with the bundled interpreter, run through its own loader (its PT_INTERP is
    # the path on the node), after checking it finds its standard library beside it
    python = [str(final / "lib" / loader), "--library-path", str(final / "lib"),
              str(final / "bin" / "python3"), "-IS"]  # fmt: skip
    prefix_seen = run(*python, "-c", "import sys, os; print(sys.prefix, os.__file__)").split()
    if prefix_seen[0] != str(final) or not prefix_seen[1].startswith(str(final)):
        raise SystemExit(f"bundle: the copied interpreter does not find its own stdlib: "
                         f"{prefix_seen}")  # fmt: skip
    # a file that does not compile (a template, a Python 2 example) is left as it is
    subprocess.run([*python, "-m", "compileall", "-q", "-j", "0",
                    "--invalidation-mode", "unchecked-hash",
                    str(final / "lib" / py), str(final / "lib" / "podnet"),
                    str(final / "lib" / "site-packages")],
                   check=False, env={"PATH": "/usr/bin:/bin"},
                   stdout=subprocess.DEVNULL)  # fmt: skip
    (final / "BUNDLE").write_text(name + "\n")
    # the container's view: tools and podnetctl on PATH, the usual empty directories
    for rel, target in [*((f"usr/sbin/{t}", f"{home}/sbin/{t}") for t in TOOLS),
                        ("usr/bin/podnetctl", f"{home}/bin/podnetctl")]:  # fmt: skip
        link = rootfs / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    # what ip and nft read by name: routing protocol and table names, protocol numbers
    for rel in ("etc/iproute2", "etc/protocols", "etc/services"):
        src = Path("/", rel)
        if src.is_dir():
            shutil.copytree(src, rootfs / rel, dirs_exist_ok=True)
        elif src.is_file():
            (rootfs / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, rootfs / rel)
    for rel, mode in (("tmp", 0o1777), ("etc", 0o755), ("run", 0o755), ("var/lib/podnet", 0o755),
                      ("proc", 0o755), ("sys", 0o755), ("dev", 0o755)):  # fmt: skip
        (rootfs / rel).mkdir(parents=True, exist_ok=True)
        (rootfs / rel).chmod(mode)
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", required=True, type=Path)
    parser.add_argument("--prefix", default="/opt/podnet")
    args = parser.parse_args()
    args.rootfs.mkdir(parents=True, exist_ok=True)
    os.umask(0o022)
    print(build(args.rootfs, args.prefix))


if __name__ == "__main__":
    main()
