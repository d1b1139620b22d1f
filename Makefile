# wovyr — the two commands a newcomer needs:
#   make demo   installs what wovyr needs, builds it, certifies every backend
#               that works on this machine and runs a few invocations
#   make test   the whole test suite (as root; CI runs this via .ci/run)

export PATH := /usr/local/go/bin:/usr/local/bin:$(PATH)
GO      ?= go
STATE   ?= /var/lib/wovyr
WOVYR   := bin/wovyr --state-dir $(STATE) --guest $(CURDIR)/bin/wovyr-guest

.PHONY: all build deps demo cluster-demo test test-race bench soak soak-faults fuzz clean

all: build

deps:
	scripts/install-deps

# bin/wovyr-wasm is wovyr linked statically, for its wasm-exec inside any
# template: wasm at container/gVisor strength (backend/oci Config.WasmRunner).
# bin/wovyr-guest goes without symbols and DWARF (-s -w; panics still carry
# stacks), as the tests build it, so the microVM image `make` builds is the
# one the tests and benchmarks boot.
build:
	$(GO) build -o bin/wovyr ./cmd/wovyr
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/wovyr-guest ./cmd/wovyr-guest
	CGO_ENABLED=0 $(GO) build -o bin/wovyr-egressprobe ./egress/egresstest/egressprobe
	$(GO) build -tags osusergo,netgo -ldflags '-linkmode external -extldflags -static' -o bin/wovyr-wasm ./cmd/wovyr

demo: deps build
	scripts/demo $(STATE)

# Three nodes in two regions on loopback, each its own process and state
# dir (temporary), over an embedded three-server NATS cluster: a placement,
# a dispatch, a read through another node and a residency refusal.
cluster-demo: build
	scripts/cluster-demo

# The debootstrap base template the OCI tests run on, built once per machine
# from the Debian mirror (the tests themselves never touch the network).
TEST_STATE := /var/cache/wovyr-test/oci

test: deps build
	@test -d $(TEST_STATE)/images/base/rootfs || bin/wovyr --state-dir $(TEST_STATE) --guest $(CURDIR)/bin/wovyr-guest image build base
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 60m ./...
	cd sdk/python && WOVYR_BIN=$(CURDIR)/bin/wovyr python3 -m unittest
	cd sdk/typescript && WOVYR_BIN=$(CURDIR)/bin/wovyr node --test test/
	$(GO) test -count=1 -race -timeout 20m ./manager/... ./store/... ./agent/... ./pool/... ./autoscale/... ./sched/... ./snapshot/...
	scripts/fuzz 1000x

# Long runs kept out of `make test`, which runs a short pass of each:
# 100 microVM and 100 gVisor clones of one golden each, every reading
# distinct (BATTERY 87), and the soak with faults.
soak: deps build soak-faults
	WOVYR_SOAK_CLONES=100 $(GO) test -count=1 -timeout 30m -run TestClonesAreUnique -v ./backend/microvm/
	WOVYR_SOAK_CLONES=100 $(GO) test -count=1 -timeout 30m -run TestGVisorClonesAreUnique -v ./backend/oci/

# 10,000 invocations from 8 tenants over native, wasm, container and gVisor
# while the daemon is SIGKILLed 3 times (docs/RELIABILITY.md); it stops
# itself after at most 9 minutes of load. WOVYR_SOAK_SEED=N repeats a run.
soak-faults: deps build
	WOVYR_SOAK_FAULTS=full $(GO) test -count=1 -timeout 20m -run TestSoakWithFaults -v ./soak/

# Every fuzz target (scripts/fuzz lists them) for FUZZTIME each; make test
# runs a short pass of 1000 executions each, so the targets stay alive.
FUZZTIME ?= 30s
fuzz:
	scripts/fuzz $(FUZZTIME)

bench: build
	$(WOVYR) bench

clean:
	rm -rf bin
