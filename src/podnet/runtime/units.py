"""systemd units ``podnetctl install --systemd`` writes and enables."""

from __future__ import annotations

import os
import sys

from podnet.errors import IO_FAILURE, CNIError
from podnet.runtime.files import Installed, write_file

__all__ = ["DEFAULT_UNIT_DIR", "RESTORE_UNIT", "install_units", "restore_unit"]

DEFAULT_UNIT_DIR = "/etc/systemd/system"
RESTORE_UNIT = "podnet-restore.service"
#: How every unit ``install`` writes begins (``uninstall`` removes only those).
_UNIT_HEAD = "[Unit]\nDescription=podnet: "


def _podnetctl() -> str:
    """The ``podnetctl`` console script next to this interpreter (the venv's)."""
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "podnetctl")


def restore_unit(data_dir: str | None = None, podnetctl: str | None = None) -> str:
    """A systemd oneshot unit running ``podnetctl network restore`` at boot, before the
    container runtimes start: bridges, their pods' ports and table ``inet podnet`` (with
    hostPorts and forwards) come back from the store — which, being first, is then the owner of
    the node's table for this boot (``--init``: a node with no store yet gets an empty one).
    It runs before ``network.target``, so without ``--attach-new``: an OVN uplink's parent
    already in its OVS bridge is kept, one not attached yet is left alone and named (the unit
    then fails), never taken while networking may still be configuring it
    (:mod:`podnet.drivers.ovn.physical`). ``data_dir``: the store, default the node
    configuration's when the unit runs."""
    store = f" --data-dir {data_dir}" if data_dir else ""  # else the node config's store
    command = f"{podnetctl or _podnetctl()} network{store} --init"
    return (
        f"{_UNIT_HEAD}restore bridge networks, forwards and table inet podnet\n"
        "After=network-pre.target local-fs.target\n"
        "Wants=network-pre.target\n"
        "Before=network.target containerd.service crio.service podman.service kubelet.service\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={command} restore\n"
        "RemainAfterExit=yes\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install_units(units: dict[str, str], unit_dir: str = DEFAULT_UNIT_DIR) -> list[Installed]:
    """Write systemd units (name → text, mode 0644) and enable each for ``multi-user.target``
    (the ``.wants`` symlink ``systemctl enable`` makes), so they run at the next boot. CNIError
    code 5 when a file cannot be written."""
    done = []
    try:
        for name, text in units.items():
            path = os.path.join(unit_dir, name)
            done.append(write_file(path, text, 0o644))
            wants = os.path.join(unit_dir, "multi-user.target.wants")
            os.makedirs(wants, mode=0o755, exist_ok=True)
            link = os.path.join(wants, name)
            if os.path.islink(link) and os.readlink(link) == path:
                done.append(Installed(link, "unchanged"))
            else:
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(path, link)
                done.append(Installed(link, "created"))
    except OSError as err:
        raise CNIError(f"install failed: {err}", code=IO_FAILURE) from err
    return done
