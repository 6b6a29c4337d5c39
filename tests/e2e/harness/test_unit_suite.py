"""``tests/unit`` needs no root: the whole directory run by an unprivileged user (uid and gid
65534, no supplementary group), under the required-environment gate of ``scripts/test.sh``.

The child keeps one capability, ``CAP_DAC_READ_SEARCH`` (read any file, enter any directory),
so that it reads a clone wherever it lies (``/root/…`` included) and the virtualenv in it; it
has no other: no ``CAP_NET_ADMIN``, no ``CAP_SYS_ADMIN``, uid not 0. A unit test that asks for
root (``need("root")``), makes a namespace, runs ``nft`` or writes outside its temporary
directory fails there. ``tests/conftest.py`` also refuses, at collection, a test under
``tests/unit`` with a ``root`` or ``runtime`` mark or the ``lab`` fixture.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import paths
from envgate import need

pytestmark = pytest.mark.root

NOBODY = 65534


def test_unit_tests_pass_as_an_unprivileged_user() -> None:
    need("root", "setpriv")
    caps = "+dac_read_search"
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            f"--inh-caps={caps}", f"--ambient-caps={caps}",
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            str(paths.TESTS / "unit")]  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "PODNET_TEST_REQUIRE": "all",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=paths.REPO,
                         timeout=600)  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "podnet test gate: no test skipped" in out.stdout, text[-4000:]
    assert " passed" in out.stdout.splitlines()[-1], text[-4000:]


def test_the_child_has_no_root() -> None:
    """The child of the test above: not uid 0, and ``CAP_DAC_READ_SEARCH`` is its only
    effective capability (``CapEff`` in ``/proc/self/status``)."""
    need("root", "setpriv")
    code = ("import os; s = open('/proc/self/status').read().split('\\n'); "
            "print(os.geteuid(), os.getegid(), os.getgroups(), "
            "[l.split()[1] for l in s if l.startswith('CapEff:')][0])")  # fmt: skip
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
            sys.executable, "-c", code]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    uid, gid, groups, eff = out.stdout.split(maxsplit=3)
    # CAP_DAC_READ_SEARCH is capability 2 (linux/capability.h): the mask 0x4.
    assert (uid, gid, groups, int(eff, 16)) == (str(NOBODY), str(NOBODY), "[]", 1 << 2)
