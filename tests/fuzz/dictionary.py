#!/usr/bin/env python3
"""Writes an AFL++ dictionary for the JSON targets to the path given: JSON's own tokens and
every property name, enum value and const of the schema bundle, so the fuzzer spells the
documents' keys without having to find them byte by byte (docs/reliability/parser-fuzz.md)."""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
bundle = json.loads((root / "generated/types/src/generated/bundle.schema.json").read_text())
tokens = set()


def walk(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                tokens.update(f'"{name}"' for name in value)
            elif key in ("enum", "const"):
                values = value if isinstance(value, list) else [value]
                tokens.update(json.dumps(v) for v in values if isinstance(v, str))
            walk(value)
    elif isinstance(node, list):
        for value in node:
            walk(value)


walk(bundle)
tokens.update(["{", "}", "[", "]", ":", ",", "null", "true", "false", "-1", "1e999",
               "0.5", "\"\\u0000\"", "\"\\ud800\"", "18446744073709551616",
               "\"2026-11-30T10:00:00Z\"", "\"1969-12-31T23:59:59.999999999-23:59\""])
def escaped(token):
    return "".join(c if 0x20 <= ord(c) < 0x7f and c not in '"\\' else f"\\x{ord(c):02x}"
                   for c in token)


lines = [f'"{escaped(t)}"' for t in sorted(tokens) if len(t.encode()) <= 128]
pathlib.Path(sys.argv[1]).write_text("\n".join(lines) + "\n")
