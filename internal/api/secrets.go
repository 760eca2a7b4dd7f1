package api

import (
	"fmt"
	"strings"
)

// Secrets are credentials the operator declared (cellblockd --secret NAME=FILE,
// --secret-host NAME=PATTERN, --secret-allow-uid NAME=UID). A run or
// session asks for them by name; its program then finds in the variable
// NAME a placeholder, random for the run, and the daemon's proxy puts the
// value in place of the placeholder only in requests to the secret's hosts.
// The value itself never enters the jail.

// Bounds of a request's secrets.
const (
	// MaxSecrets is the most secrets one request may ask for.
	MaxSecrets = 16
	// MaxSecretName is the longest secret name.
	MaxSecretName = 64
)

// DenialSecret is the kind of a denial of a request that carried a
// secret's placeholder where the secret may not go.
const DenialSecret = "secret"

// Reasons of a secret denial (Denial.Reason): a closed set.
const (
	// DenySecretHost: a request to a host the secret is not bound to
	// carried its placeholder.
	DenySecretHost = "secret_host"
	// DenySecretPlainHTTP: a request over plain HTTP carried a
	// placeholder; values go only over TLS.
	DenySecretPlainHTTP = "secret_plain_http"
)

// Outcomes of a secret's use (SecretUse.Outcome), and the metrics' labels.
const (
	// SecretInjected: the request went to the secret's host with the value
	// in place of the placeholder.
	SecretInjected = "injected"
	// SecretRefused: the request carried the placeholder where the secret
	// may not go and was refused (a denial of kind DenialSecret).
	SecretRefused = "refused"
	// SecretRedacted: a response carried the value, and the program got
	// the placeholder in its place (metrics only).
	SecretRedacted = "redacted"
)

// SecretOutcomes lists every outcome, for metrics.
var SecretOutcomes = []string{SecretInjected, SecretRefused, SecretRedacted}

// SecretUse is one kind of request that used a secret during a run: which
// secret, where, and what came of it, counted. It never holds the value.
type SecretUse struct {
	Secret string `json:"secret"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Method string `json:"method"`
	// Path is the request's path, without its query, cut to
	// MaxSecretUsePath bytes.
	Path string `json:"path"`
	// Status is the response's status, 403 for a refused request, 502
	// when the host could not be reached.
	Status  int    `json:"status"`
	Outcome string `json:"outcome"`
	Count   int    `json:"count"`
}

// MaxSecretUsePath bounds SecretUse.Path.
const MaxSecretUsePath = 200

// SecretInfo is one declared secret as Info shows it to root: its name,
// hosts and grants, never its value.
type SecretInfo struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
	// AllowUIDs may ask for it besides root.
	AllowUIDs []uint32 `json:"allow_uids"`
}

// ValidSecretName reports whether name may name a secret: an environment
// variable name (letters, digits and '_', not starting with a digit) of
// at most MaxSecretName bytes.
func ValidSecretName(name string) bool {
	return len(name) <= MaxSecretName && validEnvName(name)
}

// secretReserved are variables the jail sets itself, which a secret may
// not be named: the program would lose them (the proxy's, the CA bundle's,
// the interpreter's).
var secretReserved = map[string]bool{
	"USER": true, "LOGNAME": true, "LANG": true, "TMPDIR": true, "MPLBACKEND": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true, "PIP_PROXY": true,
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "REQUESTS_CA_BUNDLE": true, "CURL_CA_BUNDLE": true,
	"PIP_CERT": true, "NODE_EXTRA_CA_CERTS": true, "GIT_SSL_CAINFO": true,
}

// ReservedSecretName reports whether name is a variable the jail sets
// itself, which no secret may be named.
func ReservedSecretName(name string) bool {
	up := strings.ToUpper(name)
	return reservedEnv[name] || secretReserved[up] || strings.HasPrefix(up, "LD_") ||
		strings.HasPrefix(up, "CELLBLOCK_") || strings.HasPrefix(up, "PYTHON")
}

// validateSecrets checks a request's secrets: names, no repeats, none
// also set by env (the placeholder is the variable's value).
func validateSecrets(names []string, env map[string]string) *Error {
	if len(names) > MaxSecrets {
		return Errorf(ErrBadRequest, "secrets", "has %d entries; the maximum is %d", len(names), MaxSecrets)
	}
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		field := fmt.Sprintf("secrets[%d]", i)
		switch {
		case !ValidSecretName(n):
			return Errorf(ErrBadRequest, field, "%.80q is not a secret name (a variable name such as GITHUB_TOKEN)", n)
		case seen[n]:
			return Errorf(ErrBadRequest, field, "%s is listed twice", n)
		}
		if _, ok := env[n]; ok {
			return Errorf(ErrBadRequest, field, "%s is also set in env: the secret's placeholder is that variable's value", n)
		}
		seen[n] = true
	}
	return nil
}
