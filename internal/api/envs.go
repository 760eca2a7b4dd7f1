package api

import "time"

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
}

// Validate checks the request's shape; it returns an *Error naming the
// field.
func (r *EnvBuildRequest) Validate() *Error {
	if len(r.Dependencies) == 0 {
		return Errorf(ErrBadRequest, "dependencies", "is required: name at least one requirement")
	}
	// The same rules as a run's dependencies and python.
	return (&RunRequest{Code: "\n", Dependencies: r.Dependencies, Python: r.Python}).Validate()
}

// EnvBuildResult answers an EnvBuildRequest.
type EnvBuildResult struct {
	Environment *Environment `json:"environment"`
	// Python is the interpreter version the environment is for.
	Python string `json:"python"`
	// DurationMs is how long the request took (the build, on a miss).
	DurationMs int64 `json:"duration_ms"`
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
