# Runs under an interpreter to import into the store and prints what the
# build needs to know about it as one JSON object. It must stay valid
# Python 2, so that a Python 2 is told apart clearly instead of failing with
# a syntax error. Run with -E -s -S (not -I, which Python 2 lacks), so it
# drops the current directory from sys.path itself.
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import json
vi = sys.version_info
out = {"version": [vi[0], vi[1], vi[2]], "releaselevel": vi[3], "serial": vi[4],
       "implementation": getattr(getattr(sys, "implementation", None), "name", "")}
if vi[0] >= 3:
    import os, sysconfig
    cv = sysconfig.get_config_var
    dynload = ""
    for p in sys.path:
        if os.path.basename(p) == "lib-dynload":
            dynload = p
            break
    out.update({
        "executable": sys.executable,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "base_exec_prefix": getattr(sys, "base_exec_prefix", sys.exec_prefix),
        "stdlib": sysconfig.get_path("stdlib"),
        "platstdlib": sysconfig.get_path("platstdlib"),
        "purelib": sysconfig.get_path("purelib"),
        "platlib": sysconfig.get_path("platlib"),
        "dynload": dynload or cv("DESTSHARED") or "",
        "soabi": cv("SOABI") or "",
        "cache_tag": sys.implementation.cache_tag or "",
        "wheel_pkg_dir": cv("WHEEL_PKG_DIR") or "",
        "pyc_magic": sys.modules["_frozen_importlib_external"].MAGIC_NUMBER.hex(),
    })
    try:
        import _ssl
        paths = _ssl.get_default_verify_paths()
        out["openssl_cafile"] = paths[1] or ""
        out["openssl_capath"] = paths[3] or ""
    except Exception:
        pass
print(json.dumps(out))
