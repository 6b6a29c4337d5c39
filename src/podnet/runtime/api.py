"""Running a network's plugins for ADD, CHECK, DEL, GC and STATUS (libcni ``api.go`` behaviour).

Per plugin, stdin is its config with the network's ``name`` and chosen ``cniVersion`` injected,
``prevResult`` (converted to that version) on ADD after the first plugin, on CHECK and on DEL,
and ``runtimeConfig`` holding only the capability arguments the plugin declares ``true`` in its
``capabilities`` (CNI CONVENTIONS.md). A failing plugin stops the verb with
:class:`~podnet.runtime.errors.PluginFailed` (``plugin <type> failed (<verb>): <msg>``, the
plugin's code kept).

- ADD: plugins in order, each result the next one's ``prevResult``; the last result is cached.
- CHECK (>= 0.4.0; a no-op with ``disableCheck``): every plugin, in order, with the cached result.
- DEL: plugins in reverse order with the cached result as ``prevResult`` (>= 0.4.0), then the
  cache entry is removed; no entry → DEL without ``prevResult`` (still succeeds: DEL must be
  idempotent). A DEL or CHECK without capability/CNI args reuses the ones cached at ADD (libcni
  exposes them as GetNetworkListCachedConfig; podnet applies them, so ``cnitool``-style
  ``del`` without ``CAP_ARGS`` still tells portmap-like plugins what to remove).
- GC (>= 1.1.0 for the plugin call; nothing with ``disableGC``): cached attachments of the
  network that are not valid get a DEL, then every plugin gets GC with
  ``cni.dev/valid-attachments``; errors are collected and raised together.
- STATUS (>= 1.1.0; older versions are always "ok"): every plugin in order, the first error wins.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from podnet import errors as codes
from podnet.cni import version as spec_version
from podnet.errors import CNIError
from podnet.runtime.args import (
    RuntimeConf,
    format_cni_args,
    validate_container_id,
    validate_ifname,
)
from podnet.runtime.cache import Attachment, CacheEntry, ResultCache
from podnet.runtime.conflist import NetworkConfigList, PluginConf, validate_network_name
from podnet.runtime.errors import CNIRuntimeError, IncompatibleVersion, PluginFailed
from podnet.runtime.invoke import (
    ExecOutput,
    PluginExec,
    SubprocessExec,
    convert_result,
    decode_error,
    decode_result,
    plugin_env,
)

__all__ = ["DEFAULT_CNI_PATH", "CNIRuntime", "plugin_config", "runtime_config"]

DEFAULT_CNI_PATH = ("/opt/cni/bin",)

#: Key GC puts in each plugin's config (spec 1.1 "GC").
VALID_ATTACHMENTS = "cni.dev/valid-attachments"


def runtime_config(plugin: PluginConf, capability_args: Mapping[str, Any]) -> dict[str, Any]:
    """The ``runtimeConfig`` for ``plugin``: the capability arguments it declares, nothing else."""
    declared = plugin.capabilities
    return {k: v for k, v in capability_args.items() if k in declared}


def plugin_config(
    net: NetworkConfigList,
    plugin: PluginConf,
    *,
    prev_result: Mapping[str, Any] | None = None,
    capability_args: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The stdin object of one plugin call (libcni buildOneConfig): the plugin's own keys with
    ``name``, ``cniVersion``, ``prevResult`` (when given), ``runtimeConfig`` (when any declared
    capability has an argument) and ``extra`` keys set at the top level."""
    conf = dict(plugin.raw)
    conf["name"] = net.name
    conf["cniVersion"] = net.cni_version
    if prev_result is not None:
        conf["prevResult"] = dict(prev_result)
    if capability_args:
        rc = runtime_config(plugin, capability_args)
        if rc:
            conf["runtimeConfig"] = rc
    conf.update(extra or {})
    return conf


class CNIRuntime:
    """Runs networks' plugins, libcni's ``CNIConfig``.

    ``path``: CNI_PATH directories, searched in order. ``cache``: where ADD results are kept
    (default ``/var/lib/cni``). ``executor``: how plugins run (default :class:`SubprocessExec`).
    ``environ``: the environment plugins inherit (default: this process's, read per call).
    """

    def __init__(
        self,
        path: Sequence[str] = DEFAULT_CNI_PATH,
        *,
        cache: ResultCache | None = None,
        executor: PluginExec | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.path = tuple(path)
        self.cache = cache if cache is not None else ResultCache()
        self.executor: PluginExec = executor if executor is not None else SubprocessExec()
        self.environ = environ

    # -- one plugin call -----------------------------------------------------------------------
    def _call(
        self,
        verb: str,
        command: str,
        plugin: PluginConf,
        conf: Mapping[str, Any],
        rt: RuntimeConf | None,
    ) -> ExecOutput:
        path = self.executor.find(plugin.type, self.path)
        env = plugin_env(
            os.environ if self.environ is None else self.environ,
            command=command,
            container_id=rt.container_id if rt else "",
            netns=rt.netns if rt else "",
            ifname=rt.ifname if rt else "",
            cni_args=format_cni_args(rt.args) if rt else "",
            cni_path=self.path,
        )
        out = self.executor.run(path, json.dumps(conf).encode(), env)
        if out.returncode != 0:
            raise PluginFailed(plugin.type, verb, decode_error(out))
        return out

    @staticmethod
    def _validate(net: NetworkConfigList, rt: RuntimeConf) -> None:
        validate_network_name(net.name)
        validate_container_id(rt.container_id)
        validate_ifname(rt.ifname)

    def _cached(self, net: NetworkConfigList, rt: RuntimeConf) -> CacheEntry | None:
        return self.cache.load(net.name, rt.container_id, rt.ifname)

    @staticmethod
    def _with_cached_args(rt: RuntimeConf, entry: CacheEntry | None) -> RuntimeConf:
        if entry is None:
            return rt
        return RuntimeConf(
            container_id=rt.container_id,
            netns=rt.netns,
            ifname=rt.ifname,
            args=rt.args or entry.cni_args,
            capability_args=rt.capability_args or entry.capability_args,
        )

    # -- verbs ------------------------------------------------------------------------------
    def add(self, net: NetworkConfigList, rt: RuntimeConf) -> dict[str, Any]:
        """ADD the attachment ``rt`` to ``net``; returns the final result in the network's
        version (and caches it). PluginFailed, PluginNotFound, ArgsError, CacheError."""
        self._validate(net, rt)
        result: dict[str, Any] | None = None
        for plugin in net.plugins:
            conf = plugin_config(
                net, plugin, prev_result=result, capability_args=rt.capability_args
            )
            out = self._call("add", "ADD", plugin, conf, rt)
            try:
                result = decode_result(out, net.cni_version)
            except CNIError as err:
                raise PluginFailed(plugin.type, "add", err) from err
        assert result is not None  # a list has at least one plugin
        self.cache.save(
            CacheEntry(
                network=net.name,
                container_id=rt.container_id,
                ifname=rt.ifname,
                result=result,
                netns=rt.netns,
                config=net.raw,
                cni_args=rt.args,
                capability_args=dict(rt.capability_args),
            )
        )
        return result

    def check(self, net: NetworkConfigList, rt: RuntimeConf) -> None:
        """CHECK the attachment against its cached result.

        IncompatibleVersion (1) below 0.4.0; CNIRuntimeError code 3 (unknown container) when
        nothing is cached for it; PluginFailed.
        """
        self._validate(net, rt)
        if not spec_version.at_least(net.cni_version, "0.4.0"):
            raise IncompatibleVersion(
                f'configuration version "{net.cni_version}" does not support the CHECK command'
            )
        if net.disable_check:
            return
        entry = self._cached(net, rt)
        if entry is None:
            raise CNIRuntimeError(
                f"no cached result for container {rt.container_id} interface {rt.ifname} in "
                f"network {net.name} (in {self.cache.results_dir}): was it ADDed?",
                code=codes.UNKNOWN_CONTAINER,
            )
        prev = convert_result(entry.result, net.cni_version)
        rt = self._with_cached_args(rt, entry)
        for plugin in net.plugins:
            conf = plugin_config(net, plugin, prev_result=prev, capability_args=rt.capability_args)
            self._call("check", "CHECK", plugin, conf, rt)

    def delete(self, net: NetworkConfigList, rt: RuntimeConf) -> None:
        """DEL the attachment: plugins in reverse order, then the cache entry is removed.

        A corrupt cache entry is dropped and DEL goes on without ``prevResult`` (libcni).
        PluginFailed (the cache entry is kept so DEL can be retried).
        """
        self._validate(net, rt)
        entry: CacheEntry | None = None
        prev: dict[str, Any] | None = None
        if spec_version.at_least(net.cni_version, "0.4.0"):
            try:
                entry = self._cached(net, rt)
                prev = convert_result(entry.result, net.cni_version) if entry else None
            except CNIError:
                self.cache.remove(net.name, rt.container_id, rt.ifname)
                entry, prev = None, None
        rt = self._with_cached_args(rt, entry)
        for plugin in reversed(net.plugins):
            conf = plugin_config(net, plugin, prev_result=prev, capability_args=rt.capability_args)
            self._call("delete", "DEL", plugin, conf, rt)
        self.cache.remove(net.name, rt.container_id, rt.ifname)

    def gc(self, net: NetworkConfigList, valid: Sequence[Attachment] | None = None) -> None:
        """GC the network: ``valid`` attachments stay, everything else goes.

        ``valid=None`` takes the valid attachments from this network's cache entries (what this
        runtime ADDed and has not DELed). CNIRuntimeError listing every failure.
        """
        if net.disable_gc:
            return
        cached = self.cache.entries(net.name)
        if valid is None:
            valid = [Attachment(e.container_id, e.ifname) for e in cached]
        keep = set(valid)
        failures: list[str] = []
        for entry in cached:
            if Attachment(entry.container_id, entry.ifname) in keep:
                continue
            rt = RuntimeConf(
                entry.container_id, entry.netns, entry.ifname, entry.cni_args, entry.capability_args
            )
            try:
                self.delete(net, rt)
            except CNIError as err:
                failures.append(
                    f"failed to delete stale attachment {entry.container_id} {entry.ifname}: "
                    f"{err.msg}"
                )
        if spec_version.at_least(net.cni_version, "1.1.0"):
            extra = {VALID_ATTACHMENTS: [a.to_json() for a in valid]}
            for plugin in net.plugins:
                try:
                    self._call("gc", "GC", plugin, plugin_config(net, plugin, extra=extra), None)
                except CNIError as err:
                    detail = f" ({err.details})" if err.details else ""
                    failures.append(err.msg + detail)
        if failures:
            raise CNIRuntimeError(f"GC of network {net.name} failed: " + "; ".join(failures))

    def status(self, net: NetworkConfigList) -> None:
        """STATUS of every plugin in order; the first failure is raised as PluginFailed (its
        code: 50/51 when the plugin cannot serve ADD). Versions below 1.1.0: always ok."""
        if not spec_version.at_least(net.cni_version, "1.1.0"):
            return
        for plugin in net.plugins:
            self._call("status", "STATUS", plugin, plugin_config(net, plugin), None)

    def version(
        self, plugin_type: str, cni_version: str = spec_version.CURRENT_VERSION
    ) -> dict[str, Any]:
        """Plugin ``plugin_type``'s VERSION answer: ``{"cniVersion", "supportedVersions"}``."""
        plugin = PluginConf({"type": plugin_type})
        out = self._call("version", "VERSION", plugin, {"cniVersion": cni_version}, None)
        try:
            info = json.loads(out.stdout)
        except ValueError as err:
            raise PluginFailed(
                plugin_type,
                "version",
                CNIError(f"invalid VERSION answer: {err}", code=codes.DECODE_FAILURE),
            ) from None
        if not isinstance(info, dict):
            raise PluginFailed(
                plugin_type,
                "version",
                CNIError("VERSION answer is not an object", code=codes.DECODE_FAILURE),
            )
        return info
