#!/usr/bin/env python3
"""Fails unless libraio.so exports exactly the public API.

    check_exports.py <nm> <libraio.so> <include dir>

The public API is what include/raio/ marks RAIO_EXPORT (raio/export.h): classes
(`class RAIO_EXPORT TaskError`) and functions (`RAIO_EXPORT void Init(...)`). Every
symbol in the library's dynamic symbol table must belong to one of them (a function, or
a class's members, type_info, vtable), and every one of them must be exported (a marked
declaration that libraio does not define is a link error waiting for a user). Anything
else exported (abseil, Boost, protobuf, spdlog, fmt, the standard library's template
instances, raio::node, raio::worker, ...) is a leak: some internal library was not
compiled with hidden visibility, or a header template got instantiated with default
visibility. Prints the exported symbols, one a line, and what is wrong.
"""
import collections
import pathlib
import re
import subprocess
import sys

# Prefixes the demangler puts before the name of a class's special objects.
SPECIAL_PREFIXES = (
    "typeinfo name for ",
    "typeinfo for ",
    "vtable for ",
    "VTT for ",
    "construction vtable for ",
    "guard variable for ",
    "non-virtual thunk to ",
    "virtual thunk to ",
)
# The name a declaration marked RAIO_EXPORT declares, with the namespace it is in.
CLASS_RE = re.compile(r"\b(?:class|struct)\s+RAIO_EXPORT\s+([A-Za-z_]\w*)")
FUNCTION_RE = re.compile(r"^\s*RAIO_EXPORT\s+[^;{]*?\b([A-Za-z_]\w*)\s*\(", re.M)
NAMESPACE_RE = re.compile(r"^\s*namespace\s+([\w:]+)\s*\{", re.M)
# A qualified name at the start of a demangled symbol: raio::internal::SubmitTask(...).
RAIO_NAME_RE = re.compile(r"^raio::(?:internal::)?([A-Za-z_]\w*)(?=$|::|\(|<|\[|\s)")


def public_names(include_dir):
    """{"raio::Init", "raio::internal::ContainedRefs", ...} from the RAIO_EXPORT marks."""
    names = set()
    for header in sorted(pathlib.Path(include_dir).rglob("*.h")):
        text = header.read_text()
        if header.name == "export.h":
            continue
        for match in list(CLASS_RE.finditer(text)) + list(FUNCTION_RE.finditer(text)):
            names.add(enclosing_namespace(text, match.start()) + "::" + match.group(1))
    return names


def enclosing_namespace(text, offset):
    """The innermost namespace open at `offset` (raio or raio::internal in these headers)."""
    stack = []
    depth = 0
    opened = {}  # brace depth -> namespace name pushed there
    for token in re.finditer(r"namespace\s+([\w:]+)\s*\{|\{|\}", text[:offset]):
        if token.group(1):
            depth += 1
            opened[depth] = token.group(1)
            stack.append(token.group(1))
        elif token.group(0) == "{":
            depth += 1
        else:
            if opened.pop(depth, None) is not None:
                stack.pop()
            depth -= 1
    return "::".join(stack)


def exported_symbols(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", "-C", library], check=True,
                         capture_output=True, text=True).stdout
    symbols = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            symbols.append((parts[1], parts[2]))
    return symbols


def owner(symbol):
    """The public name a demangled symbol belongs to ("raio::TaskError"), or None."""
    for prefix in SPECIAL_PREFIXES:
        if symbol.startswith(prefix):
            symbol = symbol[len(prefix):]
            break
    match = RAIO_NAME_RE.match(symbol)
    if not match:
        return None
    internal = symbol.startswith("raio::internal::")
    return ("raio::internal::" if internal else "raio::") + match.group(1)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    nm, library, include_dir = sys.argv[1:]
    allowed = public_names(include_dir)
    if not allowed:
        print(f"FAIL: no RAIO_EXPORT declarations found under {include_dir}")
        return 1
    symbols = exported_symbols(nm, library)
    leaks = []
    seen = set()
    for kind, symbol in symbols:
        name = owner(symbol)
        if name in allowed:
            seen.add(name)
        else:
            leaks.append((kind, symbol))
    for kind, symbol in symbols:
        print(f"{kind} {symbol}")
    print(f"{library}: {len(symbols)} exported symbols, {len(allowed)} public names")
    missing = sorted(allowed - seen)
    ok = True
    if leaks:
        ok = False
        groups = collections.Counter(re.split(r"[<(]", s)[0].rsplit("::", 1)[0] for _, s in leaks)
        print(f"FAIL: {len(leaks)} exported symbols are not public API, by scope:")
        for scope, n in groups.most_common():
            print(f"  {n:6d}  {scope}")
        print("the first of them:")
        for kind, symbol in leaks[:40]:
            print(f"  {kind} {symbol}")
    if missing:
        ok = False
        print("FAIL: marked RAIO_EXPORT in include/raio but not exported by the library:")
        for name in missing:
            print(f"  {name}")
    if ok:
        print("PASS: libraio.so exports only the public API")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
