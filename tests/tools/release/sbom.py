#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the crates compiled into the image's binaries.

    sbom.py VERSION IMAGE CARGO_LOCK [NAME=VALUE...] < tree.txt > sbom.json

tree.txt is `cargo tree --locked -e normal -p PKG... --target TARGET --prefix depth
-f '{p}|{l}'` for the packages the image's binaries are built from, with the same package
selection as their build, so that features resolve as they do there (`cargo metadata` would
unify the features of the whole workspace, tests and CLI included, and list crates the
binaries do not link). Normal dependencies only (a build or dev dependency is not linked in;
proc macros, which run at build time, are listed). Every component carries its licence, its
purl and the SHA-256 that CARGO_LOCK records of its .crate; the workspace's own crates carry
no hash. Each NAME=VALUE becomes a property of the SBOM's metadata (the release script
records the commit built, whether the tree was dirty, and a --quick build's mark). Bad input
fails with a message naming the line.
"""
import json
import re
import sys
import uuid

LINE = re.compile(r"^(\d+)(\S+) v(\S+)( \([^)]*\))*\|(.*?)( \(\*\))?$")


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: sbom.py VERSION IMAGE CARGO_LOCK [NAME=VALUE...] < cargo-tree.txt")
    version, image, lock = sys.argv[1:4]
    properties = []
    for arg in sys.argv[4:]:
        name, eq, value = arg.partition("=")
        if not eq or not name:
            sys.exit(f"sbom.py: property {arg!r} is not NAME=VALUE")
        properties.append({"name": name, "value": value})
    checksums = lock_checksums(lock)
    crates, edges, roots, stack = {}, {}, [], []
    for n, line in enumerate(sys.stdin, 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        m = LINE.match(line)
        if not m:
            sys.exit(f"sbom.py: line {n} of cargo tree's output not understood: {line!r}")
        depth, name, ver, licence = int(m[1]), m[2], m[3], m[5]
        ref = f"pkg:cargo/{name}@{ver}"
        local = "(/" in line.split("|", 1)[0]
        crates.setdefault(ref, (name, ver, licence, local))
        edges.setdefault(ref, set())
        del stack[depth:]
        if depth == 0:
            roots.append(ref)
        elif len(stack) == depth:
            edges[stack[-1]].add(ref)
        else:
            sys.exit(f"sbom.py: line {n} is deeper than its parent: {line!r}")
        stack.append(ref)
    if not roots:
        sys.exit("sbom.py: no package in cargo tree's output")

    components = []
    for ref in sorted(crates):
        name, ver, licence, local = crates[ref]
        c = {"type": "application" if local else "library", "bom-ref": ref, "name": name, "version": ver, "purl": ref}
        if licence:
            c["licenses"] = [{"expression": licence}]
        if not local:
            digest = checksums.get((name, ver))
            if digest is None:
                sys.exit(f"sbom.py: {name} {ver} has no checksum in {lock}")
            c["hashes"] = [{"alg": "SHA-256", "content": digest}]
        components.append(c)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        # The same tree gives the same serial number: the SBOM is reproducible.
        "serialNumber": "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, image + "#" + " ".join(sorted(crates)))),
        "version": 1,
        "metadata": {
            "component": {
                "type": "container",
                "bom-ref": image,
                "name": image.rsplit(":", 1)[0],
                "version": version,
                "licenses": [{"expression": "Apache-2.0"}],
            },
            "tools": {"components": [{"type": "application", "name": "tests/tools/release/sbom.py"}]},
            "properties": properties,
        },
        "components": components,
        "dependencies": [{"ref": image, "dependsOn": sorted(roots)}]
        + [{"ref": r, "dependsOn": sorted(edges[r])} for r in sorted(edges)],
    }
    json.dump(bom, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def lock_checksums(path):
    """(name, version) -> checksum of every registry package in Cargo.lock."""
    out, name, version = {}, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line == "[[package]]":
                name = version = None
            elif line.startswith("name = "):
                name = line.split('"')[1]
            elif line.startswith("version = ") and name is not None:
                version = line.split('"')[1]
            elif line.startswith("checksum = "):
                out[(name, version)] = line.split('"')[1]
    return out


if __name__ == "__main__":
    main()
