"""JSON for the plugin's hot path through CPython's C accelerator, without importing :mod:`json`.

``import json`` pulls in :mod:`re` and :mod:`enum` (~7 ms per plugin call, measured with
``python -X importtime``: a fifth of an ADD). The decoding itself is done by ``_json``'s C
scanner — the same code :func:`json.loads` runs — and encoding handles the plain shapes CNI
uses (dict, list, str, int, float, bool, None). Where ``_json`` is missing (other Pythons) the
standard module is used. Errors are :class:`ValueError` as with :func:`json.loads`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_make_scanner: Any
try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner as _c_make_scanner

    _make_scanner = _c_make_scanner
except ImportError:  # pragma: no cover - non-CPython
    _make_scanner = None

_WHITESPACE = " \t\n\r"


def _constant(name: str) -> float:
    return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


class _Context:
    """The attributes ``_json.make_scanner`` reads (those of json.JSONDecoder)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)
    memo: dict[str, str] = {}


def loads(text: str | bytes) -> Any:
    """Parse one JSON document; ValueError (json.JSONDecodeError) when it is not one."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8-sig")
    if _make_scanner is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _make_scanner(_Context())(text, start)
    except StopIteration as err:
        import json

        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if text[end:].strip(_WHITESPACE):
        import json

        raise json.JSONDecodeError("Extra data", text, end)
    return value


def dumps(value: Any) -> str:
    """Serialise dict/list/tuple/str/int/float/bool/None (ASCII, like json.dumps defaults)."""
    if _make_scanner is None:  # pragma: no cover
        import json

        return json.dumps(value)
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


def _encode(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_quote(value))
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
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            out.append(", " if i else "")
            out.append(_quote(key))
            out.append(": ")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            out.append(", " if i else "")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
