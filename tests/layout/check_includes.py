#!/usr/bin/env python3
"""Checks that the C++ sources include only downward (shared/DESIGN.md's layers, worker/'s rooms).

Each source folder (a "room") may include its own headers and those of the rooms its arrows
reach, directly or through rooms below: never upward, never across (server <-> worker, data <->
models). A file in a folder not listed here fails the check, so a new folder gets its place.

    python3 tests/layout/check_includes.py [ROOT]      # exit 0: every include goes downward
    python3 tests/layout/check_includes.py --self-test # the check reports a planted upward include
"""
import os
import re
import sys

# room: the rooms it may include directly (the closure adds what those reach).
ARROWS = {
    "proto": [],
    "common": ["proto"],
    "compressors": ["common"],
    "compressors/cuda": ["compressors"],
    "transport": ["compressors", "proto"],
    "server": ["transport"],
    "worker/data": ["compressors"],
    "worker/models": ["common"],
    "worker/client": ["transport", "compressors/cuda"],
    "worker/engine": ["worker/client", "worker/models", "worker/data"],
    "worker/loop": ["worker/engine"],
    "worker": ["worker/loop"],  # worker_main.cc
    "plan": ["worker/engine"],
    "sim": ["worker/loop", "server"],
    "python": ["worker/loop"],
    "bench": ["worker/loop", "server"],
    "fuzz": ["server"],
    "scripts": ["compressors"],
    "tests": ["sim", "plan", "bench", "worker", "fuzz"],
}
SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    """The room of a repository path (a source file or an included header)."""
    parts = path.split("/")
    for depth in (2, 1):
        if len(parts) > depth and "/".join(parts[:depth]) in ARROWS:
            return "/".join(parts[:depth])
    return None


def reachable():
    """room -> every room it may include, itself among them."""
    out = {}
    for room in ARROWS:
        seen, todo = {room}, [room]
        while todo:
            for below in ARROWS[todo.pop()]:
                if below not in seen:
                    seen.add(below)
                    todo.append(below)
        out[room] = seen
    return out


def check(sources):
    """sources: (path, text) pairs. Returns the violations, one line each."""
    may = reachable()
    errors = []
    for path, text in sources:
        room = room_of(path)
        if room is None:
            errors.append(f"{path}: its folder has no place in the layers (add it to ARROWS)")
            continue
        for m in INCLUDE.finditer(text):
            header = m.group(1)
            target = room_of(header)
            if "/" not in header or target is None:
                continue  # a sibling header, generated code of the same folder, or a library's
            if target not in may[room]:
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{path}:{line}: {room} includes {header} ({target}): not below it")
    return errors


def tree_sources(root):
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "node_modules"]
        for name in files:
            if name.endswith(SUFFIXES):
                path = os.path.normpath(os.path.join(rel, name)).replace(os.sep, "/")
                with open(os.path.join(top, name), encoding="utf-8", errors="replace") as f:
                    yield path, f.read()


def self_test():
    planted = [
        ("worker/engine/x.cc", '#include "worker/client/ps_client.h"\n#include "worker/loop/trainer.h"\n'),
        ("worker/client/y.cc", '#include "server/parameter_store.h"\n'),
        ("worker/models/z.cc", '#include "worker/data/dataset.h"\n'),
        ("tests/t.cc", '#include "worker/loop/trainer.h"\n#include "server/x.h"\n'),
        ("newdir/w.cc", "\n"),
    ]
    errors = check(planted)
    expected = ["worker/engine/x.cc:2", "worker/client/y.cc:1", "worker/models/z.cc:1", "newdir/w.cc"]
    missing = [e for e in expected if not any(line.startswith(e) for line in errors)]
    if missing or len(errors) != len(expected):
        print("check_includes self-test FAILED: expected reports at", expected, "got", errors)
        return 1
    print(f"check_includes self-test: the {len(expected)} planted violations are reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    sources = list(tree_sources(root))
    errors = check(sources)
    for e in errors:
        print(e)
    if errors:
        print(f"check_includes: {len(errors)} include(s) against the layers (tests/layout/check_includes.py)")
        return 1
    print(f"check_includes: {len(sources)} files, every include downward")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
