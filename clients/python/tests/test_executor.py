"""SandboxExecutor against the real daemon: code written for a home-made
tools-object executor, run in a fresh jail."""

import unittest

from support import DaemonTest

from cellblock_client import ExecutionResult, SandboxExecutor


class Shop:
    """A tools object of three methods (and a private one that is no tool)."""

    def __init__(self):
        self.orders = []

    def search(self, query, limit=3):
        return [{"id": i, "name": "%s %d" % (query, i)} for i in range(limit)]

    def price(self, item_id: int) -> float:
        if item_id < 0:
            raise ValueError("no item %d" % item_id)
        return 10.0 + item_id

    def order(self, item_id, quantity=1, **notes):
        self.orders.append((item_id, quantity, notes))
        return {"ok": True, "n": len(self.orders)}

    def _secret(self):
        return "not a tool"


class TestSandboxExecutor(DaemonTest):
    def setUp(self):
        super().setUp()
        self.shop = Shop()
        self.ex = SandboxExecutor(self.shop, timeout=5, max_output_size=200, client=self.client)

    def test_three_methods_and_return_value(self):
        code = ("items = tools.search('mug', 2)\n"
                "total = sum(tools.price(it['id']) for it in items)\n"
                "print(json.dumps(items))\n"
                "r = tools.order(items[0]['id'], quantity=2, gift=True)\n"
                "__return_value__ = {'total': total, 'order': r}\n"
                "'the last expression does not win'")
        res = self.ex.execute(code)
        self.assertIsInstance(res, ExecutionResult)
        self.assertTrue(res.success, res.error)
        self.assertIsNone(res.error)
        self.assertEqual(res.output, '[{"id": 0, "name": "mug 0"}, {"id": 1, "name": "mug 1"}]\n')
        self.assertEqual(res.return_value, {"total": 21.0, "order": {"ok": True, "n": 1}})
        self.assertEqual(self.shop.orders, [(0, 2, {"gift": True})])
        self.assertGreater(res.execution_time, 0)

    def test_last_expression_is_the_return_value(self):
        self.assertEqual(self.ex.execute("x = 20\nx + 22").return_value, 42)
        self.assertIsNone(self.ex.execute("x = 1").return_value)
        self.assertEqual(self.ex.execute("object()").return_value[:15], "<object object ")
        big = self.ex.execute("list(range(30000))").return_value
        self.assertEqual(big, list(range(30000)))

    def test_errors(self):
        res = self.ex.execute("print('before')\n1 / 0")
        self.assertFalse(res.success)
        self.assertEqual(res.output, "before\n")
        self.assertTrue(res.error.startswith("Traceback (most recent call last):\n  File \"<code>\", line 2"),
                        res.error)
        self.assertTrue(res.error.endswith("ZeroDivisionError: division by zero"), res.error)
        self.assertNotIn("_cellblock", res.error)
        res = self.ex.execute("try:\n    tools.price(-1)\nexcept ValueError as e:\n    print('caught', e)\n"
                              "tools.price(-2)")
        self.assertEqual(res.output, "caught no item -1\n")
        self.assertIn("ValueError: no item -2", res.error)
        res = self.ex.execute("tools.nope()")
        self.assertIn("AttributeError", res.error)
        res = self.ex.execute("tools._secret()")
        self.assertFalse(res.success)
        res = self.ex.execute("x = (")
        self.assertFalse(res.success)
        self.assertIn("SyntaxError", res.error)

    def test_timeout(self):
        res = self.ex.execute("print('started', flush=True)\nimport time\ntime.sleep(60)")
        self.assertFalse(res.success)
        self.assertEqual(res.error, "Execution timed out after 5 seconds")
        self.assertEqual(res.output, "started\n")

    def test_output_over_max_output_size(self):
        res = self.ex.execute("for i in range(100):\n    print('line %03d' % i)")
        self.assertTrue(res.success)
        self.assertEqual(len(res.output.split("\n... (output truncated")[0]), 200)
        self.assertTrue(res.output.startswith("line 000\nline 001\n"))
        self.assertIn("(output truncated: 900 characters in all)", res.output)

    def test_no_blocklist_the_jail_is_the_boundary(self):
        res = self.ex.execute("import subprocess, sys\nopen('f.txt', 'w').write('x')\n"
                              "out = subprocess.run([sys.executable, '-c', 'print(open(\"f.txt\").read(), end=\"\")'],"
                              " capture_output=True, text=True).stdout\n"
                              "eval('1 + 1'), out")
        self.assertTrue(res.success, res.error)
        self.assertEqual(res.return_value, [2, "x"])
        # Each execution is a fresh jail: nothing stays.
        self.assertFalse(self.ex.execute("import os\nos.path.exists('f.txt')").return_value)

    def test_validate_code(self):
        self.assertEqual(self.ex.validate_code("import os\nos.system('ls')"), (True, None))
        ok, err = self.ex.validate_code("def f(:\n")
        self.assertFalse(ok)
        self.assertTrue(err.startswith("SyntaxError: "), err)
        self.assertIn("(line 1)", err)
        self.assertEqual(self.ex.validate_code(3)[0], False)

    def test_dict_of_callables(self):
        ex = SandboxExecutor({"double": lambda x: 2 * x}, client=self.client)
        self.assertEqual(ex.execute("tools.double(21)").return_value, 42)


if __name__ == "__main__":
    unittest.main()
