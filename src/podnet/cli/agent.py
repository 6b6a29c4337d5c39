"""``podnetctl agent``: the Kubernetes node agent (:mod:`podnet.agent`), a long-running process
per node. Every option is parsed once into :class:`podnet.agent.settings.Settings`; a bad one is
a one-line error (exit status 1) before anything runs."""

from __future__ import annotations

import logging
import os

import click

from podnet import checked
from podnet.agent.model import BadNode
from podnet.agent.model import node_name as check_node_name
from podnet.agent.settings import (
    DEFAULT_CNI_CONF_DIR,
    DEFAULT_METRICS_PORT,
    DEFAULT_NETWORK_NAME,
    Settings,
)
from podnet.cli.node import data_dir_option
from podnet.cni.netconf import MAX_NAME, valid_network_name
from podnet.nodeconf import data_dir_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: The service account's token in a pod (Kubernetes "Accessing the Kubernetes API from a Pod").
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def api_config(kubeconfig: str | None, environ: Mapping[str, str],
               token: str = SA_TOKEN) -> str | None:  # fmt: skip
    """Where the API's configuration comes from, as client-go's and kubectl's rules have it:
    ``--kubeconfig`` when given; else the in-cluster service account (None) when
    ``KUBERNETES_SERVICE_HOST`` is set and the ``token`` file exists; else ``KUBECONFIG``;
    else ``~/.kube/config`` if it exists. ClickException (one line) when none applies or a
    given file does not exist."""
    if kubeconfig is not None:
        if not os.path.isfile(kubeconfig):
            raise click.ClickException(f"--kubeconfig: no such file: {kubeconfig}")
        return kubeconfig
    if environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(token):
        return None
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".kube", "config")
    if os.path.isfile(home):
        return home
    raise click.ClickException(
        "no Kubernetes API configuration: not in a pod (KUBERNETES_SERVICE_HOST unset or no "
        f"service account token at {token}), and no --kubeconfig, KUBECONFIG or {home}")


def settings_from(*, node_name: str | None, kubeconfig: str | None, cni_conf_dir: str,
                  data_dir: str, no_masquerade_cidr: tuple[str, ...], network_name: str,
                  metrics_address: str, metrics_port: str,
                  environ: Mapping[str, str]) -> Settings:  # fmt: skip
    """The options as :class:`Settings`, each checked once (:mod:`podnet.checked`; the node
    name as a Node's, :func:`podnet.agent.model.node_name`). ClickException naming the option
    otherwise."""
    def bad(option: str, why: str) -> click.ClickException:
        return click.ClickException(f"{option}: {checked.one_line(why)}")

    if not node_name:
        raise bad("--node-name", "required (or NODE_NAME, from the downward API's spec.nodeName)")
    try:
        name = check_node_name(node_name)
    except BadNode as err:
        raise bad("--node-name", str(err).removeprefix("metadata.name: ")) from None
    paths = {}
    for option, value in (("--cni-conf-dir", cni_conf_dir), ("--data-dir", data_dir)):
        try:
            paths[option] = checked.path(value)
        except checked.BadValue as err:
            raise bad(option, str(err)) from None
    problem = data_dir_problem(paths["--data-dir"])
    if problem:
        raise bad("--data-dir", problem)
    if not valid_network_name(network_name):
        raise bad("--network-name", f"{checked.show(network_name)} is not a network name (a "
                  f"letter or digit, then letters, digits, '_', '.', '-'; at most {MAX_NAME})")
    cidrs: list[checked.Net] = []
    for value in no_masquerade_cidr:
        try:
            net = checked.network(value, strict=True)
        except checked.BadValue as err:
            raise bad("--no-masquerade-cidr", str(err)) from None
        if net not in cidrs:
            cidrs.append(net)
    try:
        address = checked.ip(metrics_address)
    except checked.BadValue as err:
        raise bad("--metrics-address", str(err)) from None
    if not metrics_port.isascii() or not metrics_port.isdigit() or int(metrics_port) > 65535:
        raise bad("--metrics-port", f"{checked.show(metrics_port)} is not a TCP port "
                                    "(0-65535; 0: no server)")  # fmt: skip
    return Settings(name, kubeconfig=api_config(kubeconfig, environ),
                    cni_conf_dir=paths["--cni-conf-dir"], data_dir=paths["--data-dir"],
                    network_name=network_name, no_masquerade_cidrs=tuple(cidrs),
                    metrics_address=str(address), metrics_port=int(metrics_port))  # fmt: skip


@click.command()
@click.option("--kubeconfig", default=None, metavar="PATH",
              help="kubeconfig file [default: the in-cluster service account in a pod, else "
                   "KUBECONFIG, else ~/.kube/config].")
@click.option("--node-name", envvar="NODE_NAME", show_envvar=True, default=None,
              help="This node's Node (the downward API's spec.nodeName).")
@click.option("--cni-conf-dir", default=DEFAULT_CNI_CONF_DIR, show_default=True,
              help="Where the conflist is written.")
@data_dir_option("The plugin's dataDir (the store).")
@click.option("--no-masquerade-cidr", multiple=True, metavar="CIDR",
              help="A destination pod traffic reaches unmasqueraded, besides every Node's "
                   "podCIDRs (repeatable).")
@click.option("--network-name", default=DEFAULT_NETWORK_NAME, show_default=True,
              help="The conflist's network name.")
@click.option("--metrics-address", default="0.0.0.0", show_default=True,
              help="Address of the /healthz and /metrics server.")
@click.option("--metrics-port", default=str(DEFAULT_METRICS_PORT), show_default=True,
              help="Port of the /healthz and /metrics server (0: none).")
def agent(kubeconfig: str | None, node_name: str | None, cni_conf_dir: str, data_dir: str,
          no_masquerade_cidr: tuple[str, ...], network_name: str, metrics_address: str,
          metrics_port: str) -> None:  # fmt: skip
    """Run the Kubernetes node agent: LIST and WATCH the Nodes, and keep this node's podnet
    conflist (from its podCIDRs), its routes to the other Nodes' podCIDRs and the set of
    destinations pods reach without masquerade in step with them.

    Runs until SIGTERM or SIGINT (exit status 0). Logs one line per change to stderr."""
    settings = settings_from(node_name=node_name, kubeconfig=kubeconfig,
                             cni_conf_dir=cni_conf_dir, data_dir=data_dir,
                             no_masquerade_cidr=no_masquerade_cidr, network_name=network_name,
                             metrics_address=metrics_address, metrics_port=metrics_port,
                             environ=os.environ)  # fmt: skip
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("podnet.agent").setLevel(logging.INFO)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries: the agent logs each failure

    # the kubernetes client only when the agent runs: podnetctl --help lists this command
    from podnet.agent.main import run
    from podnet.agent.watch import ApiConfigError

    try:
        status = run(settings)
    except ApiConfigError as err:
        raise click.ClickException(str(err)) from None
    raise SystemExit(status)
