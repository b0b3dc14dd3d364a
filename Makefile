# Loadout build. `make test` is the README's test command and what CI runs.
GO        ?= go
BIN       ?= bin/loadout
# Every policies/NAME/main.go is a built-in (policies/builtin lists them by
# kind, and its test checks the two agree).
POLICIES  := $(notdir $(patsubst %/main.go,%,$(wildcard policies/*/main.go)))
WASM_DIR  := policies/builtin/wasm
WASM      := $(addprefix $(WASM_DIR)/,$(addsuffix .wasm,$(POLICIES)))
# go-nvml's C header marks functions Loadout does not call as deprecated.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Tests talk to real processes on 2 cores: keep package parallelism low.
TESTFLAGS ?= -p 2 -timeout 20m
# The policy SDK is a module of its own (sdk/go.mod), reached from here by
# import path; the example policy is a third module, as an operator's is.
SDK       := github.com/loadout-dev/loadout/sdk/...
# The backend plugin protocol is a module of its own too (plugins/go.mod),
# so a backend plugin's module graph holds nothing of the host's (wazero,
# SQLite, NVML); the root module replaces it with ./plugins.
PLUGINS   := github.com/loadout-dev/loadout/plugins/...
# Go example modules. The modules `loadout policy new` writes and the C
# policy (examples/lru-c) are built, vetted, staticchecked and run through
# their scenarios by cmd/loadout's tests (TestPolicyNew_*, TestCPolicy_*).
EXAMPLES  := examples/lru
# Example backend plugin modules: each requires the plugins module alone.
BACKEND_EXAMPLES := examples/llamacpp-python

# The policy SDK and its module graph, embedded by internal/sdksource so
# `loadout policy new` writes a module that builds offline against the SDK
# this binary was built with.
SDK_ZIP   := internal/sdksource/archive/sdk.zip

.PHONY: build policies test vet lint bench clean soak examples

build: policies $(SDK_ZIP)
	$(GO) build -trimpath -o $(BIN) ./cmd/loadout

$(SDK_ZIP): $(shell find sdk -type f) internal/sdksource/pack.go
	$(GO) run ./internal/sdksource/gen sdk $@

# Built-in policies: Go main packages compiled to wasip1 reactor modules and
# embedded into the binary by policies/builtin.
policies: $(WASM)

$(WASM_DIR)/%.wasm: $(shell find policies sdk -name '*.go' -not -name '*_test.go') go.mod
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared -trimpath -o $@ ./policies/$*

test: policies vet examples
	$(GO) test $(TESTFLAGS) ./... $(SDK) $(PLUGINS)
	# The run loop's rule 1 (all scheduling state on one goroutine) is
	# checked by the race detector.
	$(GO) test $(TESTFLAGS) -race ./host/router ./host/proxy

vet: policies
	$(GO) vet ./... $(SDK) $(PLUGINS)
	GOOS=wasip1 GOARCH=wasm $(GO) vet $(SDK) ./policies/...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

lint: vet
	staticcheck ./... $(SDK) $(PLUGINS)
	for d in $(EXAMPLES) $(BACKEND_EXAMPLES); do (cd $$d && staticcheck ./...) || exit 1; done

# Each example policy module builds against the SDK alone (its module graph
# holds no wazero, gRPC or go-plugin), passes its own tests, compiles to a
# policy module and passes `loadout policy check`.
examples: build
	@for d in $(EXAMPLES); do \
	  echo "example $$d"; \
	  (cd $$d && $(GO) vet ./... && $(GO) test -count=1 ./... && \
	   GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared -trimpath -o $(CURDIR)/bin/$$(basename $$d).wasm .) || exit 1; \
	  if (cd $$d && $(GO) list -m all) | grep -E 'wazero|google.golang.org/grpc|hashicorp/go-plugin'; then \
	    echo "$$d: the module graph pulls in host dependencies"; exit 1; fi; \
	  $(BIN) policy check bin/$$(basename $$d).wasm >/dev/null || exit 1; \
	done
	# Each example backend module builds against the plugins module alone
	# (its module graph holds no host module, wazero, SQLite or NVML),
	# passes go vet and its own tests (the llama-cpp-python ones skip
	# without it, unless LOADOUT_REQUIRE_LLAMACPP=1) and passes
	# `loadout backend check`.
	@for d in $(BACKEND_EXAMPLES); do \
	  echo "example $$d"; \
	  (cd $$d && $(GO) vet ./... && $(GO) test -count=1 ./... && \
	   $(GO) build -trimpath -o $(CURDIR)/bin/$$(basename $$d) .) || exit 1; \
	  if (cd $$d && $(GO) list -m all) | grep -E 'wazero|modernc.org/sqlite|go-nvml|github.com/loadout-dev/loadout( |$$)'; then \
	    echo "$$d: the module graph pulls in host dependencies"; exit 1; fi; \
	  $(BIN) backend check bin/$$(basename $$d) >/dev/null || exit 1; \
	done

bench: policies
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin $(WASM) $(SDK_ZIP)

# The soak (cmd/loadout/soak_test.go, build tag soak): mixed traffic with
# faults for SOAK_DURATION, on loopback, then the end-of-run checks and
# figures. Not part of `make test`. E.g. `make soak SOAK_DURATION=2m`.
SOAK_DURATION ?= 10m
soak: policies
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags soak -p 1 -count=1 -timeout 60m -v -run '^TestSoak_' ./cmd/loadout
