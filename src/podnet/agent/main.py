"""``podnetctl agent``'s process: the control loop (:mod:`podnet.agent.watch`) with its sink
(:class:`podnet.agent.dataplane.Dataplane` unless one is given), the ``/healthz`` and
``/metrics`` server (:mod:`podnet.agent.health`), and SIGTERM/SIGINT.

A signal ends the process cleanly: the sync under way finishes, the watch is closed, the sink
is closed (``Dataplane.close``), the server stops, and :meth:`AgentProcess.run` returns 0. What
the node holds stays: pods keep working while the agent is away, and its restart changes nothing
that is already right (the sink is level-triggered).
"""

from __future__ import annotations

import logging
import signal
import threading

from podnet.agent.dataplane import Dataplane
from podnet.agent.health import DEFAULT_GRACE, Health, HealthServer, Metrics, serve
from podnet.agent.watch import Agent, Sink, connect

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

    from kubernetes.client import CoreV1Api

    from podnet.agent.settings import Settings

__all__ = ["AgentProcess", "run"]

log = logging.getLogger("podnet.agent")

#: The signals that end the agent (SIGTERM: the kubelet stopping the pod; SIGINT: Ctrl-C).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class AgentProcess:
    """The agent of ``settings`` on ``api`` (a ``CoreV1Api``, see
    :func:`podnet.agent.watch.connect`) driving ``sink``. ``watch_timeout``, ``backoff_base``,
    ``backoff_cap`` (seconds) tune the loop; ``grace`` is how long syncs may fail before
    ``/healthz`` says 503. :meth:`run` in the main thread also handles the stop signals;
    :meth:`stop` ends it from anywhere."""

    def __init__(self, settings: Settings, api: CoreV1Api, sink: Sink, *,
                 grace: float = DEFAULT_GRACE, **loop: float) -> None:  # fmt: skip
        self.settings = settings
        self.sink = sink
        self.metrics = Metrics()
        self.health = Health(grace)
        self.agent = Agent(api, settings.node_name, sink, metrics=self.metrics,
                           health=self.health, **loop)  # type: ignore[arg-type]
        self.server: HealthServer | None = None
        self.signal: int | None = None
        self.started = threading.Event()

    def stop(self) -> None:
        """End :meth:`run` (thread-safe; takes no lock)."""
        self.agent.stop()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum
        self.agent.stop()

    def run(self) -> int:
        """Serve ``/healthz`` and ``/metrics`` (unless the port is 0), run the loop until a stop
        signal or :meth:`stop`, then close the watch, the sink and the server. Returns the exit
        status, 0. OSError when the metrics address cannot be bound (the sink is closed)."""
        main = threading.current_thread() is threading.main_thread()
        saved: dict[signal.Signals, object] = {}
        old_fd = -1
        s = self.settings
        try:
            if main:
                for sig in STOP_SIGNALS:
                    saved[sig] = signal.signal(sig, self._on_signal)
                # a signal delivered to another thread still wakes the loop
                old_fd = signal.set_wakeup_fd(self.agent.wakeup_fd, warn_on_full_buffer=False)
            if s.metrics_port:
                self.server = serve(s.metrics_address, s.metrics_port, self.health,
                                    self.metrics)  # fmt: skip
            where = (f"; /healthz and /metrics on {s.metrics_address}:{self.server.port}"
                     if self.server else "")  # fmt: skip
            log.info("agent started for node %s%s", s.node_name, where)
            self.started.set()
            self.agent.run()
        finally:
            if main:
                signal.set_wakeup_fd(old_fd)
                for stop_signal, handler in saved.items():
                    signal.signal(stop_signal, handler)  # type: ignore[arg-type]
            if self.server is not None:
                self.server.close()
            try:
                self.sink.close()
            finally:
                self.agent.close()
        if self.signal is not None:
            log.info("stopped by %s", signal.Signals(self.signal).name)
        else:
            log.info("stopped")
        return 0


def run(settings: Settings, *, api: CoreV1Api | None = None, sink: Sink | None = None) -> int:
    """The agent as ``podnetctl agent`` runs it: ``api`` from ``settings.kubeconfig``
    (:func:`podnet.agent.watch.connect`; :class:`~podnet.agent.watch.ApiConfigError` when it
    cannot be loaded) and ``sink`` a :class:`podnet.agent.dataplane.Dataplane` of ``settings``
    unless given. Returns the exit status (0 after a stop signal)."""
    if api is None:
        api = connect(settings.kubeconfig)
    if sink is None:
        sink = Dataplane(settings)
    return AgentProcess(settings, api, sink).run()
