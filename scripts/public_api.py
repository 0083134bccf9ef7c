#!/usr/bin/env python3
"""The public API of the `tenure` crate as a sorted listing, one item a
line (`kind path`), compared with the committed `api/tenure.txt`, so that
growing the surface is a decision made in a diff, not an accident.

    python3 scripts/public_api.py           # check (what CI runs)
    python3 scripts/public_api.py --write   # accept the current surface

It reads rustdoc's JSON output. That output is unstable on a stable
toolchain, so the script asks for it with RUSTC_BOOTSTRAP=1, in a target
directory of its own (the flag must not reach the workspace's other
builds). `cargo public-api` does the same with a nightly toolchain, which
cannot be installed on these machines.

Listed: every public module, item and re-export reachable from the crate
root, under the path a user writes; the variants of public enums and their
fields, the public fields of public structs, the public methods and
associated items of inherent impls, the items of public traits, the traits
each public type implements by hand (not auto traits, nor blanket impls,
nor the compiler's `StructuralPartialEq`), and the types each public trait
is implemented for. Not listed: signatures, generics and bounds (a changed
signature shows in the build of the crates that use it, not here), and
what the `model` feature adds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = "tenure"
LISTING = ROOT / "api" / f"{CRATE}.txt"
# The rustdoc JSON formats this walker was written against.
KNOWN_FORMATS = {57}
# Trait impls the compiler adds for derives: toolchain detail, not API.
INTERNAL_TRAITS = {"StructuralPartialEq"}


def type_str(t) -> str:
    """A type of rustdoc's JSON as a user writes it, well enough to tell
    the impls of one trait apart."""
    if not isinstance(t, dict):
        return str(t)
    kind, v = next(iter(t.items()))
    if kind == "resolved_path":
        args = (v.get("args") or {}).get("angle_bracketed", {}).get("args", [])
        inner = [type_str(a["type"]) for a in args if isinstance(a, dict) and "type" in a]
        return v["path"] + (f"<{', '.join(inner)}>" if inner else "")
    if kind == "generic" or kind == "primitive":
        return v
    if kind == "borrowed_ref":
        return "&" + ("mut " if v.get("is_mutable") else "") + type_str(v["type"])
    if kind == "dyn_trait":
        return "dyn " + " + ".join(tr["trait"]["path"] for tr in v["traits"])
    if kind == "slice":
        return f"[{type_str(v)}]"
    if kind == "tuple":
        return "(" + ", ".join(type_str(x) for x in v) + ")"
    return kind


def rustdoc_json() -> dict:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "public-api"
    # The crate's name, not 1: only rustdoc's run on this crate may use the
    # unstable flag, not the build scripts of its dependencies.
    env = dict(os.environ, RUSTC_BOOTSTRAP=CRATE, CARGO_TARGET_DIR=str(target))
    subprocess.run(
        ["cargo", "rustdoc", "-q", "--locked", "-p", CRATE, "--lib", "--",
         "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True)
    doc = json.loads((target / "doc" / f"{CRATE}.json").read_text())
    if doc.get("format_version") not in KNOWN_FORMATS:
        sys.exit(f"public_api: rustdoc JSON format {doc.get('format_version')} is not one this "
                 f"script knows ({sorted(KNOWN_FORMATS)}); check the walker against the new "
                 "format and add it")
    return doc


def listing(doc: dict) -> list[str]:
    index = doc["index"]
    lines: set[str] = set()

    def item(i):
        return index.get(str(i)) if i is not None else None

    def kind_of(it):
        return next(iter(it["inner"]))

    def public(it):
        return it.get("visibility") == "public"

    def impls(inner):
        for impl_id in inner.get("impls", []):
            impl = item(impl_id)
            if impl is None:
                continue
            yield impl["inner"]["impl"]

    def members(it, path):
        kind = kind_of(it)
        inner = it["inner"][kind]
        if kind == "struct":
            shape = inner["kind"]  # "unit", {"tuple": [ids]} or {"plain": {...}}
            fields = []
            if isinstance(shape, dict):
                fields = shape.get("tuple") or shape.get("plain", {}).get("fields", [])
            for f in fields:
                field = item(f)
                if field and public(field):
                    lines.add(f"field {path}::{field['name']}")
        if kind == "enum":
            for v in inner["variants"]:
                variant = item(v)
                if not variant:
                    continue
                lines.add(f"variant {path}::{variant['name']}")
                shape = variant["inner"]["variant"]["kind"]
                fields = []
                if isinstance(shape, dict):
                    fields = shape.get("tuple") or shape.get("struct", {}).get("fields", [])
                for f in fields:
                    field = item(f)
                    if field:
                        lines.add(f"field {path}::{variant['name']}::{field['name']}")
        if kind == "trait":
            for m in inner["items"]:
                member = item(m)
                if member:
                    lines.add(f"{kind_of(member)} {path}::{member['name']}")
            for i in inner.get("implementations", []):
                impl = item(i)
                if impl is not None:
                    lines.add(f"impl {path} for {type_str(impl['inner']['impl']['for'])}")
        if kind in ("struct", "enum", "union"):
            for impl in impls(inner):
                if impl.get("is_synthetic") or impl.get("blanket_impl") is not None:
                    continue
                if impl["trait"] is None:
                    for m in impl["items"]:
                        member = item(m)
                        if member and public(member):
                            lines.add(f"{kind_of(member)} {path}::{member['name']}")
                elif impl["trait"]["path"] not in INTERNAL_TRAITS:
                    lines.add(f"impl {type_str({'resolved_path': impl['trait']})} for {path}")

    def emit(it, path, seen):
        kind = kind_of(it)
        lines.add(f"{kind} {path}")
        if kind == "module":
            walk(it, path, seen)
        else:
            members(it, path)

    def walk(module, path, seen):
        if module["id"] in seen:
            return
        seen = seen | {module["id"]}
        for i in module["inner"]["module"]["items"]:
            it = item(i)
            if it is None or not public(it):
                continue
            if kind_of(it) == "use":
                use = it["inner"]["use"]
                target = item(use["id"])
                if use["is_glob"]:
                    if target is not None and kind_of(target) == "module":
                        walk(target, path, seen)
                    else:
                        lines.add(f"use {path}::* = {use['source']}::*")
                elif target is not None:
                    emit(target, f"{path}::{use['name']}", seen)
                else:
                    lines.add(f"use {path}::{use['name']} = {use['source']}")
            else:
                emit(it, f"{path}::{it['name']}", seen)

    walk(item(doc["root"]), CRATE, frozenset())
    return sorted(lines)


def main() -> int:
    current = "\n".join(listing(rustdoc_json())) + "\n"
    if "--write" in sys.argv[1:]:
        LISTING.parent.mkdir(exist_ok=True)
        LISTING.write_text(current)
        print(f"public_api: wrote {LISTING.relative_to(ROOT)} ({current.count(chr(10))} items)")
        return 0
    committed = LISTING.read_text() if LISTING.exists() else ""
    if committed == current:
        print(f"public_api: the public API of {CRATE} is the committed one "
              f"({current.count(chr(10))} items)")
        return 0
    old, new = set(committed.splitlines()), set(current.splitlines())
    print(f"public_api: the public API of {CRATE} differs from {LISTING.relative_to(ROOT)}:")
    for line in sorted(new - old):
        print(f"  + {line}")
    for line in sorted(old - new):
        print(f"  - {line}")
    print("If the change is meant, run `python3 scripts/public_api.py --write` and commit "
          "the listing with it.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
