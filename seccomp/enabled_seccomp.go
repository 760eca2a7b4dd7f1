//go:build cgo && seccomp

package seccomp

// Enabled reports whether seccomp support is compiled in. libcontainer can
// load filters only when built with cgo and the "seccomp" build tag; the
// daemon refuses to start when this is false.
const Enabled = true
