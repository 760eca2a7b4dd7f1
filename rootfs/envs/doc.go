// Package envs owns the cache of dependency environments: directories of
// installed Python packages that a run's jail mounts read-only over its
// rootfs's empty site-packages directory.
//
// An environment is identified by its key (see Spec.ID): a hash of the
// interpreter's version and ABI, the normalized and sorted requirements,
// where packages come from (index URL, find-links directories, no-index)
// and the install policy. The same key always names the same directory, so
// every run with the same requirements on the same interpreter shares one
// environment, and no run can change what another sees:
//
//	<dir>/<id>/meta.json          what was asked for and what got installed
//	<dir>/<id>/site-packages/     the packages, mounted read-only into runs
//	<dir>/.build-<id>-*/          a build in progress (swept on Open)
//	<dir>/.trash-*/               an environment being deleted (swept on Open)
//
// A build goes into a temporary directory, which the caller's BuildFunc
// fills (the daemon runs the installer in a build jail that can write only
// there); the store then reads what was installed, makes the tree
// root-owned and read-only (directories 0555, files 0444 or 0555) and
// renames it into place, so an environment is complete or absent.
// Concurrent requests for one key share one build. The size of all
// environments is kept under a budget by evicting the least recently used
// ones, never one that a run holds (a Lease). The last use of an
// environment is its directory's modification time, set on every Acquire,
// so that the order survives a restart.
//
// The package does not run installers, mount anything or decide where
// packages come from: the daemon does, and hands the result in. Its key,
// requirement and eviction logic is plain code tested without privileges.
package envs
