"""pip installs the package on a machine without network: into a fresh
virtual environment, with pip's default build isolation, from an index
that cannot be reached."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

from support import ROOT


class TestInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cellblock-client-install-")
        cls.bindir = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def setUp(self):
        # The source is copied: a build writes nothing into the tree.
        self.src = os.path.join(self.tmp, "src")
        if not os.path.exists(self.src):
            shutil.copytree(ROOT, self.src, ignore=shutil.ignore_patterns("__pycache__", "tests"))
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("PIP_") or k == "PYTHONPATH":
                del env[k]
        # Nothing to fetch: any attempt fails at once.
        env.update(PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PIP_NO_CACHE_DIR="1")
        self.env = env

    def venv(self):
        """One virtual environment for the class: making one is slow."""
        if type(self).bindir is None:
            venv = os.path.join(self.tmp, "venv")
            p = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
            if p.returncode != 0 or not os.path.exists(os.path.join(venv, "bin", "pip")):
                self.skipTest("no venv with pip here (Debian: apt-get install python3-venv): %s" % p.stderr[-300:])
            type(self).bindir = os.path.join(venv, "bin")
        return type(self).bindir

    def pip(self, bindir, *args):
        p = subprocess.run([os.path.join(bindir, "pip")] + list(args), capture_output=True, text=True, env=self.env,
                           cwd=self.tmp, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])

    def test_pip_install_without_network(self):
        bindir = self.venv()
        self.pip(bindir, "install", self.src)
        p = subprocess.run([os.path.join(bindir, "python"), "-c",
                            "import cellblock_client, os; d = os.path.dirname(cellblock_client.__file__); "
                            "print(os.path.exists(os.path.join(d, 'py.typed')), cellblock_client.__version__, "
                            "cellblock_client.Client, cellblock_client.Interpreter, cellblock_client.SandboxExecutor)"],
                           capture_output=True, text=True, cwd=self.tmp, env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("True 0.1.0 "), p.stdout)
        self.assertEqual(os.listdir(self.src).count("build"), 0)

    def test_wheel_and_editable(self):
        bindir = self.venv()
        wheels = os.path.join(self.tmp, "wheels")
        self.pip(bindir, "wheel", "--no-deps", "-w", wheels, self.src)
        (whl,) = os.listdir(wheels)
        self.assertEqual(whl, "cellblock_client-0.1.0-py3-none-any.whl")
        names = zipfile.ZipFile(os.path.join(wheels, whl)).namelist()
        self.assertIn("cellblock_client/py.typed", names)
        self.assertIn("cellblock_client-0.1.0.dist-info/RECORD", names)
        self.pip(bindir, "install", "-e", self.src)
        p = subprocess.run([os.path.join(bindir, "python"), "-c", "import cellblock_client; print(cellblock_client.__file__)"],
                           capture_output=True, text=True, cwd=self.tmp, env=self.env)
        self.assertEqual(p.stdout.strip(), os.path.join(self.src, "cellblock_client", "__init__.py"), p.stderr)


if __name__ == "__main__":
    unittest.main()
