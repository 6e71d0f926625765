#!/usr/bin/env python3
"""Estimates the Docker images' size without a Docker engine: for each stage of
docker/Dockerfile that apt-get installs packages (server, runtime), the Installed-Size of
those packages and their dependencies (no recommends), leaving out what debian:bookworm
already holds (priority required/important), plus the binaries copied in (from BUILD_DIR).

    scripts/image_size.py [BUILD_DIR]      # default: build
"""
import os
import re
import subprocess
import sys

STAGE = re.compile(r"^FROM \S+ AS (\S+)", re.M)


def stages(dockerfile):
    text = open(dockerfile).read()
    heads = list(STAGE.finditer(text))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        yield m.group(1), text[m.start():end]


def packages(stage_text):
    m = re.search(r"apt-get install[^\n]*--no-install-recommends(.*?)&& rm", stage_text, re.S)
    return m.group(1).replace("\\", " ").split() if m else []


def closure(pkgs):
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + pkgs,
                         capture_output=True, text=True, check=True).stdout
    return {l.strip() for l in out.splitlines() if l and not l.startswith((" ", "<"))}


def kib_if_not_base(pkg):
    out = subprocess.run(["apt-cache", "show", "--no-all-versions", pkg],
                         capture_output=True, text=True).stdout
    size = re.search(r"Installed-Size: (\d+)", out)
    prio = re.search(r"Priority: (\S+)", out)
    if not size or (prio and prio.group(1) in ("required", "important")):
        return 0
    return int(size.group(1))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bins = {"gradpress-server": f"{build}/server/gradpress-server",
            "gradpress-worker": f"{build}/worker/gradpress-worker",
            "gradpress-sim": f"{build}/sim/gradpress-sim"}
    for name, text in stages(os.path.join(root, "docker", "Dockerfile")):
        pkgs = packages(text)
        if not pkgs:
            continue
        mib = sum(kib_if_not_base(p) for p in closure(pkgs)) / 1024
        binary = sum(os.path.getsize(p) for b, p in bins.items()
                     if b in text and os.path.exists(p)) / 2**20
        print(f"{name}: {mib:.0f} MiB of packages beyond debian:bookworm + {binary:.0f} MiB of "
              f"binaries (unstripped) = {mib + binary:.0f} MiB")


if __name__ == "__main__":
    main()
