# The README's two commands: `make run` and `make test`.
GO      ?= go
BIN     ?= ./bin/ledger
DB      ?= $(or $(LEDGER_DB),./var/ledger.db)
ADDR    ?= $(or $(LEDGER_ADDR),127.0.0.1:8080)
export CGO_ENABLED ?= 0

.PHONY: build run serve test test-short e2e bench soak fuzz fuzz-ingest vet device-bin clean

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/ledger
	$(GO) build -trimpath -o $(dir $(BIN))ledger-ref-adapter ./cmd/ledger-ref-adapter

# The main job on the embedded SQLite default (see scripts/run.sh).
run: build
	LEDGER_BIN=$(BIN) LEDGER_DB=$(DB) LEDGER_ADDR=$(ADDR) ./scripts/run.sh

# Only the service, on the same database.
serve: build
	$(BIN) --db $(DB) serve --addr $(ADDR)

# The test command CI runs (.ci/run): every package, with the race detector.
test:
	CGO_ENABLED=1 $(GO) test -race -timeout 45m ./...

test-short:
	$(GO) test -short ./...

e2e: build
	LEDGER_BIN=$(BIN) ./scripts/e2e.sh

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

soak:
	LEDGER_CRASH_ROUNDS=200 $(GO) test -run TestCrashDurability -count 1 -v ./cmd/ledger

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzPrepareEvidence -fuzztime 30s ./ledger
	$(GO) test -run '^$$' -fuzz FuzzPostEvidence -fuzztime 30s ./web
	$(MAKE) fuzz-ingest FUZZTIME=30s

# Each ingest decoder's fuzz target in turn (CI runs it with FUZZTIME=5s).
FUZZTIME ?= 5s
fuzz-ingest:
	for f in FuzzJUnit FuzzGoTest FuzzStatement FuzzDSSE FuzzBundle FuzzDetect; do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./ingest || exit 1; \
	done

# A static linux/amd64 binary for the GPU device machine (no cgo).
device-bin:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o .devbin/ledger ./cmd/ledger
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o .devbin/ledger-ref-adapter ./cmd/ledger-ref-adapter

clean:
	rm -rf ./bin ./.devbin
