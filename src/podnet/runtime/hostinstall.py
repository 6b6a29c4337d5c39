"""Installing podnet on a node from a self-contained bundle: what the init container of the
DaemonSet in ``deploy/`` does, so the node needs no Python.

A bundle (built by ``deploy/bundle.py``) is a directory ``<parent>/<name>`` holding an
interpreter (``bin/python3``, whose dynamic loader and libraries are the bundle's own), the
standard library, podnet and its dependencies, the tools the plugins run (``sbin/``), and a
file ``BUNDLE`` whose content is ``<name>``. Its paths are absolute, so it runs only at
``<parent>/<name>``: the image carries it at ``/opt/podnet/<name>`` and the install step copies
it to the same path on the node, then writes plugin files there that run it
(:func:`podnet.runtime.installer.install` with the bundle's interpreter and ``sbin/``).

Updates are safe against runtimes calling plugins meanwhile, file by file:

- a bundle's name carries a hash of its content, so a new version goes to a new directory:
  it is copied under a temporary name and renamed into place (one ``rename(2)``), so a
  directory of that name is always whole;
- the plugin files are replaced only after that, each by a rename, and always name a complete
  bundle;
- the bundles the plugin files named before this install are kept (a plugin started before
  the rename may still be loading modules from one); older ones are removed — only
  directories that are bundles (their ``BUNDLE`` file names them) and this step's leftovers.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from podnet.errors import IO_FAILURE, CNIError
from podnet.runtime import installer
from podnet.runtime.files import Installed
from podnet.runtime.pluginfile import PLUGIN_MARK, PLUGINS

__all__ = ["BUNDLE_FILE", "Bundle", "NotABundle", "copy_bundle", "install_bundle",
           "prune_bundles", "referenced_bundles", "running_bundle"]  # fmt: skip

#: The file in a bundle's root naming it; a directory without it is not (yet) a bundle.
BUNDLE_FILE = "BUNDLE"
_TMP_MARK = ".tmp-"


class NotABundle(ValueError):
    """This podnet does not run from a bundle (``podnetctl install --bundle-dir`` needs one)."""


@dataclass(frozen=True)
class Bundle:
    """A bundle at ``root`` (absolute; its last component is ``name``)."""

    root: str

    @property
    def name(self) -> str:
        return os.path.basename(self.root)

    @property
    def parent(self) -> str:
        return os.path.dirname(self.root)

    @property
    def interpreter(self) -> str:
        return os.path.join(self.root, "bin", "python3")

    @property
    def tool_dir(self) -> str:
        return os.path.join(self.root, "sbin")


def _is_bundle(path: str) -> bool:
    try:
        with open(os.path.join(path, BUNDLE_FILE), encoding="utf-8") as f:
            return f.read().strip() == os.path.basename(path)
    except OSError:
        return False


def running_bundle(executable: str | None = None) -> Bundle:
    """The bundle whose interpreter ``executable`` (default ``sys.executable``) is:
    ``<root>/bin/python3`` with ``<root>/BUNDLE`` naming ``<root>``. NotABundle otherwise."""
    exe = os.path.abspath(executable or sys.executable)
    root = os.path.dirname(os.path.dirname(exe))
    if os.path.basename(exe) != "python3" or not _is_bundle(root):
        raise NotABundle(f"{exe} is not the interpreter of a podnet bundle (deploy/bundle.py)")
    return Bundle(root)


def copy_bundle(bundle: Bundle, dest_parent: str) -> Installed:
    """Copy ``bundle`` to ``dest_parent/<name>`` (created if need be, mode 0755): under a
    temporary name first, then renamed into place. ``unchanged`` when a complete copy is
    there; an incomplete one (no ``BUNDLE`` file: an install that died) is replaced. CNIError
    code 5 when it cannot be written."""
    dest = os.path.join(dest_parent, bundle.name)
    if _is_bundle(dest):
        return Installed(dest, "unchanged")
    tmp = os.path.join(dest_parent, f".{bundle.name}{_TMP_MARK}{os.getpid()}")
    try:
        os.makedirs(dest_parent, mode=0o755, exist_ok=True)
        if os.path.lexists(tmp):
            shutil.rmtree(tmp)
        shutil.copytree(bundle.root, tmp, symlinks=True)
        os.chmod(tmp, 0o755)
        action = "created"
        if os.path.lexists(dest):
            shutil.rmtree(dest)
            action = "updated"
        os.rename(tmp, dest)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CNIError(f"install failed: copying {bundle.root} to {dest}: {err}",
                       code=IO_FAILURE) from err  # fmt: skip
    return Installed(dest, action)


def referenced_bundles(bin_dir: str, parent: str) -> set[str]:
    """Names of the bundles under ``parent`` that podnet's plugin files in ``bin_dir`` run
    (their ``#!`` line is ``<parent>/<name>/bin/python3 …``)."""
    out = set()
    prefix = "#!" + os.path.join(parent, "")
    for plugin in PLUGINS:
        try:
            with open(os.path.join(bin_dir, plugin), encoding="utf-8", errors="replace") as f:
                first, second = f.readline(), f.readline()
        except OSError:
            continue
        if second.startswith(PLUGIN_MARK) and first.startswith(prefix):
            name = first[len(prefix):].split("/", 1)[0]
            if name:
                out.add(name)
    return out


def prune_bundles(parent: str, keep: set[str]) -> list[Installed]:
    """Remove the bundles under ``parent`` not named in ``keep``, and leftovers of copies
    that died (``.<name>.tmp-<pid>``); nothing else there is touched. Each removed directory
    is reported ``removed``; one that cannot be removed is left (reported ``kept``)."""
    done: list[Installed] = []
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return done
    for entry in entries:
        path = os.path.join(parent, entry)
        leftover = (entry.startswith(".podnet-") and _TMP_MARK in entry
                    and os.path.isdir(path) and not os.path.islink(path))  # fmt: skip
        if not (leftover or (_is_bundle(path) and entry not in keep)):
            continue
        try:
            shutil.rmtree(path)
            done.append(Installed(path, "removed"))
        except OSError:
            done.append(Installed(path, "kept"))
    return done


def install_bundle(
    bundle_dir: str,
    *,
    bundle: Bundle | None = None,
    bin_dir: str = installer.DEFAULT_BIN_DIR,
    plugins: Sequence[str] | None = None,
    warn: Callable[[str], None] | None = None,
    **install_args: object,
) -> list[Installed]:
    """Install ``bundle`` (default: the one this process runs from, :func:`running_bundle`)
    on a node: ``bundle_dir`` is where the node's ``<bundle.parent>`` (``/opt/podnet``) is
    mounted in this process (not that path itself, which holds this process's own bundle).
    Copies the bundle there (:func:`copy_bundle`), writes the plugin files into ``bin_dir``
    (the node's CNI bin dir as mounted here) running the bundle's interpreter with its
    ``sbin/`` first on ``PATH`` (:func:`podnet.runtime.installer.install`; ``install_args``
    are passed on, ``conflist`` defaults to False), then removes bundles no plugin file ran
    before or runs now (:func:`prune_bundles`). Returns what was done per path.

    Raises NotABundle, ValueError when ``bundle_dir`` is the bundle's own parent, and what
    :func:`~podnet.runtime.installer.install` raises (UnsafeSource, CNIError 5).
    """
    own = bundle or running_bundle()
    if os.path.realpath(bundle_dir) == os.path.realpath(own.parent):
        raise ValueError(f"--bundle-dir {bundle_dir} is where this bundle itself lives; mount the "
                         f"node's {own.parent} elsewhere")  # fmt: skip
    before = referenced_bundles(bin_dir, own.parent)
    done = [copy_bundle(own, bundle_dir)]
    install_args.setdefault("conflist", False)
    done += installer.install(bin_dir=bin_dir, plugins=plugins, interpreter=own.interpreter,
                              tool_dirs=[own.tool_dir], warn=warn,
                              **install_args)  # type: ignore[arg-type]  # fmt: skip
    done += prune_bundles(bundle_dir, before | {own.name})
    return done
