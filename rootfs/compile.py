# Compiles the standard library sources listed on stdin, as JSON
# [[path, path-in-rootfs], ...], to their __pycache__ files
# (timestamp-validated), and prints the failures as a JSON object
# {path-in-rootfs: error}. Run by the host interpreter the rootfs is built
# from, with -I -S.
import sys, json, py_compile
failed = {}
for src, dfile in json.load(sys.stdin):
    try:
        py_compile.compile(src, dfile=dfile, doraise=True)
    except Exception as e:
        failed[dfile] = str(e)
print(json.dumps(failed))
