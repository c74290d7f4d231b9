# agentbox — see README.md. `make demo` and `make test` each do all the set-up
# they need on a fresh Debian 12 machine (as root, with Go ≥ 1.26).

GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# Fuzz budget per target in `make test`: a count of inputs (-fuzztime Nx),
# about 10 s each on a 2-core host. A count, not a duration: Go 1.26's
# fuzzing coordinator can fail a timed run that found nothing with a bare
# "context deadline exceeded" (a race at the deadline, golang/go#75804;
# seen in CI). `make fuzz FUZZTIME=5m` for longer runs (one budget for all).
FUZZTIME ?=
fuzzbudget = $(or $(FUZZTIME),$(1))

.PHONY: all build deps host-setup test-image demo test unit fuzz bench clean nix-check proto proto-check

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/agentbox ./cmd/agentbox
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o bin/agentbox-guest ./cmd/agentbox-guest
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/agentbox-policy ./cmd/agentbox-policy

# Every Go module the build and the tests need, from the Go module proxy into
# the module cache (an empty one too): what runs after it may be offline, as
# the vendor-hash check is (GOPROXY=off). Then the npm packages of the MCP
# tests (the MCP Inspector, the TypeScript MCP SDK), exactly as
# tests/mcp/package-lock.json pins them, into tests/mcp/node_modules, and
# the E2B SDK of the E2B tests as tests/e2b/package-lock.json pins it.
deps:
	$(GO) mod download
	$(GO) mod verify
	cd tests/mcp && npm ci --no-audit --no-fund
	cd tests/e2b && npm ci --no-audit --no-fund

# Debian packages, qemu.conf, virtlogd and libvirtd (tests/host-setup.sh).
host-setup:
	@tests/host-setup.sh

# Build (or reuse from the cache) the TCG test image; prints its directory.
# Set AGENT_BIN=path to use a prebuilt guest agent instead of building it.
test-image:
	@tests/image/build.sh

# The main job: a Python script in a fresh VM summarises Debian's release
# history (distro-info-data's debian.csv, passed on stdin).
demo: host-setup build
	@img=$$(tests/image/build.sh | tail -n1) && \
	echo "+ agentbox run -v --image $$img -- python3 -c \"\$$(cat tests/demo/debian_summary.py)\" < /usr/share/distro-info/debian.csv" >&2 && \
	time bin/agentbox run -v --image "$$img" -- python3 -c "$$(cat tests/demo/debian_summary.py)" < /usr/share/distro-info/debian.csv

# The Nix side without nixpkgs (tests/nix/check.sh): every .nix parses,
# flake.lock pins nixpkgs, the Go vendorHash matches, and the image builder
# is byte-for-byte reproducible. Needs nix-bin (host-setup installs it).
nix-check: deps
	@tests/nix/check.sh

# Regenerate the Go code of envd's .proto files into vmctl/envd/gen
# (vmctl/envd/proto/README.md); commit the result.
proto:
	@vmctl/envd/proto/gen.sh

# Fail when the committed vmctl/envd/gen is not what the .proto files
# generate ("run make proto").
proto-check:
	@vmctl/envd/proto/gen.sh --check

# Everything: the Nix checks, the generated code's staleness, vet, unit
# tests with -race, short fuzz runs, and the tests that boot real guests
# under TCG. Skips for missing host features are failures; -count=1
# because guest tests depend on the host, which Go's cache ignores.
test: host-setup deps
	@$(MAKE) --no-print-directory nix-check
	@$(MAKE) --no-print-directory proto-check
	@img=$$(tests/image/build.sh | tail -n1) && \
	himg=$$(AGENT_TAGS=hostile tests/image/build.sh | tail -n1) && \
	$(GO) vet ./... && \
	$(MAKE) --no-print-directory fuzz && \
	AGENTBOX_TEST_STRICT=1 AGENTBOX_TEST_IMAGE="$$img" AGENTBOX_TEST_HOSTILE_IMAGE="$$himg" $(GO) test -race -count=1 -timeout 45m ./...

# Unit tests only: the layout checks (tests/layout) and every package of
# the module except the black-box suites
# under tests/ and GUEST_PKGS, the packages with tests that boot a guest
# (libvirt, AGENTBOX_TEST_IMAGE, which fails such a test when unset), build
# real Nix profiles, or change the host as root (netns, nftables, taps).
# A new package is a unit package unless it is added to GUEST_PKGS. Unit
# tests that need root or a host tool (qemu-img, mke2fs) but change nothing
# outside their temp dirs stay in, and skip with a reason without it
# (testenv.SkipOrFail: a failure under CI or AGENTBOX_TEST_STRICT).
GUEST_PKGS := cmd/agentbox vmctl/daemon vmctl/envd vmctl/libvirt vmctl/network vmctl/profile vmctl/sandbox
MODULE      = $(shell $(GO) list -m)
UNIT_PKGS   = $(MODULE)/tests/layout $(filter-out $(MODULE)/tests/% $(addprefix $(MODULE)/,$(GUEST_PKGS)),$(shell $(GO) list ./...))

unit:
	$(if $(strip $(UNIT_PKGS)),,$(error make unit: `$(GO) list ./...` listed no package))
	$(GO) test -race $(UNIT_PKGS)

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(call fuzzbudget,250000x) ./vmctl/agentproto
	$(GO) test -run '^$$' -fuzz '^FuzzReadHello$$' -fuzztime $(call fuzzbudget,250000x) ./vmctl/agentproto
	$(GO) test -run '^$$' -fuzz '^FuzzParseNetworkConfig$$' -fuzztime $(call fuzzbudget,200000x) ./vmctl/agentproto
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(call fuzzbudget,40000x) ./vmctl/image
	$(GO) test -run '^$$' -fuzz '^FuzzCreateRequest$$' -fuzztime $(call fuzzbudget,12000x) ./vmctl/apiserver
	$(GO) test -run '^$$' -fuzz '^FuzzRoutes$$' -fuzztime $(call fuzzbudget,20000x) ./vmctl/apiserver
	$(GO) test -run '^$$' -fuzz '^FuzzControlPlane$$' -fuzztime $(call fuzzbudget,30000x) ./vmctl/e2b

# Benchmarks against raw QEMU and qemu-ga (tests/bench); figures on stdout.
bench: host-setup build
	@img=$$(tests/image/build.sh | tail -n1) && \
	$(GO) run ./tests/bench --image "$$img" --agentbox bin/agentbox

clean:
	rm -rf bin
