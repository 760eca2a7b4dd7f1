package runner

import (
	"encoding/hex"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/nsjail/layout"
)

// pyConstantsScript prints, as JSON, the module-level constants (an
// upper-case name bound to an expression of literals alone) of each file
// it is given: {"file": {"NAME": value}}, bytes as {"hex": "..."}, tuples
// and sets as lists. It evaluates nothing but literals and operators.
const pyConstantsScript = `
import ast, json, re, sys
out = {}
for path in sys.argv[1:]:
    consts = out.setdefault(path, {})
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if not re.fullmatch(r"_?[A-Z][A-Z0-9_]*", name):
            continue
        if any(isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Lambda, ast.comprehension)) for n in ast.walk(node.value)):
            continue
        v = eval(compile(ast.Expression(node.value), path, "eval"), {"__builtins__": {}})
        def plain(v):
            if isinstance(v, bytes):
                return {"hex": v.hex()}
            if isinstance(v, (tuple, list, set, frozenset)):
                return [plain(x) for x in v]
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            return v
        consts[name] = plain(v)
print(json.dumps(out))
`

// TestPythonConstants holds the constants the Python side of the runner
// shares with the Go side to the Go side's values: every upper-case
// module-level constant of the embedded Python is either in goSide (and
// equal to it) or in pythonOwn, so that a new one is a decision, not a
// second copy that drifts.
func TestPythonConstants(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3 to read the runner's constants with: %v", err)
	}
	ready := DefaultLimits()
	ready.FrameBytes = ReadyFrameBytes // until the run message says otherwise
	goSide := map[string]map[string]any{
		"_cellblock_runner.py": {
			"ENV_FD":            EnvFD,
			"ENV_PRELOAD":       EnvPreload,
			"MAX_PRELOAD":       MaxPreload,
			"MAX_MODULE_NAME":   MaxModuleName,
			"MAX_PRELOAD_ERROR": PreloadErrorBytes,
			"PROTOCOL":          ProtocolVersion,
			"MPL_BACKEND":       MPLBackend,
		},
		"cellblock/_channel.py": {
			"DEFAULT_LIMITS": ready,
			"MAX_IN_FRAME":   MaxDaemonFrame,
			"JSON_DEPTH":     MaxJSONDepth,
			"METADATA_BYTES": MetadataBytes,
			"PNG_MAGIC":      map[string]string{"hex": hex.EncodeToString(binaryMIME["image/png"])},
			"JPEG_MAGIC":     map[string]string{"hex": hex.EncodeToString(binaryMIME["image/jpeg"])},
		},
		"cellblock/_files.py": {
			// The rules of an input file's path are the API's; the
			// runner checks them again where it writes the file.
			"WORK":      layout.Work,
			"MAX_PATH":  api.MaxFilePathBytes,
			"MAX_NAME":  api.MaxFileNameBytes,
			"MAX_DEPTH": api.MaxFileDepth,
		},
		"cellblock/_session.py": {
			"MAX_VARIABLES": MaxVariables,
			"_RUN_FDS":      SessionRunFDs,
		},
	}
	// Constants of the Python side alone, each with why it has no Go
	// counterpart.
	pythonOwn := map[string]map[string]string{
		"_cellblock_runner.py": {
			"ENV_RUN_FD":      "the runner's message to itself across a re-exec",
			"_PRELOAD":        "the runner's own idle imports",
			"_SLOW_EXIT_VARS": "variables that make CPython's exit slow, for the runner's exit",
		},
		"cellblock/_channel.py": {
			"_REPR_METHODS": "IPython's rich repr methods; the Collector checks MIME types, not methods",
		},
		"cellblock/_session.py": {
			"VARIABLE_REPR": "what the runner sends of a repr; the daemon cuts at MaxVariableRepr, above it",
		},
		"cellblock/_tools.py": {
			"GRACE":      "how long past the tool timeout a call waits on its own",
			"REPR_BYTES": "repr(cellblock.tools)",
			"_TYPES":     "JSON Schema types as Python's, for help(); mcpserver's pyTypes writes the same signatures",
		},
	}
	files := slices.Sorted(maps.Keys(goSide))
	for f := range pythonOwn {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	// Every Python file of the runner is read, not just those above.
	all, err := filepath.Glob("py/cellblock/*.py")
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, "py/_cellblock_runner.py")
	args := append([]string{"-c", pyConstantsScript}, all...)
	out, err := exec.Command(python, args...).Output()
	if err != nil {
		t.Fatalf("read the Python constants: %v", err)
	}
	var found map[string]map[string]json.RawMessage
	if err := json.Unmarshal(out, &found); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, f := range files {
		if _, ok := found["py/"+f]; !ok {
			t.Errorf("py/%s: not among the runner's Python files", f)
		}
	}
	checked := 0
	for path, consts := range found {
		f, _ := filepath.Rel("py", path)
		for name, raw := range consts {
			want, shared := goSide[f][name]
			if !shared {
				if _, own := pythonOwn[f][name]; !own {
					t.Errorf("%s: %s = %s is neither held to a Go constant (goSide) nor listed as the Python side's own (pythonOwn)", path, name, raw)
				}
				continue
			}
			checked++
			if !sameJSON(t, raw, want) {
				t.Errorf("%s: %s = %s, the Go side has %v", path, name, raw, want)
			}
		}
		for name := range goSide[f] {
			if _, ok := consts[name]; !ok {
				t.Errorf("%s: no constant %s (the Go side has %v)", path, name, goSide[f][name])
			}
		}
	}
	if checked < 15 {
		t.Errorf("compared only %d constants; is the reading broken?", checked)
	}
}

// sameJSON reports whether raw is want encoded as JSON.
func sameJSON(t *testing.T, raw json.RawMessage, want any) bool {
	t.Helper()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got, exp any
	if json.Unmarshal(raw, &got) != nil || json.Unmarshal(b, &exp) != nil {
		return false
	}
	return reflect.DeepEqual(got, exp)
}
