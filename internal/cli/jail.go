package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/flagvalue"
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
	network           **api.Network
	secrets           *[]string
}

// runJail is the jail of a run request.
func runJail(r *api.RunRequest) jailFields {
	return jailFields{python: &r.Python, deps: &r.Dependencies, env: &r.Env,
		memory: &r.MemoryBytes, pids: &r.Pids, tmp: &r.TmpBytes, cpus: &r.CPUs, network: &r.Network, secrets: &r.Secrets}
}

// sessionJail is the jail of a session request.
func sessionJail(r *api.SessionRequest) jailFields {
	return jailFields{python: &r.Python, deps: &r.Dependencies, env: &r.Env,
		memory: &r.MemoryBytes, pids: &r.Pids, tmp: &r.TmpBytes, cpus: &r.CPUs, network: &r.Network, secrets: &r.Secrets}
}

// jailFlagNames are the flags addJailFlags defines, as usage lists them.
var jailFlagNames = []string{"python", "with", "env", "memory", "pids", "cpus", "tmp", "allow-net", "secret"}

// addJailFlags defines the flags that fix a jail on fs, storing into j.
func (inv *invocation) addJailFlags(fs *flag.FlagSet, j jailFields) {
	fs.StringVar(j.python, "python", "", "")
	fs.Var(flagvalue.List{P: j.deps}, "with", "")
	fs.Var(envValue{j.env, inv.lookupEnv}, "env", "")
	fs.Var(flagvalue.Size{P: j.memory}, "memory", "")
	fs.Var(flagvalue.Count{P: j.pids}, "pids", "")
	fs.Var(flagvalue.CPUs{P: j.cpus}, "cpus", "")
	fs.Var(flagvalue.Size{P: j.tmp}, "tmp", "")
	fs.Var(allowNetValue{j.network}, "allow-net", "")
	fs.Var(secretValue{j.secrets}, "secret", "")
}

// secretValue is --secret NAME: a secret of the daemon's the run may use.
type secretValue struct{ list *[]string }

func (v secretValue) String() string {
	if v.list == nil {
		return ""
	}
	return strings.Join(*v.list, " ")
}

func (v secretValue) Set(s string) error {
	if !api.ValidSecretName(s) {
		return fmt.Errorf("%q is not a secret's name, such as GITHUB_TOKEN", s)
	}
	*v.list = append(*v.list, s)
	return nil
}

// allowNetValue is --allow-net HOST:PORT: an entry of the request's
// network allowlist.
type allowNetValue struct{ network **api.Network }

func (v allowNetValue) String() string {
	if v.network == nil || *v.network == nil {
		return ""
	}
	return strings.Join((*v.network).Allow, " ")
}

func (v allowNetValue) Set(s string) error {
	if _, err := api.ParseNetPattern(s); err != nil {
		return err
	}
	if *v.network == nil {
		*v.network = &api.Network{}
	}
	(*v.network).Allow = append((*v.network).Allow, s)
	return nil
}

// flagsGiven lists which of names were given on the command line fs
// parsed, as --NAME, in the order of names.
func flagsGiven(fs *flag.FlagSet, names []string) []string {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var list []string
	for _, n := range names {
		if given[n] {
			list = append(list, "--"+n)
		}
	}
	return list
}

// checkSessionFlag checks the --session flag of the command line fs
// parsed, whose value is id: not empty when given, and alone, without the
// flags that fix a jail (fixed, the names of addJailFlags and any more the
// command has). A session's jail was fixed when it was created; the
// daemon refuses them too, but the command line says so first.
func checkSessionFlag(fs *flag.FlagSet, id string, fixed []string) error {
	if len(flagsGiven(fs, []string{"session"})) == 0 {
		return nil
	}
	if id == "" {
		return errors.New("--session: want a session ID (see 'cellblock session ls')")
	}
	if names := flagsGiven(fs, fixed); len(names) > 0 {
		return fmt.Errorf("%s cannot be used with --session: a session's Python, dependencies, environment, "+
			"limits, network and secrets are fixed when it is created (cellblock session new %s ...)", strings.Join(names, ", "), names[0])
	}
	return nil
}
