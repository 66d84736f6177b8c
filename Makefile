# peerd — see README.md.
GO      ?= go
BIN     := bin/peerd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PREFIX  ?= /usr/local

.PHONY: build run test check race e2e vet lint fuzz bench soak chaos cover ci install man clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/peerd

# Runs peerd on its embedded default: a direct proxy on 127.0.0.1:3128,
# admin API on 127.0.0.1:3180.
run: build
	./$(BIN)

# The whole suite with the race detector, end-to-end tests included (they
# build the real binary; the real-Squid ones need squid on PATH).
test:
	$(GO) test -race -count=1 -parallel 4 -timeout 20m ./...

race: test

# What a contributor runs before every commit (about 2 minutes): lint, every
# package's unit tests, and the fast end-to-end subset below (the binary,
# its CLI, config checks, access rules, metrics and the monitoring pack).
# make test is still the gate: it runs everything with the race detector.
E2E_FAST := TestCLI|TestReadyz|TestOperatorMetrics|TestMonitoring|TestRoutesTiersAndRules|TestRulesOnRequestFields|TestTraceContext|TestExtraBytesNeverAnswer|TestCheck|TestEmbeddedDefault
check: lint
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e '/test$$' -e '/test/chaos$$') ./test/chaos
	$(GO) test -count=1 -run '^($(E2E_FAST))' ./test/

e2e:
	$(GO) test -race -count=1 -parallel 4 -timeout 20m ./test/...

vet:
	$(GO) vet ./...

lint: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) tool staticcheck ./...
	@out="$$($(GO) tool deadcode -test ./...)"; test -z "$$out" || (echo "$$out"; echo "deadcode: unreachable functions"; exit 1)

# Short fuzz runs of every target, as DIR:FuzzName (TestMakeFuzzRunsEveryTarget
# checks that none is missing); a release wants each for 10 minutes or more
# (FUZZTIME=10m make fuzz). .ci/fuzz1 fails a run only on a finding.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	internal/h1:FuzzRequest \
	internal/h1:FuzzResponse \
	selection:FuzzPlanner \
	cmd/peerd/internal/config:FuzzParseConfig \
	cmd/peerd/internal/handover:FuzzStateFrame \
	admin:FuzzStateBody \
	cache:FuzzHTTPDate \
	cache:FuzzRange \
	cache:FuzzCacheControl \
	cache:FuzzStoredResponse \
	cache:FuzzObjectFile \
	cache:FuzzSegment \
	cache:FuzzDiskImage \
	cache:FuzzHeadFile \
	cache:FuzzJournalRecord \
	cache:FuzzDecodeHead \
	forwarding:FuzzProxyStatus \
	internal/nexthop:FuzzRead \
	cmd/peerd/internal/squidimport:FuzzImportSquid \
	fleet:FuzzDecode \
	fleet:FuzzForgedVerdicts \
	fleet:FuzzMemberField \
	access:FuzzCanonicalHost \
	internal/match:FuzzCanonicalURL \
	icp:FuzzParse \
	auth:FuzzParseBasic \
	auth:FuzzHtpasswd
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "== $$t"; \
		GO=$(GO) .ci/fuzz1 -run XXX -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) ./$${t%%:*}/ || exit 1; \
	done

# Micro-benchmarks, then the comparison against direct and Squid.
bench:
	$(GO) test -run XXX -bench . -benchmem ./peers/ ./selection/ ./forwarding/
	$(GO) run ./bench

# Faults, reloads and load for SOAK (default 10m): nothing lost, nothing
# sent twice, nothing leaked.
SOAK ?= 10m
soak:
	$(GO) run ./bench/soak -d $(SOAK)

# A seeded fault schedule across every feature at once, with invariants
# checked on every exchange (test/chaos): make chaos SEED=7 DURATION=60s.
# A failing seed names the same faults again.
SEED ?= 1
DURATION ?= 60s
chaos:
	$(GO) run ./test/chaos -seed $(SEED) -d $(DURATION)

# Unit coverage of the forwarding engine (its tests use synctest and an
# injected network; the end-to-end tests are not counted).
cover:
	$(GO) test -count=1 -coverprofile=/tmp/peerd-forwarding.cov ./forwarding/
	$(GO) tool cover -func=/tmp/peerd-forwarding.cov | tail -1

ci: lint test

# The binary and the manual pages under PREFIX, the example config and the
# systemd unit at their system paths, all under DESTDIR (a package root).
# The config may hold the admin token, the fleet key and parent logins: it
# is 0640, group peerd (made here on a real install; a package's scripts
# make it under DESTDIR), which the unit's dynamic user takes by name. An
# existing /etc/peerd/peerd.toml is the operator's and is never replaced
# (as a package keeps a changed conffile): the example goes beside it as
# peerd.toml.example, always. The unit runs the binary at PREFIX.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/peerd
	install -D -m 0644 man/peerd.8 $(DESTDIR)$(PREFIX)/share/man/man8/peerd.8
	install -D -m 0644 man/peerd.toml.5 $(DESTDIR)$(PREFIX)/share/man/man5/peerd.toml.5
	install -D -m 0640 etc/peerd.toml $(DESTDIR)/etc/peerd/peerd.toml.example
	@if [ -e $(DESTDIR)/etc/peerd/peerd.toml ]; then \
		echo "make install: $(DESTDIR)/etc/peerd/peerd.toml exists and is kept; the new example is $(DESTDIR)/etc/peerd/peerd.toml.example"; \
	else \
		install -m 0640 etc/peerd.toml $(DESTDIR)/etc/peerd/peerd.toml; \
	fi
	@if [ -z "$(DESTDIR)" ] && ! getent group peerd >/dev/null 2>&1; then groupadd --system peerd; fi
	@for f in peerd.toml peerd.toml.example; do \
		chgrp peerd $(DESTDIR)/etc/peerd/$$f 2>/dev/null || echo "make install: no group peerd here: $(DESTDIR)/etc/peerd/$$f stays 0640 root:root until it is given to group peerd"; \
	done
	install -d -m 0755 $(DESTDIR)/lib/systemd/system
	sed 's|/usr/local/bin/peerd|$(PREFIX)/bin/peerd|g' etc/peerd.service > $(DESTDIR)/lib/systemd/system/peerd.service
	chmod 0644 $(DESTDIR)/lib/systemd/system/peerd.service

# peerd.toml(5) is made from the configuration reference (a test checks it
# is up to date).
man:
	$(GO) run ./internal/manpage/mkman docs/configuration.md man/peerd.toml.5

clean:
	rm -rf bin
