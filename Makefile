# The README's two commands: `make run` and `make test`.
GO      ?= go
BIN     ?= ./bin/ledger
DB      ?= $(or $(LEDGER_DB),./var/ledger.db)
ADDR    ?= $(or $(LEDGER_ADDR),127.0.0.1:8080)
export CGO_ENABLED ?= 0
# The toolchain go.mod names (fetched from the module proxy once): the
# machine's default may be an older patch release with known vulnerabilities.
export GOTOOLCHAIN ?= go1.26.11

.PHONY: build run serve test test-short e2e bench bench-vs-base bench-tessera soak multiserver load load-short fuzz fuzz-short fuzz-ingest vet vulncheck device-bin clean mlx-deps mlx-alloc-lib lifecycle

build:
	@echo "building ./bin (the first build compiles the pure-Go SQLite: a few minutes on two cores)"
	$(GO) build -trimpath -o $(BIN) ./cmd/ledger
	$(GO) build -trimpath -o $(dir $(BIN))ledger-ref-adapter ./cmd/ledger-ref-adapter
	$(GO) build -trimpath -o $(dir $(BIN))ledger-load ./cmd/ledger-load

# The main job on the embedded SQLite default (see scripts/run.sh).
run: build
	LEDGER_BIN=$(BIN) LEDGER_DB=$(DB) LEDGER_ADDR=$(ADDR) ./scripts/run.sh

# Only the service, on the same database.
serve: build
	$(BIN) --db $(DB) serve --addr $(ADDR)

# The test command CI runs (.ci/run): every package, with the race detector.
# The full log goes to var/test.log; the summary lists failures and, loudly,
# every skipped test with its reason.
#
# Then the PostgreSQL pass: the API (web) and gates tests again, each on a
# fresh database of a throwaway cluster (LEDGER_TEST_STORE=postgres; the
# conformance suite, audit and two-server tests of ledger/postgres and
# cmd/ledger ran in the first pass). Without PostgreSQL (no initdb on PATH
# or in /usr/lib/postgresql/*/bin) it says loudly that it did not run; CI
# sets LEDGER_REQUIRE_POSTGRES=1, which fails instead.
PG_PACKAGES ?= ./web ./gates ./runs
test:
	@mkdir -p var
	@echo "go test -race ./... (full log: var/test.log; tail -f it to follow; about 8 minutes on two cores with a warm build cache, up to 22 from a cold one)"
	@CGO_ENABLED=1 $(GO) test -race -timeout 45m -v ./... >var/test.log 2>&1; rc=$$?; ./scripts/test-summary.sh var/test.log; \
	if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "PostgreSQL pass: LEDGER_TEST_STORE=postgres go test $(PG_PACKAGES) (full log: var/test-postgres.log)"; \
	  LEDGER_TEST_STORE=postgres $(GO) test -timeout 30m -v $(PG_PACKAGES) >var/test-postgres.log 2>&1 || rc=1; \
	  ./scripts/test-summary.sh var/test-postgres.log; \
	elif [ "$${LEDGER_REQUIRE_POSTGRES:-}" = 1 ]; then \
	  echo "!! LEDGER_REQUIRE_POSTGRES=1 but PostgreSQL is not installed (no initdb)"; rc=1; \
	else \
	  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	  echo "!! POSTGRESQL PASS SKIPPED: PostgreSQL is not installed (no initdb); the"; \
	  echo "!! API and gates tests ran on SQLite only. Install Debian's postgresql."; \
	  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	fi; exit $$rc

test-short:
	$(GO) test -short ./...

e2e: build
	LEDGER_BIN=$(BIN) ./scripts/e2e.sh

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

# Interleaved benchmark rounds of the working tree against BASE (ingest,
# proof, audit, readiness); prints median new/old ratios (scripts/bench-vs-base.sh).
BASE ?= 552dbca
ROUNDS ?= 4
bench-vs-base:
	./scripts/bench-vs-base.sh $(BASE) $(ROUNDS)

# The ledger against Tessera v1.0.4's POSIX log, interleaved (16, 64 and
# 256 closed-loop clients; acks/s, their ratios, server CPU per ack and
# disk per entry; scripts/bench-vs-tessera.sh). bench/tessera is a module
# of its own, so the ledger's module does not depend on tessera. Short:
# make bench-tessera DURATION=15s ROUNDS=2.
bench-tessera:
	./scripts/bench-vs-tessera.sh

# Crash soak: 200 rounds of SIGKILL and SIGTERM restarts under appends,
# and the shared-database race (CI runs 20 rounds of each through make test).
soak:
	LEDGER_CRASH_ROUNDS=200 $(GO) test -run 'TestCrashDurability|TestDiskFull' -count 1 -timeout 60m -v ./cmd/ledger
	LEDGER_RACE_ROUNDS=400 $(GO) test -run TestSharedDatabaseNoFalseAlarm -count 1 -timeout 30m -v ./ledger/sqlite

# Two `ledger serve` on one PostgreSQL, 16 writers each, SIGKILL of either at
# random moments, for 60 s (make test runs 15 s of it).
multiserver:
	LEDGER_MULTI_SECONDS=60 LEDGER_REQUIRE_POSTGRES=1 $(GO) test -run TestTwoServersOnePostgres -count 1 -timeout 20m -v ./cmd/ledger

# The lifecycle model test, long: LIFECYCLE_SEEDS seeded random sequences of
# LIFECYCLE_STEPS steps (every leaf-writing operation, through a real server
# and the --db CLI) on SQLite and on PostgreSQL, the invariants checked every
# 50 steps (make test runs 300 steps of one seed per store). A failure prints
# the seed and a shrunk sequence to replay (cmd/ledger/lifecycle_test.go).
LIFECYCLE_STEPS ?= 1500
LIFECYCLE_SEEDS ?= 2
lifecycle:
	LEDGER_LIFECYCLE_STEPS=$(LIFECYCLE_STEPS) LEDGER_LIFECYCLE_SEEDS=$(LIFECYCLE_SEEDS) LEDGER_LIFECYCLE_CHECK=50 $(GO) test -run TestLifecycle -count 1 -timeout 180m -v ./cmd/ledger

# Load: 64 writers + 64 readers against a real server (scripts/load.sh),
# 20 s writers alone then 60 s mixed; LOAD_CHECK=1 fails on a missed target.
load: build
	LEDGER_BIN=$(BIN) LEDGER_LOAD_BIN=$(dir $(BIN))ledger-load ./scripts/load.sh

# The short load run CI does: any error answer fails it.
load-short: build
	LEDGER_BIN=$(BIN) LEDGER_LOAD_BIN=$(dir $(BIN))ledger-load LOAD_WRITERS=8 LOAD_READERS=8 LOAD_ALONE=3s LOAD_DURATION=5s ./scripts/load.sh

# The record decoders' and the ingest route's fuzz targets for 30 s each.
fuzz:
	GO="$(GO)" FUZZTIME=30s FUZZ_ONLY='/ledger FuzzPrepareEvidence$$|/web FuzzPostEvidence$$|/ingest Fuzz' ./scripts/fuzz-short.sh

# Each ingest decoder's fuzz target in turn for FUZZTIME each (CI runs them
# through fuzz-short, which lists every Fuzz* target).
fuzz-ingest:
	GO="$(GO)" FUZZTIME=$(FUZZTIME) FUZZ_ONLY='/ingest Fuzz' ./scripts/fuzz-short.sh

# Every Fuzz* target of the repository for FUZZTIME each (CI runs this after
# `make test`); targets are listed by `go test -list`, so a new fuzzer runs
# without being named here. scripts/fuzz-short.sh says which failures it
# tries again (Go 1.26's -fuzztime boundary race) and which end the run.
FUZZTIME ?= 5s
fuzz-short:
	GO="$(GO)" FUZZTIME=$(FUZZTIME) ./scripts/fuzz-short.sh

# A static linux/amd64 binary for the GPU device machine (no cgo).
device-bin:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o .devbin/ledger ./cmd/ledger
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o .devbin/ledger-ref-adapter ./cmd/ledger-ref-adapter

# MLX's CPU backend for `ledger run --impl mlx-cpu` and the adapters tests:
# the wheels pinned (version and sha256) in adapters/mlx/requirements-cpu.txt
# are downloaded into var/mlx-cpu/wheels (kept: the evidence pins their
# digests) and installed from there, with no other package, into
# var/mlx-cpu/site (--target: the system Python is left alone, PEP 668).
MLX_DIR ?= var/mlx-cpu
PYTHON  ?= python3
mlx-deps:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --require-hashes -r adapters/mlx/requirements-cpu.txt -d $(MLX_DIR)/wheels
	$(PYTHON) -m pip install --quiet --no-index --no-deps --only-binary=:all: --require-hashes --upgrade --find-links $(MLX_DIR)/wheels --target $(MLX_DIR)/site -r adapters/mlx/requirements-cpu.txt
	$(PYTHON) -c "import sys; sys.path.insert(0, '$(MLX_DIR)/site'); import mlx.core as mx; print('mlx', mx.__version__, mx.default_device())"

# The native half of the MLX allocator adapter (adapters/mlx/ledger_mlx_alloc.cpp):
# allocation traffic and counter readings in MLX's own allocator, built against
# the headers and libmlx.so of the wheels `make mlx-deps` installed.
CXX ?= g++
mlx-alloc-lib: $(MLX_DIR)/lib/libledger_mlx_alloc.so
$(MLX_DIR)/lib/libledger_mlx_alloc.so: adapters/mlx/ledger_mlx_alloc.cpp $(MLX_DIR)/site/mlx/lib/libmlx.so
	mkdir -p $(MLX_DIR)/lib
	$(CXX) -std=c++20 -O2 -fPIC -shared -pthread -I$(MLX_DIR)/site/mlx/include adapters/mlx/ledger_mlx_alloc.cpp -L$(MLX_DIR)/site/mlx/lib -lmlx -Wl,-rpath,'$$ORIGIN/../site/mlx/lib' -o $@

clean:
	rm -rf ./bin ./.devbin

# Known-vulnerability check (scripts/vulncheck.sh: offline database when
# vuln.go.dev is unreachable).
vulncheck:
	./scripts/vulncheck.sh
