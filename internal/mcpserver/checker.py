import json
import sys
import warnings


def source_line(source, lineno):
    try:
        return source.decode("utf-8", "replace").splitlines()[lineno - 1]
    except (TypeError, IndexError):
        return None


def check(source):
    report = {"ok": True, "python": "%d.%d.%d" % sys.version_info[:3], "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(source, "<main.py>", "exec", dont_inherit=True)
        except SyntaxError as e:  # IndentationError and TabError too
            report["ok"] = False
            report["error"] = {
                "type": type(e).__name__,
                "message": e.msg,
                "line": e.lineno,
                "column": e.offset,
                "end_line": getattr(e, "end_lineno", None),
                "end_column": getattr(e, "end_offset", None),
                "text": source_line(source, e.lineno) if e.text is None else e.text.rstrip("\r\n"),
            }
        except Exception as e:  # null bytes (ValueError before 3.12), too deep, ...
            report["ok"] = False
            report["error"] = {"type": type(e).__name__, "message": str(e)}
    for w in caught:
        report["warnings"].append({
            "category": w.category.__name__,
            "message": str(w.message),
            "line": w.lineno,
        })
    return report


json.dump(check(sys.stdin.buffer.read()), sys.stdout)
sys.stdout.write("\n")
