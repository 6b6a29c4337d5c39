"""The agent's settings, parsed once from its command line and environment.

Defaults follow kindnetd and the Kubernetes conventions: the node's name from ``NODE_NAME``
(the downward API's ``spec.nodeName``), the CNI configuration directory ``/etc/cni/net.d``,
podnet's default store, the network (conflist) name ``podnet``, and the health and metrics
port 19080 (kindnetd's).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.checked import Net

__all__ = ["DEFAULT_CNI_CONF_DIR", "DEFAULT_METRICS_PORT", "DEFAULT_NETWORK_NAME", "Settings"]

DEFAULT_CNI_CONF_DIR = "/etc/cni/net.d"
DEFAULT_NETWORK_NAME = "podnet"
#: kindnetd serves ``/healthz`` and ``/metrics`` on 19080.
DEFAULT_METRICS_PORT = 19080


class Settings:
    """``node_name`` (this node's Node), ``kubeconfig`` (a path, or None: in-cluster service
    account configuration when run as a pod, else ``KUBECONFIG`` / ``~/.kube/config``),
    ``cni_conf_dir`` and ``data_dir`` (checked paths), ``network_name`` (the conflist's
    ``name``), ``no_masquerade_cidrs`` (destinations pod traffic reaches unmasqueraded besides
    every Node's podCIDRs), ``metrics_address`` and ``metrics_port`` (TCP port; 0: no server)."""

    __slots__ = ("node_name", "kubeconfig", "cni_conf_dir", "data_dir", "network_name",
                 "no_masquerade_cidrs", "metrics_address", "metrics_port")  # fmt: skip

    def __init__(self, node_name: str, *, kubeconfig: str | None = None,
                 cni_conf_dir: str = DEFAULT_CNI_CONF_DIR, data_dir: str,
                 network_name: str = DEFAULT_NETWORK_NAME,
                 no_masquerade_cidrs: tuple[Net, ...] = (), metrics_address: str = "0.0.0.0",
                 metrics_port: int = DEFAULT_METRICS_PORT) -> None:  # fmt: skip
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.cni_conf_dir = cni_conf_dir
        self.data_dir = data_dir
        self.network_name = network_name
        self.no_masquerade_cidrs = no_masquerade_cidrs
        self.metrics_address = metrics_address
        self.metrics_port = metrics_port
