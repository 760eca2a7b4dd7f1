package cli

import (
	"strings"
	"testing"
)

func TestInputComplete(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  bool
	}{
		// Simple statements end with their line.
		{[]string{"x = 1"}, true},
		{[]string{"x = 1; y = 2"}, true},
		{[]string{"print('(')"}, true},
		{[]string{`x = ")"`}, true},
		{[]string{`x = "#"  # ( a comment`}, true},
		{[]string{"iffy = 1"}, true},
		{[]string{"lambda: 0"}, true},
		{[]string{"x[1:]"}, true},
		{[]string{`d = {"a": 1}`}, true},
		{[]string{"match(x)"}, true},
		{[]string{`f"{d["k"]}"`}, true},
		{[]string{`rb'\x00' b"\""`}, true},
		{[]string{"caf\u00e9 = 1"}, true},
		// Nothing to run.
		{[]string{""}, true},
		{[]string{"   "}, true},
		{[]string{"# a comment"}, true},
		// Brackets go on, across empty lines, until closed.
		{[]string{"foo("}, false},
		{[]string{"foo(", "1)"}, true},
		{[]string{"x = [1,", ""}, false},
		{[]string{"x = [1,", "", "2]"}, true},
		{[]string{"x[1:"}, false},
		// Strings.
		{[]string{`s = """a`}, false},
		{[]string{`s = """a`, ""}, false},
		{[]string{`s = """a`, `b"""`}, true},
		{[]string{`s = '''it's`, `'''`}, true},
		{[]string{`x = "a\`}, false},
		{[]string{`x = "a\`, `b"`}, true},
		{[]string{`x = "abc`}, true}, // unterminated: Python's error
		{[]string{`x = "\\"`}, true},
		// A backslash at the end of a line.
		{[]string{`x = 1 + \`}, false},
		{[]string{`x = 1 + \`, "2"}, true},
		{[]string{`x = 1  # \`}, true},
		// Compound statements end with an empty line.
		{[]string{"if x:"}, false},
		{[]string{"if x:", "    y"}, false},
		{[]string{"if x:", "    y", ""}, true},
		{[]string{"if x:", "    y", "    "}, true},
		{[]string{"if x:", "    y", "else:", "    z", ""}, true},
		{[]string{"if x: y"}, false},
		{[]string{"if x: y", ""}, true},
		{[]string{"for i in range(3): print(i)"}, false},
		{[]string{"class A: pass"}, false},
		{[]string{"async def f():"}, false},
		{[]string{"try:", "    1/0", "except ZeroDivisionError:", "    pass", ""}, true},
		{[]string{"with open(f) as g:"}, false},
		{[]string{"match x:"}, false},
		{[]string{"match x:", "    case 1:", "        pass", ""}, true},
		{[]string{"@dec"}, false},
		{[]string{"@dec", "def f(): pass", ""}, true},
		{[]string{"def f(", "    a):"}, false},
		{[]string{"def f(", "    a):", "    return a", ""}, true},
		{[]string{"while True: \\", "    pass"}, false},
		// An empty line inside a string or bracket does not end a block.
		{[]string{"def f():", `    s = """`, ""}, false},
		{[]string{"def f():", `    s = """`, "", `    """`}, false},
		{[]string{"def f():", `    s = """`, "", `    """`, ""}, true},
		{[]string{"if x:", "    f(", ""}, false},
		{[]string{"if x:", "    d = {1:", "    2}", ""}, true},
	} {
		if got := inputComplete(tc.lines); got != tc.want {
			t.Errorf("inputComplete(%q) = %v, want %v", tc.lines, got, tc.want)
		}
	}
}

func TestHasCode(t *testing.T) {
	for src, want := range map[string]bool{
		"": false, " \n\t": false, "# x\n  # y": false, "x": true, "# x\npass": true, `""`: true,
	} {
		if got := hasCode(src); got != want {
			t.Errorf("hasCode(%q) = %v, want %v", src, got, want)
		}
	}
}

// scanSource must not panic or hang on any input.
func FuzzScanSource(f *testing.F) {
	for _, s := range []string{`"""`, `'\`, "\\", "(((", `f"{x["y"]}"`, "#", "'''a'''b'", strings.Repeat(`"`, 7)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		scanSource(src)
		inputComplete(strings.Split(src, "\n"))
	})
}
