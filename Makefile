# cellblock: `sudo make demo` runs a real sandboxed script; `sudo make test`
# runs every test. Both install what they need on a Debian/Ubuntu host
# (`make deps`); `make build` and `make unit` install nothing and need no
# root, only gcc, libseccomp-dev and pkg-config already there.

GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/cellblock/cellblock/internal/daemon.Version=$(VERSION)
# The daemon needs cgo and libcontainer's seccomp support (fail closed
# without it); everything else is pure Go.
DAEMON_ENV  := CGO_ENABLED=1
DAEMON_TAGS := seccomp
TESTFLAGS   ?=
# How long `make fuzz` runs each fuzz target.
FUZZTIME    ?= 150000x
# `make check` installs this staticcheck release (2026.2.2, the newest, built
# for Go 1.26) into bin/tools/staticcheck-<version>/ from the Go module proxy
# once, and reuses it after that. It is a tool, not a requirement of the
# build, so it is not in go.mod.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

# Where `make install` puts things; DESTDIR stages into another root.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
SYSCONFDIR  ?= /etc
DESTDIR     ?=

.PHONY: all deps build unit check fuzz integration test demo bench fmt vet clean install uninstall vmtest clustertest image

all: build

# The Debian packages building and testing need (scripts/install-deps.sh):
# installs the missing ones as root, fails naming them otherwise. demo, test,
# integration, vmtest and bench list it first (make goes through
# prerequisites in order); build and unit do not.
deps:
	@scripts/install-deps.sh

build:
	$(DAEMON_ENV) $(GO) build -tags $(DAEMON_TAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/cellblockd ./cmd/cellblockd
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS) -X github.com/cellblock/cellblock/internal/cli.Version=$(VERSION)' -o $(BIN)/cellblock ./cmd/cellblock
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS) -X github.com/cellblock/cellblock/internal/mcpserver.Version=$(VERSION)' -o $(BIN)/cellblock-mcp ./cmd/cellblock-mcp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/cellblock-init ./cmd/cellblock-init

# Unit tests: no root needed, fast. Root-only tests in these packages skip
# with a reason when not root.
unit:
	$(DAEMON_ENV) $(GO) test -tags $(DAEMON_TAGS) $(TESTFLAGS) $$($(GO) list ./... | grep -v /integration)

# Static checks, each with and without the seccomp build tag where the tag
# changes the files compiled: go vet, gofmt, go.mod tidiness, staticcheck.
check: $(STATICCHECK)
	$(DAEMON_ENV) $(GO) vet ./...
	$(DAEMON_ENV) $(GO) vet -tags $(DAEMON_TAGS) ./...
	@files=$$(gofmt -l .) && [ -z "$$files" ] || { echo "gofmt -l: not formatted (make fmt):"; echo "$$files"; exit 1; }
	$(GO) mod tidy -diff
	$(DAEMON_ENV) $(STATICCHECK) ./...
	$(DAEMON_ENV) $(STATICCHECK) -tags $(DAEMON_TAGS) ./...

$(STATICCHECK):
	GOBIN=$(abspath $(dir $@)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Each fuzz target for FUZZTIME, starting from its seed corpus. A count of
# inputs, not a duration: Go 1.26's fuzzing coordinator can fail a
# duration's end with "context deadline exceeded" when its workers are
# starved of CPU (golang/go#75804, fixed in 1.27); a count has no deadline.
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRunRequest$$' -fuzztime=$(FUZZTIME) ./internal/server
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeFastAgrees$$' -fuzztime=$(FUZZTIME) ./internal/server
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/pep723

# The root suite: the real daemon over the real socket, real jails.
integration: deps build
	$(DAEMON_ENV) $(GO) test -tags $(DAEMON_TAGS) -count=1 -timeout 40m -v $(TESTFLAGS) $$($(GO) list ./integration/... | grep -v '/integration/vm\|/integration/cluster') 2>&1 | scripts/summarize-tests.sh

# The cgroup v2 proof: boots a pure cgroup v2 kernel under qemu (TCG) and
# runs the real daemon and jails inside it (integration/vm). Root; 1 to 2
# minutes. It installs qemu and fetches Debian's kernel when it can.
vmtest: deps build
	@[ "$$(id -u)" -ne 0 ] || scripts/install-deps.sh vm
	$(GO) test -count=1 -timeout 20m -v $(TESTFLAGS) ./integration/vm/... 2>&1 | scripts/summarize-tests.sh

# The deployment of deploy/kubernetes on one machine (integration/cluster):
# two nodes in network namespaces of their own, running the node image
# under podman as the DaemonSet runs it, and the shipped HAProxy
# configuration in front of them. Root; it installs podman, haproxy and
# debootstrap. About 3 minutes, the first run 3 more for debootstrap.
clustertest: deps build
	@[ "$$(id -u)" -ne 0 ] || scripts/install-deps.sh cluster
	$(GO) test -count=1 -timeout 20m -v $(TESTFLAGS) ./integration/cluster/... 2>&1 | scripts/summarize-tests.sh

# The node image (deploy/kubernetes/image) built here without a registry:
# localhost/cellblock-node:dev in podman's store. Root.
image: build
	@scripts/install-deps.sh cluster
	deploy/kubernetes/image/build-local.sh localhost/cellblock-node:dev

# Every test. Run as root (sudo make test); without root the privileged
# tests report that they were skipped and why.
test: deps unit fuzz integration vmtest clustertest

demo: deps build
	@scripts/demo.sh

bench: deps build
	@scripts/install-deps.sh bench
	$(DAEMON_ENV) $(GO) run -tags $(DAEMON_TAGS) ./integration/bench -bin $(BIN)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(DAEMON_ENV) $(GO) vet -tags $(DAEMON_TAGS) ./...

clean:
	rm -rf $(BIN)

# The binaries (cellblock-init beside cellblockd, where the daemon looks for
# it), the systemd units with the paths filled in, the sysusers.d drop-in
# for the group "cellblock" and, unless there is one, the default config.
# It starts nothing: see docs/operations.md.
install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(SYSCONFDIR)/default
	install -m 0755 $(BIN)/cellblockd $(BIN)/cellblock $(BIN)/cellblock-mcp $(BIN)/cellblock-init $(DESTDIR)$(BINDIR)/
	for u in cellblockd.service cellblockd.socket; do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -m 0644 deploy/sysusers.d/cellblock.conf $(DESTDIR)$(SYSUSERSDIR)/cellblock.conf
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/default/cellblockd ]; then \
		echo "keeping the existing $(DESTDIR)$(SYSCONFDIR)/default/cellblockd"; \
	else \
		install -m 0644 deploy/default/cellblockd $(DESTDIR)$(SYSCONFDIR)/default/cellblockd; \
	fi

# Removes what install put there except the config (and the state in
# /var/lib/cellblock).
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,cellblockd cellblock cellblock-mcp cellblock-init)
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,cellblockd.service cellblockd.socket)
	rm -f $(DESTDIR)$(SYSUSERSDIR)/cellblock.conf
