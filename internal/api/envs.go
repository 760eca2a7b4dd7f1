package api

import (
	"fmt"
	"strings"
	"time"
)

// Paths of the dependency environment API.
const (
	// PathEnvs: GET lists environments, POST builds one (EnvBuildRequest).
	PathEnvs = "/v1/envs"
	// PathEnvsPrune: POST deletes every environment no run uses.
	PathEnvsPrune = "/v1/envs/prune"
	// DELETE PathEnvs + "/" + ID deletes one environment.
)

// EnvBuildRequest asks the daemon to build an environment ahead of the
// runs that will use it (or to find it, when it exists).
type EnvBuildRequest struct {
	// Dependencies are PEP 508 requirements (required).
	Dependencies []string `json:"dependencies"`
	// Python picks the interpreter by version prefix; empty means the
	// default one. An environment belongs to one interpreter version.
	Python string `json:"python,omitempty"`
	// Preload names modules (dotted, such as "pandas" or
	// "matplotlib.pyplot") that prestarted jails of this environment
	// import while they wait for their run. Absent or null leaves the
	// environment's list as it is; a list, even an empty one, replaces
	// it. It is not part of the environment's key: the packages are the
	// same. A run request cannot name modules to preload.
	Preload []string `json:"preload"`
}

// Bounds of a preload list.
const (
	// MaxPreload is the most modules one environment preloads.
	MaxPreload = 64
	// MaxModuleName is the longest module name, dots included.
	MaxModuleName = 128
)

// ValidModuleName reports whether name is a module name a preload list
// may hold: ASCII identifiers joined by dots.
func ValidModuleName(name string) bool {
	if name == "" || len(name) > MaxModuleName {
		return false
	}
	for _, part := range strings.Split(name, ".") {
		if part == "" || part[0] >= '0' && part[0] <= '9' {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// NormalizePreload checks a preload list and returns it without
// repeats, in its order (the order modules are imported in). An invalid
// one is an *Error naming field or its entry.
func NormalizePreload(field string, mods []string) ([]string, *Error) {
	if mods == nil {
		return nil, nil
	}
	if len(mods) > MaxPreload {
		return nil, Errorf(ErrBadRequest, field, "has %d modules; the maximum is %d", len(mods), MaxPreload)
	}
	out := make([]string, 0, len(mods))
	seen := make(map[string]bool, len(mods))
	for i, m := range mods {
		if !ValidModuleName(m) {
			return nil, Errorf(ErrBadRequest, fmt.Sprintf("%s[%d]", field, i),
				"%.140q is not a module name such as pandas or matplotlib.pyplot (dotted identifiers, at most %d characters)", m, MaxModuleName)
		}
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// Validate checks the request's shape; it returns an *Error naming the
// field.
func (r *EnvBuildRequest) Validate() *Error {
	if len(r.Dependencies) == 0 {
		return Errorf(ErrBadRequest, "dependencies", "is required: name at least one requirement")
	}
	// The same rules as a run's dependencies and python.
	if err := (&RunRequest{Code: "\n", Dependencies: r.Dependencies, Python: r.Python}).Validate(); err != nil {
		return err
	}
	_, err := NormalizePreload("preload", r.Preload)
	return err
}

// EnvBuildResult answers an EnvBuildRequest.
type EnvBuildResult struct {
	Environment *Environment `json:"environment"`
	// Python is the interpreter version the environment is for.
	Python string `json:"python"`
	// DurationMs is how long the request took (the build, on a miss).
	DurationMs int64 `json:"duration_ms"`
	// Preload is the environment's preload list after the request.
	Preload []string `json:"preload"`
}

// EnvInfo describes one cached environment.
type EnvInfo struct {
	ID string `json:"id"`
	// Python and ABI are the interpreter's version and SOABI.
	Python string `json:"python"`
	ABI    string `json:"abi"`
	// Requirements are the requirements in normal form, sorted.
	Requirements []string  `json:"requirements"`
	Policy       string    `json:"policy"`
	Installer    string    `json:"installer"`
	Packages     []Package `json:"packages"`
	SizeBytes    int64     `json:"size_bytes"`
	Built        time.Time `json:"built"`
	LastUsed     time.Time `json:"last_used"`
	// InUse is how many runs hold the environment now.
	InUse int `json:"in_use"`
	// Preload are the modules its prestarted jails import while they
	// wait (EnvBuildRequest.Preload); empty when none.
	Preload []string `json:"preload"`
}

// EnvList is the body of GET PathEnvs.
type EnvList struct {
	Envs        []EnvInfo `json:"envs"`
	TotalBytes  int64     `json:"total_bytes"`
	BudgetBytes int64     `json:"budget_bytes"`
}

// EnvRemoveResult answers DELETE PathEnvs/ID and POST PathEnvsPrune.
type EnvRemoveResult struct {
	Removed    []EnvInfo `json:"removed"`
	FreedBytes int64     `json:"freed_bytes"`
}
