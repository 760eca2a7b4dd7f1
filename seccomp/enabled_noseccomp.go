//go:build !(cgo && seccomp)

package seccomp

// Enabled reports whether seccomp support is compiled in. This build lacks
// cgo or the "seccomp" build tag, so libcontainer cannot load filters and
// the daemon must refuse to start.
const Enabled = false
