# peerd — see README.md.
GO      ?= go
BIN     := bin/peerd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PREFIX  ?= /usr/local

.PHONY: build run test race e2e vet lint fuzz bench soak ci install clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/peerd

# Runs peerd on its embedded default: a direct proxy on 127.0.0.1:3128,
# admin API on 127.0.0.1:3180.
run: build
	./$(BIN)

# The whole suite with the race detector, end-to-end tests included (they
# build the real binary; the real-Squid ones need squid on PATH).
test:
	$(GO) test -race -count=1 -timeout 20m ./...

race: test

e2e:
	$(GO) test -race -count=1 -timeout 20m ./test/...

vet:
	$(GO) vet ./...

lint: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) tool staticcheck ./...
	@out="$$($(GO) tool deadcode -test ./...)"; test -z "$$out" || (echo "$$out"; echo "deadcode: unreachable functions"; exit 1)

# Short fuzz runs; a release wants each target for 10 minutes or more
# (FUZZTIME=10m make fuzz).
FUZZTIME ?= 30s
FUZZ1    := GO=$(GO) .ci/fuzz1
fuzz:
	$(FUZZ1) -run XXX -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./internal/h1/
	$(FUZZ1) -run XXX -fuzz '^FuzzResponse$$' -fuzztime $(FUZZTIME) ./internal/h1/
	$(FUZZ1) -run XXX -fuzz FuzzPlanner -fuzztime $(FUZZTIME) ./selection/
	$(FUZZ1) -run XXX -fuzz FuzzParseConfig -fuzztime $(FUZZTIME) ./cmd/peerd/
	$(FUZZ1) -run XXX -fuzz FuzzStateBody -fuzztime $(FUZZTIME) ./admin/
	$(FUZZ1) -run XXX -fuzz '^FuzzHTTPDate$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzRange$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzCacheControl$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzStoredResponse$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzObjectFile$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzJournalRecord$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzDecodeHead$$' -fuzztime $(FUZZTIME) ./cache/
	$(FUZZ1) -run XXX -fuzz '^FuzzProxyStatus$$' -fuzztime $(FUZZTIME) ./forwarding/
	$(FUZZ1) -run XXX -fuzz '^FuzzImportSquid$$' -fuzztime $(FUZZTIME) ./cmd/peerd/
	$(FUZZ1) -run XXX -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./fleet/
	$(FUZZ1) -run XXX -fuzz '^FuzzForgedVerdicts$$' -fuzztime $(FUZZTIME) ./fleet/
	$(FUZZ1) -run XXX -fuzz '^FuzzCanonicalHost$$' -fuzztime $(FUZZTIME) ./access/
	$(FUZZ1) -run XXX -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./icp/
	$(FUZZ1) -run XXX -fuzz '^FuzzParseBasic$$' -fuzztime $(FUZZTIME) ./auth/
	$(FUZZ1) -run XXX -fuzz '^FuzzHtpasswd$$' -fuzztime $(FUZZTIME) ./auth/

# Micro-benchmarks, then the comparison against direct and Squid.
bench:
	$(GO) test -run XXX -bench . -benchmem ./peers/ ./selection/ ./forwarding/
	$(GO) run ./bench

# Faults, reloads and load for SOAK (default 10m): nothing lost, nothing
# sent twice, nothing leaked.
SOAK ?= 10m
soak:
	$(GO) run ./bench/soak -d $(SOAK)

ci: lint test

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/peerd
	install -D -m 0644 etc/peerd.toml $(DESTDIR)/etc/peerd/peerd.toml
	install -D -m 0644 etc/peerd.service $(DESTDIR)/lib/systemd/system/peerd.service

clean:
	rm -rf bin
