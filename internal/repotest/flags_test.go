package repotest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/cli"
	"github.com/cellblock/cellblock/internal/daemon"
	"github.com/cellblock/cellblock/internal/mcpserver"
)

// How the docs name a flag (docs/development.md says the same to writers): in a
// code span that begins with it, two dashes and the name (`--memory`,
// `--memory 128M`, `--env KEY=VALUE`), or one dash and a single letter
// (`-c CODE`). A code span that begins with a command (`pip download
// --dest DIR`) or with one dash and a longer name (the benchmark's own
// `-only start`) names no flag of ours, and neither does a fenced block.
var docFlag = regexp.MustCompile(`^(--[a-z][a-z0-9-]*[a-z0-9]|-[a-z])(?:[ =]|$)`)

// How a --help names a flag: a dash or two and the name, at the start of a
// line or after a space, a bracket, a comma or a bar. Go's flag package
// prints "-name"; the cellblock command's own help prints "--name".
var helpFlag = regexp.MustCompile(`(?m)(?:^|[\s\[(,|])(--?[a-z][a-z0-9-]*[a-z0-9]|-[a-z])\b`)

// helps returns each binary's --help output (its commands' too), keyed by
// the command line that printed it.
func helps(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	run := func(name string, main func(stdout, stderr io.Writer) int) {
		var stdout, stderr bytes.Buffer
		if code := main(&stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit status %d\n%s%s", name, code, &stdout, &stderr)
		}
		text := stdout.String() + stderr.String()
		if !strings.Contains(text, "sage") {
			t.Fatalf("%s printed no usage:\n%s", name, text)
		}
		out[name] = text
	}
	run("cellblockd --help", func(o, e io.Writer) int { return daemon.Main([]string{"--help"}, o, e) })
	for _, sub := range []string{"import", "ls"} {
		run("cellblockd rootfs "+sub+" --help", func(o, e io.Writer) int {
			// The rootfs commands' flag set says ErrHelp with status 2.
			if code := daemon.Main([]string{"rootfs", sub, "--help"}, o, e); code != 2 {
				return code
			}
			return 0
		})
	}
	run("cellblock-mcp --help", func(o, e io.Writer) int {
		return mcpserver.Main([]string{"--help"}, strings.NewReader(""), o, e)
	})
	cellblock := func(args ...string) func(o, e io.Writer) int {
		return func(o, e io.Writer) int { return cli.Main(args, strings.NewReader(""), o, e) }
	}
	run("cellblock --help", cellblock("--help"))
	// The commands: the lines of the "Commands:" list.
	commands := regexp.MustCompile(`(?m)^  ([a-z]+)  `).FindAllStringSubmatch(out["cellblock --help"], -1)
	if len(commands) < 5 {
		t.Fatalf("found %d commands in cellblock --help:\n%s", len(commands), out["cellblock --help"])
	}
	for _, c := range commands {
		run("cellblock help "+c[1], cellblock("help", c[1]))
	}
	return out
}

// docFlags returns the flags docs/ names, each with the files naming it.
func docFlags(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d files in docs/", len(files))
	}
	flags := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range codeSpans(string(b)) {
			if m := docFlag.FindStringSubmatch(span); m != nil {
				name := strings.TrimLeft(m[1], "-")
				if !slices.Contains(flags[name], filepath.Base(f)) {
					flags[name] = append(flags[name], filepath.Base(f))
				}
			}
		}
	}
	return flags
}

// codeSpans returns the text of the inline code spans of a Markdown
// document, outside fenced blocks.
func codeSpans(doc string) []string {
	var spans []string
	fenced := false
	var para strings.Builder
	flush := func() {
		// A span may run across a line break within its paragraph.
		s := para.String()
		for {
			i := strings.Index(s, "`")
			if i < 0 {
				break
			}
			n := len(s[i:]) - len(strings.TrimLeft(s[i:], "`"))
			ticks := s[i : i+n]
			rest := s[i+n:]
			j := strings.Index(rest, ticks)
			if j < 0 {
				break
			}
			spans = append(spans, strings.TrimSpace(strings.ReplaceAll(rest[:j], "\n", " ")))
			s = rest[j+n:]
		}
		para.Reset()
	}
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			flush()
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		para.WriteString(line)
	}
	flush()
	return spans
}

// TestFlagsDocumented: every flag that a --help of cellblockd, cellblock
// (and its commands) or cellblock-mcp lists is named in docs/, and every
// flag docs/ names is listed by some --help.
func TestFlagsDocumented(t *testing.T) {
	helpText := helps(t)
	documented := docFlags(t)
	listed := map[string][]string{}
	for cmd, text := range helpText {
		for _, m := range helpFlag.FindAllStringSubmatch(text, -1) {
			name := strings.TrimLeft(m[1], "-")
			if !slices.Contains(listed[name], cmd) {
				listed[name] = append(listed[name], cmd)
			}
		}
	}
	if len(listed) < 50 {
		t.Fatalf("the --help outputs list only %d flags; is the extraction broken?", len(listed))
	}
	for _, name := range sortedKeys(listed) {
		if documented[name] == nil {
			t.Errorf("%s (listed by %s) is named nowhere in docs/ (write it as a code span: `%[1]s`)", flagName(name), strings.Join(listed[name], ", "))
		}
	}
	for _, name := range sortedKeys(documented) {
		if listed[name] == nil {
			t.Errorf("docs/ (%s) names %s, which no --help lists", strings.Join(documented[name], ", "), flagName(name))
		}
	}
}

// flagName spells a flag as the docs do.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The extraction itself, on lines as the helps and the docs write them.
func TestFlagExtraction(t *testing.T) {
	help := "  -allow-sdist\n    \tlet builds (default: wheels only)\n  --tool NAME=COMMAND  a non-zero exit; python -i does\n" +
		"  -i, --stdin          pass\n[--socket PATH] Ctrl-A, -E, -K\n  -v\tlog debug\n"
	var got []string
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		got = append(got, m[1])
	}
	want := []string{"-allow-sdist", "--tool", "-i", "-i", "--stdin", "--socket", "-v"}
	if !slices.Equal(got, want) {
		t.Errorf("help flags = %q, want %q", got, want)
	}
	doc := "Use `--memory 128M` or `--env KEY=VALUE`, `-c CODE`, not `pip download --dest`\nor `-only start`, `--max-*`, `--` or `--x`.\n" +
		"A span `--across\nlines` too.\n\n```sh\ncellblock run `--fenced`\n```\n"
	got = nil
	for _, s := range codeSpans(doc) {
		if m := docFlag.FindStringSubmatch(s); m != nil {
			got = append(got, m[1])
		}
	}
	want = []string{"--memory", "--env", "-c", "--across"}
	if !slices.Equal(got, want) {
		t.Errorf("doc flags = %q, want %q", got, want)
	}
}
