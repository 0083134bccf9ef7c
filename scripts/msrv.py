#!/usr/bin/env python3
"""The minimum supported Rust versions, checked without a second toolchain.

Every workspace crate declares `rust-version` (1.85 through the workspace,
1.94.1 for the crates on the AWS SDK). This checks that no crate it builds
on, through normal and build dependencies as resolved in Cargo.lock,
declares a newer one: a dependency that does would not build on the
declared version. It cannot see a dependency that declares nothing, nor
API of a newer standard library used by the workspace itself; building
with the declared toolchain would (`cargo +1.85 check`), and CI cannot
install one, so this is the check CI can make.

Resolved twice: with default features (every crate), and with every
feature (every crate but tenure-cli and tenure-connect, whose optional
stores bring their own: the AWS SDK's 1.94.1; their default builds are the
ones held to their declared version, and the README says so).
"""

import json
import subprocess
import sys


def version(v):
    return tuple(int(p) for p in v.split(".")) + (0,) * (3 - len(v.split(".")))


def check(all_features, skip):
    # The platform CI and the supported platforms build for; a dependency
    # for wasm or Windows alone does not count.
    args = [
        "cargo", "metadata", "--format-version", "1", "--locked",
        "--filter-platform", "x86_64-unknown-linux-gnu",
    ]
    if all_features:
        args.append("--all-features")
    meta = json.loads(subprocess.check_output(args))
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    problems = []
    for member in meta["workspace_members"]:
        pkg = packages[member]
        if pkg["name"] in skip:
            continue
        declared = pkg.get("rust_version")
        if not declared:
            problems.append(f"{pkg['name']} declares no rust-version")
            continue
        seen, stack = set(), [member]
        while stack:
            for dep in nodes[stack.pop()]["deps"]:
                kinds = {k["kind"] for k in dep["dep_kinds"]}
                if kinds <= {"dev"} or dep["pkg"] in seen:
                    continue
                seen.add(dep["pkg"])
                stack.append(dep["pkg"])
        for dep in sorted(seen):
            d = packages[dep]
            needs = d.get("rust_version")
            if needs and version(needs) > version(declared):
                problems.append(
                    f"{pkg['name']} declares rust-version {declared}, but {d['name']} {d['version']} needs {needs}"
                    + (" (with --all-features)" if all_features else "")
                )
    return problems


def main():
    problems = check(False, set()) + check(True, {"tenure-cli", "tenure-connect"})
    for p in problems:
        print(f"msrv: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print("msrv: every crate's dependencies fit its declared rust-version")


main()
