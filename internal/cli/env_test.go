package cli

import (
	"bytes"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

func TestPreloadFlag(t *testing.T) {
	var got []string
	fs := flag.NewFlagSet("env build", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(moduleListValue{&got}, "preload", "")
	if err := fs.Parse([]string{"--preload", "pandas, numpy", "--preload=matplotlib.pyplot"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"pandas", "numpy", "matplotlib.pyplot"}; !slices.Equal(got, want) {
		t.Errorf("--preload: %q, want %q", got, want)
	}
}

func TestEnvListShowsPreload(t *testing.T) {
	var b bytes.Buffer
	writeEnvList(&b, &api.EnvList{Envs: []api.EnvInfo{
		{ID: "a", Python: "3.12.1", LastUsed: time.Now(), Preload: []string{"pandas", "numpy"}},
		{ID: "b", Python: "3.12.1", LastUsed: time.Now(), Preload: []string{}},
	}})
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "PRELOAD") || !strings.Contains(lines[1], "pandas,numpy") || !strings.Contains(lines[2], " - ") {
		t.Errorf("env ls:\n%s", b.String())
	}
}
