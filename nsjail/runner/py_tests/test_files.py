"""The runner's input files (PROTOCOL.md, "Files"): file frames written
under the runner's starting directory before a run, and between a
session's runs, never through a symbolic link, never blocking on a FIFO."""

import base64
import os
import sys
import threading
import unittest

import harness

sys.path.insert(0, harness.PY_DIR)
from cellblock import _files  # noqa: E402


def chunk(path, offset, data, end=False):
    msg = {"type": "file", "path": path, "offset": offset, "data": base64.b64encode(data).decode()}
    if end:
        msg["end"] = True
    return msg


class WriterTest(unittest.TestCase):
    def setUp(self):
        self._dir = harness.tempdir()
        self.root = self._dir.name
        self.w = _files.Writer(self.root)

    def tearDown(self):
        self._dir.cleanup()

    def put(self, path, data):
        return self.w.frame(chunk(path, 0, data, end=True))

    def read(self, path):
        with open(os.path.join(self.root, path), "rb") as f:
            return f.read()

    def test_writes_in_chunks_with_directories(self):
        self.assertIsNone(self.w.frame(chunk("d/e/f.bin", 0, b"\x00\x01")))
        answer = self.w.frame(chunk("d/e/f.bin", 2, b"\x02", end=True))
        self.assertEqual(answer, {"type": "file_written", "path": "d/e/f.bin", "bytes": 3})
        self.assertEqual(self.read("d/e/f.bin"), b"\x00\x01\x02")
        self.assertEqual(self.put("empty", b""), {"type": "file_written", "path": "empty", "bytes": 0})
        self.assertEqual(self.read("empty"), b"")

    def test_overwrites_a_file(self):
        self.put("a", b"long content")
        self.put("a", b"short")
        self.assertEqual(self.read("a"), b"short")

    def test_refuses_paths_that_leave(self):
        os.mkdir(os.path.join(self.root, "sub"))
        for bad in ("/etc/passwd", "../x", "sub/../../x", "a//b", "", "a/./b", "x\0y", "a/" * 40 + "b", None, 3):
            answer = self.put(bad, b"x")
            self.assertEqual(answer.get("error"), "EINVAL", (bad, answer))
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.root), "x")))

    def test_never_follows_a_symbolic_link(self):
        outside = harness.tempdir()
        self.addCleanup(outside.cleanup)
        target = os.path.join(outside.name, "victim")
        with open(target, "w") as f:
            f.write("untouched")
        os.symlink(outside.name, os.path.join(self.root, "dirlink"))
        os.symlink(target, os.path.join(self.root, "filelink"))
        for path in ("dirlink/victim", "dirlink/new", "filelink"):
            answer = self.put(path, b"written")
            self.assertIn(answer.get("error"), ("ELOOP", "ENOTDIR"), (path, answer))
        with open(target) as f:
            self.assertEqual(f.read(), "untouched")
        self.assertEqual(os.listdir(outside.name), ["victim"])
        self.assertTrue(os.path.islink(os.path.join(self.root, "filelink")))

    def test_does_not_block_on_a_fifo(self):
        os.mkfifo(os.path.join(self.root, "fifo"))
        answers = []
        t = threading.Thread(target=lambda: answers.append(self.put("fifo", b"x")), daemon=True)
        t.start()
        t.join(30)
        self.assertFalse(t.is_alive(), "writing over a FIFO blocked")
        self.assertEqual(answers[0].get("error"), "ENXIO", answers)
        # With a reader, it is opened, but is not a regular file.
        r = os.open(os.path.join(self.root, "fifo"), os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, r)
        answer = self.put("fifo", b"x")
        self.assertEqual(answer.get("error"), "EINVAL", answer)
        self.assertIn("regular file", answer.get("message"))

    def test_out_of_order_is_refused_and_removed(self):
        self.w.frame(chunk("a", 0, b"abc"))
        answer = self.w.frame(chunk("a", 5, b"x", end=True))
        self.assertEqual(answer.get("error"), "EINVAL")
        self.assertFalse(os.path.exists(os.path.join(self.root, "a")))
        # A file never ended is removed when the next begins.
        self.w.frame(chunk("b", 0, b"half"))
        self.put("c", b"c")
        self.assertFalse(os.path.exists(os.path.join(self.root, "b")))
        self.assertEqual(self.read("c"), b"c")

    def test_bad_base64_is_refused(self):
        answer = self.w.frame({"type": "file", "path": "a", "offset": 0, "data": "!!!", "end": True})
        self.assertEqual(answer.get("error"), "EINVAL", answer)
        self.assertFalse(os.path.exists(os.path.join(self.root, "a")))


class RunnerFilesTest(unittest.TestCase):
    def test_files_before_a_run(self):
        with harness.tempdir() as d:
            r = harness.run("print(open('data/in.csv').read(), end='')\nprint(len(open('b.bin','rb').read()))",
                            cwd=d, files=[("data/in.csv", b"a,b\n1,2\n"), ("b.bin", os.urandom(3 << 20))])
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(r.stdout, b"a,b\n1,2\n%d\n" % (3 << 20), r)
            written = r.of("file_written")
            self.assertEqual([(w["path"], w["bytes"], w.get("error")) for w in written],
                             [("data/in.csv", 8, None), ("b.bin", 3 << 20, None)], r)
            # The answers come before the run starts.
            types = [f["type"] for f in r.frames]
            self.assertLess(types.index("file_written", 1), types.index("started"), types)

    def test_files_in_a_session(self):
        with harness.tempdir() as d:
            with harness.Session(cwd=d) as sess:
                # The program moves away and plants a link to /etc.
                run = sess.run("import os\nos.chdir('/')\nos.symlink('/etc', %r)" % os.path.join(d, "etc"))
                self.assertEqual(run.exit_code(), 0, run)
                for f in harness.file_frames("x/y.txt", b"between runs"):
                    sess.send(f)
                w = sess.expect("file_written")
                self.assertEqual((w["path"], w["bytes"], w.get("error")), ("x/y.txt", 12, None))
                for f in harness.file_frames("etc/passwd", b"no"):
                    sess.send(f)
                w = sess.expect("file_written")
                self.assertIn(w.get("error"), ("ELOOP", "ENOTDIR"), w)
                run = sess.run("open(%r).read()" % os.path.join(d, "x", "y.txt"))
                self.assertEqual(run.value(), "'between runs'", run)


if __name__ == "__main__":
    unittest.main()
