package cli

import (
	"flag"

	"github.com/cellblock/cellblock/internal/api"
)

// jailFields points at the fields of a request that fix a jail: the
// interpreter, the dependencies, the environment and the limits that a
// session sets once for all its runs. cellblock run, session new and repl
// take the same flags for them, parsed the same way (addJailFlags).
type jailFields struct {
	python            *string
	deps              *[]string
	env               *map[string]string
	memory, pids, tmp *int64
	cpus              *float64
}

// runJail is the jail of a run request.
func runJail(r *api.RunRequest) jailFields {
	return jailFields{python: &r.Python, deps: &r.Dependencies, env: &r.Env,
		memory: &r.MemoryBytes, pids: &r.Pids, tmp: &r.TmpBytes, cpus: &r.CPUs}
}

// sessionJail is the jail of a session request.
func sessionJail(r *api.SessionRequest) jailFields {
	return jailFields{python: &r.Python, deps: &r.Dependencies, env: &r.Env,
		memory: &r.MemoryBytes, pids: &r.Pids, tmp: &r.TmpBytes, cpus: &r.CPUs}
}

// jailFlagNames are the flags addJailFlags defines, as usage lists them.
var jailFlagNames = []string{"python", "with", "env", "memory", "pids", "cpus", "tmp"}

// addJailFlags defines the flags that fix a jail on fs, storing into j.
func (inv *invocation) addJailFlags(fs *flag.FlagSet, j jailFields) {
	fs.StringVar(j.python, "python", "", "")
	fs.Var(listValue{j.deps}, "with", "")
	fs.Var(envValue{j.env, inv.lookupEnv}, "env", "")
	fs.Var(sizeValue{j.memory}, "memory", "")
	fs.Var(countValue{j.pids}, "pids", "")
	fs.Var(cpusValue{j.cpus}, "cpus", "")
	fs.Var(sizeValue{j.tmp}, "tmp", "")
}
