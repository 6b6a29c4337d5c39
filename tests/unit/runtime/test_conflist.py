"""Network configuration lists (:mod:`podnet.runtime.conflist`, libcni's ``conf.go``): which file
a name loads, ``.conflist`` before single confs, refusals naming the file, and the spec version
chosen from ``cniVersion``/``cniVersions``. No root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cni_confs import conflist, write_json
from podnet.runtime import (
    ConfigError,
    IncompatibleVersion,
    NetworkNotFound,
    conflist_from_bytes,
    load_conflist,
)
from podnet.runtime.conflist import choose_version


# -- conflist loading ---------------------------------------------------------------------------
def test_load_conflist_by_name(tmp_path: Path) -> None:
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    write_json(tmp_path / "20-b.conflist", conflist("b", plugins=[{"type": "pb"}]))
    net = load_conflist("b", str(tmp_path))
    assert net.name == "b" and [p.type for p in net.plugins] == ["pb"]
    assert net.source == str(tmp_path / "20-b.conflist")
    assert net.raw == (tmp_path / "20-b.conflist").read_bytes()


def test_first_file_by_name_wins(tmp_path: Path) -> None:
    write_json(tmp_path / "20-late.conflist", conflist("n", plugins=[{"type": "late"}]))
    write_json(tmp_path / "10-early.conflist", conflist("n", plugins=[{"type": "early"}]))
    assert load_conflist("n", str(tmp_path)).plugins[0].type == "early"


def test_conflist_files_before_single_confs(tmp_path: Path) -> None:
    # libcni LoadNetworkConf: *.conflist first, then *.conf / *.json.
    write_json(tmp_path / "00-single.conf", {"cniVersion": "1.0.0", "name": "n", "type": "one"})
    write_json(tmp_path / "99-list.conflist", conflist("n", plugins=[{"type": "listed"}]))
    assert load_conflist("n", str(tmp_path)).plugins[0].type == "listed"


@pytest.mark.parametrize("filename", ["10-x.conf", "10-x.json"])
def test_single_conf_wrapped_as_list(tmp_path: Path, filename: str) -> None:
    single = {"cniVersion": "0.4.0", "name": "x", "type": "bridge", "bridge": "br0"}
    write_json(tmp_path / filename, single)
    net = load_conflist("x", str(tmp_path))
    assert net.cni_version == "0.4.0"
    assert [p.raw for p in net.plugins] == [single]


def test_other_files_ignored(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("not json")
    (tmp_path / "sub.conflist").mkdir()
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    assert load_conflist("a", str(tmp_path)).name == "a"


def test_not_found_names_known_networks(tmp_path: Path) -> None:
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    write_json(tmp_path / "20-b.conf", {"cniVersion": "1.0.0", "name": "b", "type": "x"})
    with pytest.raises(NetworkNotFound, match=r'"zzz".*found: a, b') as err:
        load_conflist("zzz", str(tmp_path))
    assert err.value.code == 7


@pytest.mark.parametrize("make_dir", [True, False])
def test_no_configs(tmp_path: Path, make_dir: bool) -> None:
    d = tmp_path / "confs"
    if make_dir:
        d.mkdir()
    with pytest.raises(NetworkNotFound, match="no net configurations found"):
        load_conflist("a", str(d))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        (json.dumps({"cniVersion": "1.0.0", "plugins": [{"type": "x"}]}), "no name"),
        (json.dumps(conflist(plugins=[])).replace('[{"type": "p1"}]', "[]"), "non-empty list"),
        (json.dumps(conflist(plugins=[{"bridge": "x"}])), r"plugins\[0\].*missing 'type'"),
        (json.dumps({"cniVersion": "1.0.0", "name": "s"}), "missing 'type'"),
        (json.dumps(conflist(disableCheck="maybe")), "disableCheck"),
    ],
)
def test_invalid_config_names_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "10-bad.conflist"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as err:
        load_conflist("net1", str(tmp_path))
    assert str(path) in err.value.msg and err.value.code == 7


def test_disable_flags_accept_strings() -> None:
    net = conflist_from_bytes(json.dumps(conflist(disableCheck="true", disableGC=True)).encode())
    assert net.disable_check and net.disable_gc


# -- version choice -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cni_version", "cni_versions", "chosen"),
    [
        ("1.0.0", None, "1.0.0"),
        ("0.3.1", None, "0.3.1"),
        ("1.0.0", ["1.0.0", "1.1.0"], "1.1.0"),
        ("1.0.0", ["1.1.0", "9.9.9"], "1.1.0"),  # unknown versions are skipped
        (None, ["0.4.0", "1.0.0"], "1.0.0"),
        ("1.1.0", ["0.4.0"], "1.1.0"),  # cniVersion takes part in the choice (libcni)
    ],
)
def test_choose_version(
    cni_version: str | None, cni_versions: list[str] | None, chosen: str
) -> None:
    assert choose_version(cni_version, cni_versions) == chosen


@pytest.mark.parametrize(
    ("cni_version", "cni_versions", "error"),
    [
        ("0.2.0", None, IncompatibleVersion),
        ("2.0.0", None, IncompatibleVersion),
        (None, ["9.9.9"], IncompatibleVersion),
        (None, None, ConfigError),
        (1, None, ConfigError),
        ("1.0.0", "1.1.0", ConfigError),
    ],
)
def test_choose_version_errors(cni_version: object, cni_versions: object, error: type) -> None:
    with pytest.raises(error):
        choose_version(cni_version, cni_versions)
