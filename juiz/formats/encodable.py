"""Encodable text: JSON's \\ud800 escape can carry a lone surrogate, which Python keeps in a str and UTF-8 (the
store, the engine, every response) can't encode. Every user field is checked once, at intake, by `unencodable`."""

from __future__ import annotations

NOT_TEXT = "not encodable text: a lone surrogate (an escape like \\ud800 with no pair)"


def unencodable(value: object) -> str | None:
    """The dotted path ("context.2.text", "" for `value` itself) of the first string, key or value, that is not
    encodable text (a lone surrogate, which JSON's \\ud800 escape can carry and UTF-8 can't); None when all are.
    Every field, typed or passed through, is checked here, before anything is built from it or stored."""
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not _encodes(node):
                return path
        elif isinstance(node, dict):
            for key, child in node.items():
                where = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and not _encodes(key):
                    return path or "(a field name)"
                stack.append((child, where))
        elif isinstance(node, list):
            stack.extend((child, f"{path}.{i}" if path else str(i)) for i, child in enumerate(node))
    return None


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
