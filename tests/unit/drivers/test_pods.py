"""The shared ADD, DEL and CHECK pipeline (:mod:`podnet.drivers.pods`) without root or a kernel:
a real SQLite store in a temporary dataDir, and every tool replaced at the one process seam,
:class:`podnet.proc.Spawned` (``spawn`` and ``run`` both start through it), by a fake that
records what it was given and answers as told. What the pipeline would ask the kernel directly
(host sysctls, the netns check) is replaced too, so nothing touches this machine."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet import drivers, errors, proc, reconcile
from podnet.cni.skel import Call
from podnet.drivers import base, pods, teardown
from podnet.drivers.bridge import BridgeDriver
from podnet.drivers.ptp import PtpDriver
from podnet.link import names, sysctl
from podnet.netconf import PodnetConf, StoreConf
from podnet.plugins import podnet as plugin
from podnet.store import open_store
from podnet.store.networks import Networks


class Tool:
    """A fake started tool: ``argv``, its input (``stdin``, all that was fed), the answer."""

    def __init__(self, tools: Tools, argv: list[str], stdin: bytes | None, defer: bool) -> None:
        self.tools, self.argv, self.stdin = tools, argv, stdin or b""
        self.deferred, self.asked_lines, self.done = defer, 0, False
        tools.started.append(self)

    def feed(self, data: bytes) -> None:
        assert self.deferred
        self.deferred, self.stdin = False, data

    def ask(self, line: bytes, wait: float) -> bytes | None:
        return None

    def wait(self) -> tuple[int, str, str]:
        if not self.done:
            self.done = True
            self.tools.finished.append(self)
        return self.tools.answer(self)

    def wait_raw(self) -> tuple[int, bytes, bytes]:
        rc, out, err = self.wait()
        return rc, out.encode(), err.encode()

    def check(self) -> str:
        rc, out, err = self.wait()
        if rc != 0:
            raise proc.ToolError(self.argv, rc, out, err)
        return out

    def reap(self) -> None:
        self.done = True

    def abandon(self) -> None:
        self.done = True

    @property
    def text(self) -> str:
        return " ".join(self.argv) + "\n" + self.stdin.decode()


class Tools:
    """Every tool the pipeline started, in order; ``fail``: (substring of argv and input, rc,
    stderr) a tool answers with when its text holds the substring."""

    def __init__(self) -> None:
        self.started: list[Tool] = []
        self.finished: list[Tool] = []
        self.fail: list[tuple[str, int, str]] = []

    def answer(self, tool: Tool) -> tuple[int, str, str]:
        for needle, rc, err in self.fail:
            if needle in tool.text:
                return rc, "", err
        return 0, "[]" if "-j" in tool.argv else "", ""

    def fed(self, needle: str) -> list[Tool]:
        return [t for t in self.started if needle in t.text]


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch) -> Tools:
    fake = Tools()

    def spawned(argv: Any, stdin: bytes | None = None, env: Any = None, timeout: Any = None, *,
                defer: bool = False, die_with_parent: bool = False) -> Tool:  # fmt: skip
        return Tool(fake, list(argv), stdin, defer)

    monkeypatch.setattr(proc, "Spawned", spawned)
    monkeypatch.setattr(sysctl, "configure_host_side", lambda host_if, families: None)
    monkeypatch.setattr(pods, "require_netns", lambda call: None)
    return fake


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A dataDir whose (fake) table counts as current; the table's owner record is kept in
    the test's directory, not the node's ``/run/podnet/tables``."""
    monkeypatch.setattr(reconcile, "_claim_path", lambda: str(tmp_path / "table-owner"))
    with open_store(str(tmp_path)) as store:
        store.set_state(reconcile.EPOCH_KEY, reconcile.epoch())
    yield tmp_path


_ids = itertools.count()


def call(command: str, config: dict[str, Any], cid: str = "", ifname: str = "eth0") -> Call:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid or f"c{next(_ids)}",
           "CNI_NETNS": "/run/netns/fake", "CNI_IFNAME": ifname}  # fmt: skip
    return Call(env, b"", config)


def netconf(data: Path, **more: Any) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "unit", "type": "podnet", "dataDir": str(data),
            "mtu": 1400, "ranges": ["10.250.0.0/30"], **more}  # fmt: skip


def rows(data: Path) -> list[str]:
    with open_store(str(data)) as store:
        return [str(p.container_id) for p in store.pods.all()]


def test_add_feeds_the_pair_then_configures_the_pod(tools: Tools, data: Path) -> None:
    c = call("ADD", netconf(data))
    result = pods.attach(PtpDriver(), c, PodnetConf(c.config))
    host_if = names.host_ifname(c.container_id, "eth0")
    pair = tools.fed(f"link add {host_if}")
    pod = tools.fed("nsenter")
    assert len(pair) == 1 and len(pod) == 1
    assert tools.started.index(pair[0]) < tools.started.index(pod[0])
    assert "addr add 10.250.0.2/32" in pod[0].text and "0.0.0.0/0 via 10.250.0.1" in pod[0].text
    assert result["ips"][0]["address"] == "10.250.0.2/32"
    assert rows(data) == [c.container_id]


def test_a_failed_step_after_the_pair_undoes_pair_rows_and_address(tools: Tools,
                                                                   data: Path) -> None:  # fmt: skip
    tools.fail.append(("nsenter", 1, "RTNETLINK answers: Operation not permitted"))
    c = call("ADD", netconf(data))
    with pytest.raises(errors.CNIError) as failed:
        pods.attach(PtpDriver(), c, PodnetConf(c.config))
    assert failed.value.code == errors.KERNEL_FAILURE
    host_if = names.host_ifname(c.container_id, "eth0")
    pair, deleted = tools.fed(f"link add {host_if}"), tools.fed(f"link del dev {host_if}")
    assert pair and deleted and tools.started.index(pair[0]) < tools.started.index(deleted[0])
    assert rows(data) == []
    tools.fail.clear()
    again = call("ADD", netconf(data))  # the range's one address is free again
    assert pods.attach(PtpDriver(), again, PodnetConf(again.config))["ips"][0]["address"] == \
        "10.250.0.2/32"  # fmt: skip


class LateFailure(PtpDriver):
    """A driver whose step after the pair (:meth:`after_pair`) fails, after registering an
    undo of its own."""

    def __init__(self) -> None:
        self.undone: list[str] = []

    def after_pair(self, call: Call, conf: PodnetConf, link: Any, choice: Any,
                   undo: Any) -> None:  # fmt: skip
        undo.push("the driver's step", lambda: self.undone.append(link.host_if))
        raise errors.KernelError("the driver's step failed")


def test_a_failed_driver_step_undoes_in_reverse_order(tools: Tools, data: Path) -> None:
    driver, c = LateFailure(), call("ADD", netconf(data))
    with pytest.raises(errors.CNIError, match="the driver's step failed"):
        pods.attach(driver, c, PodnetConf(c.config))
    host_if = names.host_ifname(c.container_id, "eth0")
    assert driver.undone == [host_if]  # its own undo first, then the pair and the rows
    assert tools.fed(f"link del dev {host_if}") and rows(data) == []


def test_a_refused_hostport_leaves_no_link(tools: Tools, data: Path) -> None:
    mapping = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
    first = call("ADD", netconf(data, runtimeConfig=mapping, ranges=["10.250.0.0/29"]))
    pods.attach(PtpDriver(), first, PodnetConf(first.config))
    second = call("ADD", netconf(data, runtimeConfig=mapping, ranges=["10.250.0.0/29"]))
    with pytest.raises(errors.CNIError) as held:
        pods.attach(PtpDriver(), second, PodnetConf(second.config))
    assert held.value.code == errors.HOSTPORT_CONFLICT
    assert not tools.fed(f"link add {names.host_ifname(second.container_id, 'eth0')}")
    assert rows(data) == [first.container_id]


def test_del_when_everything_is_gone_succeeds(tools: Tools, data: Path) -> None:
    c = call("DEL", netconf(data))
    pods.detach(PtpDriver(), c, StoreConf(c.config), None)
    pods.detach(PtpDriver(), c, StoreConf(c.config), None)  # twice: still nothing to do
    assert not tools.fed("link del")


def test_del_releases_the_row_and_the_link(tools: Tools, data: Path) -> None:
    c = call("ADD", netconf(data))
    pods.attach(PtpDriver(), c, PodnetConf(c.config))
    gone = call("DEL", netconf(data), cid=c.container_id)
    pods.detach(PtpDriver(), gone, StoreConf(gone.config), None)
    assert rows(data) == []
    assert tools.fed(f"link del dev {names.host_ifname(c.container_id, 'eth0')}")


def test_del_of_another_ifname_leaves_the_attachment(tools: Tools, data: Path) -> None:
    c = call("ADD", netconf(data))
    pods.attach(PtpDriver(), c, PodnetConf(c.config))
    other = call("DEL", netconf(data), cid=c.container_id, ifname="net1")
    seen: list[Any] = []

    class Releasing(PtpDriver):
        def release(self, call: Call, conf: StoreConf, store: Any, pod: Any,
                    network: str | None) -> None:  # fmt: skip
            seen.append(pod is not None and teardown.names_this(pod, call, conf))

    pods.detach(Releasing(), other, StoreConf(other.config), None)
    assert rows(data) == [c.container_id] and seen == [False]


@pytest.mark.parametrize("case", ["no prevResult", "no attachment", "other ifname", "no pods"])
def test_check_errors(tools: Tools, data: Path, case: str) -> None:
    c = call("ADD", netconf(data))
    result = pods.attach(PtpDriver(), c, PodnetConf(c.config))
    prev = {} if case == "no prevResult" else {"prevResult": result}
    cid = "nobody" if case == "no attachment" else c.container_id
    check = call("CHECK", netconf(data, **prev), cid=cid,
                 ifname="net1" if case == "other ifname" else "eth0")  # fmt: skip
    driver = base.Driver() if case == "no pods" else PtpDriver()
    with pytest.raises(errors.CNIError) as failed:
        pods.check(driver, check, PodnetConf(check.config))
    want = {
        "no prevResult": errors.INVALID_CONFIG,
        "no attachment": errors.UNKNOWN_CONTAINER,
        "other ifname": errors.UNKNOWN_CONTAINER,
        "no pods": errors.INVALID_CONFIG,
    }[case]
    assert failed.value.code == want, failed.value.msg


def test_no_driver_of_the_registry_has_verbs_of_its_own() -> None:
    """ADD, DEL and CHECK are the pipeline's (:mod:`podnet.drivers.pods`), for every type: a
    driver class only adds hooks."""
    for kind in drivers.BUILTIN:
        cls = type(drivers.get(kind))
        own = [(k.__name__, verb) for k in cls.__mro__ if k is not object
               for verb in ("attach", "detach", "check") if verb in vars(k)]  # fmt: skip
        assert own == [], kind


class QuietBridge(BridgeDriver):
    """A bridge driver whose bridge needs nothing of the node (no kernel here)."""

    def before_pair(self, *args: Any) -> None:
        pass

    def default_mtu(self, choice: Any) -> int:
        return 1500


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How often the store read network ``br-unit``'s row by name."""
    reads: list[str] = []
    get = Networks.get

    def counting(self: Networks, name: str) -> Any:
        if name == "br-unit":
            reads.append(name)
        return get(self, name)

    monkeypatch.setattr(Networks, "get", counting)
    monkeypatch.setattr(drivers, "_loaded", {"bridge": QuietBridge()})
    monkeypatch.setattr(drivers, "_registered", {"bridge"})
    return lambda: len(reads)


def test_add_and_del_read_the_network_row_once(tools: Tools, data: Path,
                                               counted: Callable[[], int]) -> None:  # fmt: skip
    with open_store(str(data)) as store, store.write():
        store.networks.insert("br-unit", "bridge", "", {"ipv4.address": "10.251.0.1/30"})
    base_conf = netconf(data, network="br-unit")
    del base_conf["ranges"]
    before = counted()
    add = call("ADD", base_conf)
    result = plugin.cmd_add(add)
    assert result["ips"][0]["address"] == "10.251.0.2/30"
    assert counted() - before == 1
    before = counted()
    plugin.cmd_del(call("DEL", base_conf, cid=add.container_id))
    assert counted() - before == 1 and rows(data) == []


def test_a_missing_network_is_named_once(tools: Tools, data: Path) -> None:
    conf = netconf(data, network="nowhere")
    del conf["ranges"]
    with pytest.raises(errors.CNIError, match="'nowhere' does not exist") as missing:
        plugin.cmd_add(call("ADD", conf))
    assert missing.value.code == errors.INVALID_CONFIG and not tools.started
