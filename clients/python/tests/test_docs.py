"""Every Python example of docs/python-client.md, run as written against
the daemon. An example whose first line is "# needs: dspy" runs only where
DSPy is importable."""

import contextlib
import io
import os
import re
import unittest

from support import REPO, require_daemon

DOC = os.path.join(REPO, "docs", "python-client.md")


def examples():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    return [(text[:m.start()].count("\n") + 2, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


class TestDocs(unittest.TestCase):
    def test_examples_run_as_written(self):
        found = examples()
        self.assertGreaterEqual(len(found), 8)
        for line, code in found:
            with self.subTest(line=line):
                if code.startswith("# needs: dspy"):
                    try:
                        import dspy  # noqa: F401
                    except ImportError:
                        continue
                require_daemon(self)
                out = io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    exec(compile(code, "%s:%d" % (DOC, line), "exec"), {"__name__": "__doc_example__"})


if __name__ == "__main__":
    unittest.main()
