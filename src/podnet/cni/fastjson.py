"""JSON for the plugin's hot path, without importing :mod:`json`.

``import json`` pulls in :mod:`re` and :mod:`enum`: 6.5 ms per plugin call under ``python -IS``
(measured with ``-X importtime`` on Debian's 3.11), a fifth of an ADD. Decoding is done by
`jiter <https://pypi.org/project/jiter/>`_ (pydantic's JSON parser, a Rust extension: 0.6 ms to
import, no Python dependencies); where it is not installed the standard module is used. Encoding
covers the plain shapes CNI uses (dict, list, tuple, str, int, float, bool, None) with ASCII
output, as ``json.dumps`` writes it by default.

Every malformed document — truncated, deeply nested, invalid UTF-8, NaN/Infinity, lone
surrogates, trailing data — raises :class:`ValueError`, which the skeleton answers with CNI code
6. Nothing here depends on private interpreter modules (CPython's ``_json`` scanner's error
path fails when :mod:`json.decoder` was never imported, as under ``python -IS``).

Decoding and encoding are not one library: every maintained codec that also encodes imports much
of the standard library at module init, which this module exists to avoid
(docs/decisions/0002-json-codec.md has the figures).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_BOM = b"\xef\xbb\xbf"
#: Nesting deeper than this is refused (jiter's own limit is lower; the fallback's is the stack).
MAX_DEPTH = 200


def loads(text: str | bytes) -> Any:
    """Parse one JSON document (bytes in UTF-8, a leading BOM allowed); ValueError otherwise."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        from jiter import from_json
    except ImportError:  # pragma: no cover - exercised by a test with jiter hidden
        return _stdlib_loads(data)
    try:
        return from_json(data, allow_inf_nan=False)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 - any parser failure is a decode failure
        raise ValueError(f"{type(err).__name__}: {err}") from None


def _stdlib_loads(data: bytes) -> Any:
    import json

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=refuse)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"invalid UTF-8: {err}") from None


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
            "\f": "\\f"}  # fmt: skip


def quote(text: str) -> str:
    """``text`` as a JSON string literal, ASCII only (``\\uXXXX`` escapes, surrogate pairs above
    U+FFFF), as ``json.dumps`` writes it with ``ensure_ascii``."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    out.append('"')
    return "".join(out)


def dumps(value: Any) -> str:
    """Serialise dict/list/tuple/str/int/float/bool/None (ASCII, like json.dumps defaults).

    ValueError for NaN or infinite floats and for nesting deeper than :data:`MAX_DEPTH`,
    TypeError for other types or non-string keys.
    """
    parts: list[str] = []
    _encode(value, parts, 0)
    return "".join(parts)


def _encode(value: Any, out: list[str], depth: int) -> None:
    if isinstance(value, str):
        out.append(quote(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"out of range float value {value!r} is not JSON compliant")
        out.append(float.__repr__(value))
    elif isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            out.append("{")
            for i, (key, item) in enumerate(value.items()):
                if not isinstance(key, str):
                    raise TypeError(f"keys must be str, not {type(key).__name__}")
                out.append(", " if i else "")
                out.append(quote(key))
                out.append(": ")
                _encode(item, out, depth + 1)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(value):
                out.append(", " if i else "")
                _encode(item, out, depth + 1)
            out.append("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
