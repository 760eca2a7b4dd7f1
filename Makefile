# cellblock: `sudo make demo` runs a real sandboxed script; `sudo make test`
# runs every test. Both install what they need on a Debian/Ubuntu host.

GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/cellblock/cellblock/internal/daemon.Version=$(VERSION)
# The daemon needs cgo and libcontainer's seccomp support (fail closed
# without it); everything else is pure Go.
DAEMON_ENV  := CGO_ENABLED=1
DAEMON_TAGS := seccomp
TESTFLAGS   ?=

.PHONY: all deps build unit integration test demo bench fmt vet clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(DAEMON_ENV) $(GO) build -tags $(DAEMON_TAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/cellblockd ./cmd/cellblockd
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/cellblock ./cmd/cellblock
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/cellblock-mcp ./cmd/cellblock-mcp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/cellblock-init ./cmd/cellblock-init

# Unit tests: no root needed, fast. Root-only tests in these packages skip
# with a reason when not root.
unit: deps
	$(DAEMON_ENV) $(GO) test -tags $(DAEMON_TAGS) $(TESTFLAGS) $$($(GO) list ./... | grep -v /integration)

# The root suite: the real daemon over the real socket, real jails.
integration: build
	$(DAEMON_ENV) $(GO) test -tags $(DAEMON_TAGS) -count=1 -timeout 40m -v $(TESTFLAGS) ./integration/... 2>&1 | scripts/summarize-tests.sh

# Every test. Run as root (sudo make test); without root the privileged
# tests report that they were skipped and why.
test: unit integration

demo: build
	@scripts/demo.sh

bench: build
	@scripts/install-deps.sh bench
	$(DAEMON_ENV) $(GO) run -tags $(DAEMON_TAGS) ./integration/bench -bin $(BIN)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(DAEMON_ENV) $(GO) vet -tags $(DAEMON_TAGS) ./...

clean:
	rm -rf $(BIN)
