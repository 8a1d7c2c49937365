#!/usr/bin/env python3
"""Fails when code under src/raio includes a header of a layer it must not depend on.

    check_layers.py <source dir>

The layers (docs/design/libraries.md): common <- rpc <- {head, node} (raio_daemon), with
common <- scheduling <- {head, node}, and
common <- rpc <- worker <- api/runtime.cc (raio_client). Client code reaches daemon code
only through api/local_cluster.h, which names the head and node types without
including their headers; the libraries above the core (src/raio/llm, and any other
folder not listed here) see only the public API (include/raio) and their own folder;
src/raio/train may also include src/raio/llm, whose model code it shares.
Everything may include the public headers and the generated protobuf headers
(raio/*.pb.h). Tests (*_test.cc, *_test_fixture.h, *_test_util.h) may span layers and are not checked.
"""
import pathlib
import re
import sys

# Folder (or file, relative to src/raio) -> the folders of src/raio it may include.
RULES = {
    "common": {"common"},
    "rpc": {"common", "rpc"},
    # The cluster scheduling policy, shared by the head (actors) and the nodes (leases).
    "scheduling": {"common", "scheduling"},
    "head": {"common", "rpc", "scheduling", "head"},
    "node": {"common", "rpc", "scheduling", "node"},
    "worker": {"common", "rpc", "worker"},
    "api/runtime.cc": {"common", "rpc", "worker", "api/local_cluster.h", "api/job_package.h",
                       "api/runtime_internal.h"},
    "api/runtime_internal.h": {"worker"},
    "api/placement_group.cc": {"common", "rpc", "worker", "api/runtime_internal.h"},
    "api/job_package.h": {"common", "rpc"},
    "api/job_package.cc": {"common", "rpc", "api/job_package.h"},
    "api/local_cluster.h": {"common"},
    "api/local_cluster.cc": {"common", "rpc", "head", "node", "api/local_cluster.h"},
    "api/library.cc": set(),
    # The training library shares the LLM library's model code (issue 18: not duplicated).
    "train": {"train", "llm"},
    # Test fixtures (fakes, stepped loop, MiniCluster): above everything, never in libraio.
    "testkit": {"common", "rpc", "head", "node", "worker", "api", "testkit"},
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]raio/([^">]+)[">]', re.M)


def rule_for(relative):
    """The allowed set for a file (path relative to src/raio), most specific first."""
    if relative in RULES:
        return RULES[relative]
    folder = relative.split("/", 1)[0]
    if folder in RULES:
        return RULES[folder]
    if folder == "api":
        return None  # a new file in api/: needs its own rule
    return {folder}  # a library above the core: its own folder and the public API


def allowed(target, rule, public):
    if target in public or target.endswith(".pb.h"):
        return True
    return any(target == r or target.startswith(r + "/") for r in rule)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    include = root / "include" / "raio"
    public = {p.relative_to(include).as_posix() for p in include.rglob("*.h")}
    src = root / "src" / "raio"
    problems = []
    checked = 0
    for path in sorted(list(src.rglob("*.h")) + list(src.rglob("*.cc"))):
        relative = path.relative_to(src).as_posix()
        if path.name.endswith(("_test.cc", "_test_fixture.h", "_test_util.h")):
            continue
        rule = rule_for(relative)
        if rule is None:
            problems.append(f"src/raio/{relative}: no layer rule (add one to {__file__})")
            continue
        checked += 1
        for target in INCLUDE_RE.findall(path.read_text()):
            if not allowed(target, rule, public):
                problems.append(f"src/raio/{relative} includes raio/{target}")
    print(f"{checked} files checked")
    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        print("PASS: every file includes only its own and lower layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
