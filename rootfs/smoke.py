# Runs inside a newly built rootfs, chrooted, as nobody: imports every
# extension module in lib-dynload (argv[1]), which catches a missing shared
# library, and a few packages wrapping them, makes an SSL context with the
# CA bundle, and prints what it found as one JSON object.
import sys, os, json, importlib
out = {"prefix": sys.prefix, "exec_prefix": sys.exec_prefix, "version": list(sys.version_info[:3]),
       "path": sys.path, "failed": {}}
names = ["encodings", "sqlite3", "ctypes"]
dynload = sys.argv[1]
names += sorted(f.split(".")[0] for f in os.listdir(dynload) if f.endswith(".so"))
for name in names:
    try:
        importlib.import_module(name)
    except Exception as e:
        out["failed"][name] = repr(e)
try:
    import ssl
    out["ca_certs"] = len(ssl.create_default_context().get_ca_certs())
except Exception as e:
    out["failed"]["ssl.create_default_context"] = repr(e)
print(json.dumps(out))
