// Package runner owns cellblock's in-jail Python runner and the daemon's side
// of its protocol (PROTOCOL.md): the embedded Python files
// (_cellblock_runner.py and the cellblock package, Files) that the daemon
// lays down read-only (rootfs.InstallFiles) and mounts at layout.RunnerDir
// in every jail, the message types, a strict frame reader, and the
// Collector that turns the runner's messages for one run into validated
// results (Value, Exception, Display).
//
// Everything the runner sends is untrusted: the user's code shares its
// process. The reader and the Collector bound every allocation by the run's
// Limits, replace what fails validation with a text/plain note, keep
// draining the channel after a limit is hit, and never panic. This package
// does not start jails or processes, does not write files, and does not
// log. It must not import the layers above it (the API, the rootfs store):
// what it shares with the API is in package wire, below both.
package runner
