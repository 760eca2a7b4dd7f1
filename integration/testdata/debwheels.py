"""Pack Python distributions installed by Debian into wheels.

Run with the interpreter whose distributions are packed (Debian's
/usr/bin/python3):

    debwheels.py --out DIR --have FILE DIST...

packs each DIST and, recursively, what it requires into DIR, one wheel per
distribution, and prints a JSON summary on stdout. The wheels are for a
jail whose root holds only the libraries the interpreter needs; FILE lists
their names (one a line). An extension module's shared libraries that are
not among them are copied into the wheel, in "<name>.libs/" at the top of
it, and the extension's RUNPATH (and each copied library's, so that they
find each other) is pointed there with patchelf, relative to $ORIGIN.

The same input gives the same bytes: entries are sorted and dated
1980-01-01, and modes are fixed.

Debian strips or mangles some metadata, which is made good here, each case
reported in the summary's "notes":
- egg-info directories list no files: the files are the Debian package's
  (dpkg -L) below the distribution's site directory;
- some egg-info requires.txt are empty: REQUIRES_DROPPED has the
  requirements the upstream releases in Debian 12 declare;
- a requirement whose version the installed distribution does not satisfy
  (Debian's kiwisolver says it is 0.0.0) is written without its version;
- matplotlib's data directory lives in /usr/share: DATA_TREES puts it back
  in the package, where Debian's matplotlib looks for it first;
- Debian's matplotlib reads its default matplotlibrc from /etc, which no
  wheel can install: SOURCE_EDITS adds upstream's last place back after it,
  the data directory.

Stdlib only, except for `packaging` (a dependency of matplotlib, so present
whenever there is something to pack) to read requirements and markers.
"""

import argparse
import base64
import hashlib
import importlib.metadata as md
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

# Runtime requirements of distributions whose Debian metadata lists none
# (an empty requires.txt), as the upstream release declares them.
REQUIRES_DROPPED = {
    "matplotlib": [
        "contourpy>=1.0.1", "cycler>=0.10", "fonttools>=4.22.0", "kiwisolver>=1.0.1",
        "numpy>=1.19", "packaging>=20.0", "pillow>=6.2.0", "pyparsing>=2.2.1",
        "python-dateutil>=2.7",
    ],
    "python-dateutil": ["six>=1.5"],
}

# Data a distribution reads that Debian installs outside the site
# directory: (host tree, path in the wheel). Debian's matplotlib uses
# matplotlib/mpl-data when it exists, /usr/share/matplotlib/mpl-data if not.
DATA_TREES = {
    "matplotlib": [("/usr/share/matplotlib/mpl-data", "matplotlib/mpl-data")],
}

# Edits of a distribution's files: (path in the wheel, text, replacement,
# what it does).
# Each text must be there exactly once. Debian's matplotlib_fname() ends
# with /etc/matplotlibrc where upstream's ends with the data directory's.
SOURCE_EDITS = {
    "matplotlib": [(
        "matplotlib/__init__.py",
        "        yield '/etc/matplotlibrc'\n",
        "        yield '/etc/matplotlibrc'\n"
        "        yield os.path.join(get_data_path(), 'matplotlibrc')  # added by debwheels.py\n",
        "matplotlib_fname() falls back to mpl-data/matplotlibrc",
    )],
}

# Every entry's timestamp: the earliest a zip file can hold.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--have", required=True, help="file listing the libraries the jail's root holds")
    ap.add_argument("dists", nargs="+")
    args = ap.parse_args()
    with open(args.have) as f:
        have = {line.strip() for line in f if line.strip()}
    os.makedirs(args.out, exist_ok=True)
    summary = {"python": sys.version.split()[0], "wheels": [], "notes": []}
    for dist, reqs in closure(args.dists, summary["notes"]):
        summary["wheels"].append(pack(dist, reqs, have, args.out, summary["notes"]))
    json.dump(summary, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def closure(names, notes):
    """The distributions names require, recursively, in a stable order:
    [(Distribution, [requirement strings for its METADATA])]."""
    done, order, todo = {}, [], list(names)
    while todo:
        name = todo.pop(0)
        key = canonicalize_name(name)
        if key in done:
            continue
        dist = md.distribution(name)  # PackageNotFoundError: not installed
        done[key] = dist
        declared = [r for r in (dist.requires or [])]
        if not declared and key in REQUIRES_DROPPED:
            declared = REQUIRES_DROPPED[key]
            notes.append("%s: Debian's metadata lists no requirements; used upstream's: %s" % (key, ", ".join(declared)))
        reqs = []
        for text in declared:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = md.distribution(req.name)
            if req.specifier and not req.specifier.contains(_version(dep.version), prereleases=True):
                notes.append("%s requires %s, but Debian's %s says it is %s: required by name only" % (
                    key, req, req.name, dep.version))
                req.specifier = type(req.specifier)("")
            reqs.append(str(req))
            todo.append(req.name)
        order.append((dist, sorted(reqs)))
    return sorted(order, key=lambda p: canonicalize_name(p[0].metadata["Name"]))


def _version(v):
    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")


def escape(s):
    """A name or version as wheel file names spell it."""
    return re.sub(r"[^\w\d.]+", "_", s, flags=re.UNICODE)


def dist_files(dist, notes):
    """{path in the wheel: host path} of the distribution's own files (no
    metadata, no bytecode, no .pth), symlinks followed."""
    site = os.path.realpath(str(dist.locate_file("")))
    meta_dir = os.path.realpath(str(dist._path))  # the .dist-info or .egg-info
    if dist.files:
        paths = [os.path.normpath(os.path.join(site, str(f))) for f in dist.files]
    else:
        pkg = dpkg_owner(meta_dir)
        out = subprocess.run(["dpkg-query", "-L", pkg], check=True, capture_output=True, text=True).stdout
        paths = [p for p in out.splitlines() if p.startswith(site + "/")]
        notes.append("%s: files from Debian package %s" % (dist.metadata["Name"], pkg))
    files = {}
    for p in paths:
        rel = os.path.relpath(p, site)
        if rel.startswith("..") or p == meta_dir or p.startswith(meta_dir + "/"):
            continue
        if "__pycache__" in rel.split(os.sep) or rel.endswith((".pyc", ".pth")):
            continue
        if os.path.isdir(p):
            if os.path.islink(p):  # a directory elsewhere: take its files
                files.update(tree_files(p, rel))
            continue
        if not os.path.exists(p):
            notes.append("%s: %s is a broken link, left out" % (dist.metadata["Name"], p))
            continue
        files[rel] = p
    for src, dst in DATA_TREES.get(canonicalize_name(dist.metadata["Name"]), []):
        if os.path.isdir(src):
            files.update(tree_files(src, dst))
            notes.append("%s: %s packed as %s" % (dist.metadata["Name"], src, dst))
    return files


def tree_files(src, dst):
    found = {}
    for root, dirs, names in os.walk(src, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not n.endswith(".pyc"):
                found[os.path.join(dst, os.path.relpath(p, src))] = p
    return found


def dpkg_owner(path):
    out = subprocess.run(["dpkg-query", "-S", path], check=True, capture_output=True, text=True).stdout
    return out.splitlines()[0].split(":")[0]


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def ldd(path):
    """{needed name: host path} of path's whole library closure, as the
    host's loader resolves it (the loader and the vDSO left out)."""
    out = subprocess.run(["ldd", path], check=True, capture_output=True, text=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", line)
        if not m:
            continue  # the vDSO, the loader by its path, "statically linked"
        if m.group(2) == "not found":
            raise SystemExit("%s needs %s, which this host lacks" % (path, m.group(1)))
        libs[m.group(1)] = m.group(2)
    return libs


def pack(dist, reqs, have, out, notes):
    name, version = dist.metadata["Name"], dist.version
    files = dist_files(dist, notes)
    stage = tempfile.mkdtemp(prefix="debwheel-")
    try:
        content = {}  # path in the wheel -> bytes
        elves = []
        for rel, src in sorted(files.items()):
            if is_elf(src):
                dst = os.path.join(stage, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(src, dst)
                elves.append(rel)
            else:
                with open(src, "rb") as f:
                    content[rel] = f.read()
        for rel, old, new, what in SOURCE_EDITS.get(canonicalize_name(name), []):
            text = content[rel].decode()
            if text.count(old) != 1:
                raise SystemExit("%s: %r is not in %s once" % (name, old, rel))
            content[rel] = text.replace(old, new).encode()
            notes.append("%s: %s edited: %s" % (name, rel, what))
        bundled = bundle(name, elves, have, stage)
        for rel in elves + [b for b in bundled]:
            with open(os.path.join(stage, rel), "rb") as f:
                content[rel] = f.read()
    finally:
        shutil.rmtree(stage)

    binary = bool(elves)
    if binary:
        abi = "cp%d%d" % sys.version_info[:2]
        tag = "%s-%s-%s" % (abi, abi, re.sub(r"[-.]", "_", sysconfig.get_platform()))
    else:
        tag = "py3-none-any"
    di = "%s-%s.dist-info" % (escape(name), escape(version))
    content[di + "/METADATA"] = metadata(dist, reqs).encode()
    content[di + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: cellblock-tests (debwheels.py)\n"
                              "Root-Is-Purelib: %s\nTag: %s\n" % ("false" if binary else "true", tag)).encode()
    top = dist.read_text("top_level.txt")
    if top:
        content[di + "/top_level.txt"] = top.encode()
    record = io.StringIO()
    for rel in sorted(content):
        digest = base64.urlsafe_b64encode(hashlib.sha256(content[rel]).digest()).rstrip(b"=").decode()
        record.write("%s,sha256=%s,%d\n" % (rel, digest, len(content[rel])))
    record.write(di + "/RECORD,,\n")
    content[di + "/RECORD"] = record.getvalue().encode()

    filename = "%s-%s-%s.whl" % (escape(name), escape(version), tag)
    path = os.path.join(out, filename)
    with zipfile.ZipFile(path + ".tmp", "w") as z:
        for rel in sorted(content, key=lambda r: (r.startswith(di + "/"), r)):  # dist-info last
            zi = zipfile.ZipInfo(rel, ZIP_DATE)
            executable = rel in elves or rel in bundled
            zi.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, content[rel], compresslevel=6)
    os.replace(path + ".tmp", path)
    return {"name": name, "version": version, "file": filename, "tag": tag,
            "requires": reqs, "files": len(content), "extensions": len(elves),
            "bundled": sorted(os.path.basename(b) for b in bundled)}


def metadata(dist, reqs):
    """The distribution's metadata (METADATA or PKG-INFO) with reqs as its
    only Requires-Dist."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    head, sep, body = text.partition("\n\n")
    lines = [l for l in head.splitlines() if not l.startswith("Requires-Dist:")]
    # An egg-info's PKG-INFO may be Metadata-Version 1.x, which has no
    # Requires-Dist; 2.1 has everything the others have.
    lines = [re.sub(r"^Metadata-Version: .*", "Metadata-Version: 2.1", l) for l in lines]
    lines += ["Requires-Dist: " + r for r in reqs]
    return "\n".join(lines) + "\n" + (sep + body if sep else "")


def bundle(name, elves, have, stage):
    """Copy the libraries the ELF files in stage need and the jail's root
    lacks into <name>.libs/ and point RUNPATHs there; the copies' paths in
    the wheel."""
    libs_dir = canonicalize_name(name).replace("-", "_") + ".libs"
    need = {}  # name -> host path, over all ELF files
    per_elf = {}
    for rel in elves:
        missing = {n: p for n, p in ldd(os.path.join(stage, rel)).items() if n not in have}
        per_elf[rel] = missing
        need.update(missing)
    if not need:
        return []
    os.makedirs(os.path.join(stage, libs_dir))
    copies = []
    for lib, host in sorted(need.items()):
        rel = os.path.join(libs_dir, lib)
        dst = os.path.join(stage, rel)
        shutil.copyfile(os.path.realpath(host), dst)
        os.chmod(dst, 0o755)
        # Each copy finds the other copies it needs beside itself.
        patchelf("--set-rpath", "$ORIGIN", dst)
        copies.append(rel)
    for rel, missing in sorted(per_elf.items()):
        if missing:
            up = os.path.relpath(libs_dir, os.path.dirname(rel) or ".")
            patchelf("--set-rpath", "$ORIGIN/" + up, os.path.join(stage, rel))
    return copies


def patchelf(*args):
    subprocess.run(["patchelf"] + list(args), check=True)


if __name__ == "__main__":
    main()
