"""Runs many CNI calls in one process, each as the installed plugin file would run it.

Started by tests/e2e/safety/test_fuzz.py as ``<interpreter> -IS fuzz_driver.py <plugin file>…`` — the
interpreter and flags of the plugin files' ``#!`` line — inside the test's node namespace. It
applies the files' own ``sys.path`` insertions, then answers requests read from stdin and
written to stdout as :mod:`marshal` data, each preceded by its length (8 bytes, big-endian) —
not :mod:`json`: importing json here would hide the decoding bugs of a plugin that must work
without it:

- request ``("call", plugin, [(key, value), …] as bytes, stdin bytes)`` → reply
  ``(exit status | None, stdout text, driver error text | None, seconds)``;
- request ``("quit",)`` ends the driver.

For each call the process environment is replaced by the call's (``os.environb``), the plugin
module is imported afresh and :func:`podnet.cni.skel.run` is called with ``env=os.environ``,
stdin and stdout in memory. Afterwards every pure-Python module imported during the call is
dropped from ``sys.modules`` (C extension and built-in modules stay), so each call starts from
the modules a fresh ``-IS`` process has: a call cannot benefit from a module (``json.decoder``)
that an earlier call imported.
"""

import io
import marshal
import os
import sys
import time


def _setup(files):
    """Apply the ``sys.path`` insertions of the plugin files; ``{plugin name: module}``."""
    modules = {}
    seen = set()
    for path in files:
        with open(path) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            if line.startswith("sys.path.insert(") and line not in seen:
                seen.add(line)
                exec(line, {"sys": sys})
            elif line.startswith("from ") and " import " in line:
                modules[os.path.basename(path)] = line.split()[1]
    return modules


def _purge(baseline):
    for name in list(sys.modules):
        if name in baseline or name in sys.builtin_module_names:
            continue
        f = getattr(sys.modules[name], "__file__", None) or ""
        if f.endswith(".so"):
            continue
        del sys.modules[name]


def _call(module_name, env_pairs, data):
    os.environ.clear()
    for k, v in env_pairs:
        os.environb[k] = v
    out = io.StringIO()
    started = time.monotonic()
    try:
        mod = __import__(module_name, fromlist=["HANDLERS"])
        skel = sys.modules["podnet.cni.skel"]
        rc = skel.run(mod.PLUGIN, mod.HANDLERS, env=os.environ, stdin=io.BytesIO(data), stdout=out)
        return rc, out.getvalue(), None, time.monotonic() - started
    except BaseException as err:  # noqa: BLE001 - reported to the test as a driver error
        import traceback

        text = "".join(traceback.format_exception(err))
        return None, out.getvalue(), text, time.monotonic() - started


def main():
    if not (sys.flags.isolated and sys.flags.no_site):
        sys.stderr.write("fuzz_driver: must run under -IS like the installed plugins\n")
        return 2
    modules = _setup(sys.argv[1:])
    baseline = set(sys.modules)
    inp, outp = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return 0
        request = marshal.loads(inp.read(int.from_bytes(head, "big")))
        if request[0] == "quit":
            return 0
        _, plugin, env_pairs, data = request
        reply = _call(modules[plugin], env_pairs, data)
        _purge(baseline)
        body = marshal.dumps(reply)
        outp.write(len(body).to_bytes(8, "big") + body)
        outp.flush()


if __name__ == "__main__":
    sys.exit(main())
