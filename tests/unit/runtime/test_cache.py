"""The result cache of :mod:`podnet.runtime.cache` (libcni's ``/var/lib/cni/results`` layout):
paths and file modes, legacy and corrupt entries, entries by network. No root."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import podnet.runtime as runtime
from cni_confs import result, write_json
from podnet.runtime import (
    CacheEntry,
    ResultCache,
)
from podnet.runtime.cache import CACHE_KIND


# -- the result cache ---------------------------------------------------------------------------
def test_cache_path_and_modes(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path / "cni"))
    path = cache.path("net1", "cid", "eth0")
    assert path == str(tmp_path / "cni" / "results" / "net1-cid-eth0")
    entry = CacheEntry(
        "net1",
        "cid",
        "eth0",
        result(),
        netns="/run/netns/x",
        config=b"{}",
        cni_args=(("K", "V"),),
        capability_args={"portMappings": []},
    )
    assert cache.save(entry) == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache.results_dir).st_mode) == 0o700
    raw = json.loads(Path(path).read_text())
    assert raw["kind"] == CACHE_KIND and raw["containerId"] == "cid" and raw["ifName"] == "eth0"
    assert (
        raw["networkName"] == "net1" and raw["config"] == "e30=" and raw["cniArgs"] == [["K", "V"]]
    )
    assert cache.load("net1", "cid", "eth0") == entry
    assert cache.load("net1", "other", "eth0") is None
    cache.remove("net1", "cid", "eth0")
    cache.remove("net1", "cid", "eth0")  # missing is fine
    assert not os.path.exists(path)
    assert os.listdir(cache.results_dir) == []  # no temporary files left


def test_cache_path_needs_all_parts(tmp_path: Path) -> None:
    with pytest.raises(runtime.CacheError, match="requires network name"):
        ResultCache(str(tmp_path)).path("net", "", "eth0")


def test_cache_legacy_and_corrupt(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path))
    os.makedirs(cache.results_dir)
    write_json(Path(cache.path("n", "legacy", "eth0")), result())
    loaded = cache.load("n", "legacy", "eth0")
    assert loaded is not None and loaded.result == result()
    Path(cache.path("n", "bad", "eth0")).write_text("{")
    with pytest.raises(runtime.CacheError, match="not valid JSON"):
        cache.load("n", "bad", "eth0")


def test_cache_entries_by_network(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path))
    for net, cid in (("a", "c1"), ("a", "c2"), ("b", "c3")):
        cache.save(CacheEntry(net, cid, "eth0", result()))
    Path(cache.path("a", "legacy", "eth0")).write_text(json.dumps(result()))
    Path(cache.path("a", "junk", "eth0")).write_text("junk")
    assert [e.container_id for e in cache.entries("a")] == ["c1", "c2"]
    assert [e.container_id for e in cache.entries()] == ["c1", "c2", "c3"]
    assert ResultCache(str(tmp_path / "none")).entries() == []
