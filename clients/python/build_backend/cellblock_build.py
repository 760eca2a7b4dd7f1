"""A PEP 517 (and PEP 660) build backend for cellblock_client, in the
standard library alone.

pip builds a package from source in an isolated environment into which it
installs the backend named in pyproject.toml from the package index,
unless the backend is in the source tree (backend-path). This one is, so
`pip install ./clients/python` needs no network. It builds what a pure
Python package needs: a wheel of the package directory (py3-none-any), an
sdist, and for `pip install -e` an editable wheel whose .pth file points
at the source.

The name, version, summary and Python requirement are read from
pyproject.toml's [project] table, the only place they are written.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "cellblock_client"
# A fixed time for the files of an archive, so that builds are
# reproducible: 1980-01-01, the earliest a zip file can say.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    """The [project] table's string values (key = "value" lines)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        raise RuntimeError("pyproject.toml has no [project] table")
    values = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"\n]*)"\s*$', m.group(1), re.M))
    for key in ("name", "version"):
        if key not in values:
            raise RuntimeError("pyproject.toml's [project] table has no %s" % key)
    return values


def _dist_name(p):
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"]]
    if "description" in p:
        lines.append("Summary: %s" % p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: %s" % p["requires-python"])
    body = ""
    readme = p.get("readme")
    if readme and os.path.isfile(os.path.join(ROOT, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return ("\n".join(lines) + "\n" + body).encode("utf-8")


def _wheel_file():
    return b"Wheel-Version: 1.0\nGenerator: cellblock_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    """(path in the wheel, path on disk) of the package's files."""
    out = []
    base = os.path.join(ROOT, PACKAGE)
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith((".py", ".typed")):
                full = os.path.join(d, f)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(directory, entries):
    """A wheel of entries [(path, bytes)] plus its dist-info, in directory;
    returns its file name."""
    p = _project()
    name = _dist_name(p)
    info = "%s-%s.dist-info" % (name, p["version"])
    entries = list(entries) + [
        (info + "/METADATA", _metadata(p)),
        (info + "/WHEEL", _wheel_file()),
        (info + "/top_level.txt", (PACKAGE + "\n").encode("ascii")),
    ]
    record = [_record_line(path, data) for path, data in entries] + [info + "/RECORD,,"]
    entries.append((info + "/RECORD", ("\n".join(record) + "\n").encode("utf-8")))
    filename = "%s-%s-py3-none-any.whl" % (name, p["version"])
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            zi = zipfile.ZipInfo(path, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _read(full):
    with open(full, "rb") as f:
        return f.read()


# PEP 517.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    info = "%s-%s.dist-info" % (_dist_name(p), p["version"])
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for fname, data in (("METADATA", _metadata(p)), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, fname), "wb") as f:
            f.write(data)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(path, _read(full)) for path, full in _package_files()])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    filename = base + ".tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("build_backend/cellblock_build.py", os.path.abspath(__file__))]
    if p.get("readme"):
        files.append((p["readme"], os.path.join(ROOT, p["readme"])))
    files += _package_files()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(name, data):
            ti = tarfile.TarInfo(base + "/" + name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 315532800
            tar.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", _metadata(p))
        for name, full in files:
            add(name, _read(full))
    return filename


# PEP 660: pip install -e.

def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (ROOT + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [("_cellblock_client_editable.pth", pth)])
