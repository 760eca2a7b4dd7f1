package pep723

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"reflect"
	"testing"
)

// referenceScript applies the PEP's regular expression with Python's re
// module and reads the block with tomllib, so that Parse can be compared
// with Python's own reading of the same scripts. It reads a JSON list of
// scripts on stdin and prints a JSON list of outcomes.
const referenceScript = `
import json, re, sys, tomllib

PATTERN = re.compile(
    r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")

def outcome(src):
    src = src.replace("\r\n", "\n").replace("\r", "\n")
    blocks = [m for m in PATTERN.finditer(src) if m.group("type") == "script"]
    if not blocks:
        return {"present": False}
    if len(blocks) > 1:
        return {"error": True}
    lines = blocks[0].group("content").split("\n")[:-1]
    body = "".join((l[2:] if l.startswith("# ") else l[1:]) + "\n" for l in lines)
    try:
        doc = tomllib.loads(body)
    except tomllib.TOMLDecodeError:
        return {"error": True}
    deps = doc.get("dependencies", [])
    if not isinstance(deps, list) or any(not isinstance(d, str) or not d.strip() for d in deps):
        return {"error": True}
    rp = doc.get("requires-python", "")
    if not isinstance(rp, str):
        return {"error": True}
    return {"present": True, "dependencies": deps, "requires_python": rp}

print(json.dumps([outcome(s) for s in json.load(sys.stdin)]))
`

type referenceOutcome struct {
	Present        bool     `json:"present"`
	Error          bool     `json:"error"`
	Dependencies   []string `json:"dependencies"`
	RequiresPython string   `json:"requires_python"`
}

// TestParseMatchesReference compares Parse with the PEP's regular
// expression run by the host's Python (3.11 or later, for tomllib).
func TestParseMatchesReference(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	if err := exec.Command(python, "-c", "import tomllib").Run(); err != nil {
		t.Skip("the host's python3 has no tomllib (needs 3.11 or later)")
	}

	scripts := []string{
		"",
		"print(1)\n",
		"# /// script\n# dependencies = [\"requests<3\", \"rich\"]\n# requires-python = \">=3.11\"\n# ///\n",
		"# /// script\r\n# dependencies = []\r\n# ///",
		"# /// script\n#\n# ///\n",
		"# /// script\n# ///\n",
		"# /// script\n# ///\n# ///\n",
		"# /// script\n# dependencies = [\n# ///\n",
		"# /// script\n# dependencies = \"x\"\n# ///\n",
		"# /// script\n# a = 1\n# ///\n\n# /// script\n# b = 2\n# ///\n",
		"# /// script\n# a = 1\n# ///\n# /// script\n# b = 2\n# ///\n",
		"# /// other\n# /// script\n# a = 1\n# ///\n# ///\n",
		"# /// other\n# a = 1\n# ///\n\n# /// script\n# dependencies = [\"z\"]\n# ///\n",
		"# /// script\n# dependencies = [\n# \"\"\"\n# ///\n# \"\"\",\n# ]\n# ///\nprint(1)\n",
		"# /// script\n# dependencies = [\"a\"]\n# /// \n",
		"# /// script \n# dependencies = [\"a\"]\n# ///\n",
		"# /// script\n# dependencies = [\"a\"]\nx = 1\n# ///\n",
		"# /// script\n# dependencies = [\"a\"]\n#x\n# ///\n",
		"#  /// script\n# dependencies = [\"a\"]\n# ///\n",
		"# /// script\n#  dependencies = [\"a\"]\n# ///\n",
		"# /// script\n# dependencies = [1]\n# ///\n",
		"# /// script\n# requires-python = 3\n# ///\n",
		"# /// script\n# [tool.uv]\n# index-url = \"http://x\"\n# ///\n",
		"# /// script\r# requires-python = \">=3\"\r# ///\r",
		"code\n# /// script\n# dependencies = [\"a\"]\n# ///",
		"# /// script\n# dependencies = [\"a\"]\n# ///\n# /// script\n",
		"# /// Script\n# dependencies = [\"a\"]\n# ///\n",
		"# /// script-2\n# dependencies = [\"a\"]\n# ///\n",
	}
	in, err := json.Marshal(scripts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", referenceScript)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference script: %v", err)
	}
	var want []referenceOutcome
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("reference output %q: %v", out, err)
	}
	if len(want) != len(scripts) {
		t.Fatalf("reference gave %d outcomes for %d scripts", len(want), len(scripts))
	}
	for i, code := range scripts {
		meta, err := Parse(code)
		got := referenceOutcome{
			Present:        meta.Present,
			Error:          err != nil,
			Dependencies:   meta.Dependencies,
			RequiresPython: meta.RequiresPython,
		}
		w := want[i]
		if len(w.Dependencies) == 0 {
			w.Dependencies = nil
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("script %q:\nParse     %+v (err %v)\nreference %+v", code, got, err, w)
		}
	}
}
