# isrlab — see README.md.
GO      ?= go
BIN     := bin/isrlab
PKGS    := ./...
# isrlab version prints what these stamp: the nearest tag (devel without
# one) and the commit. VERSION=v0.3.0 make release names a release.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell rev=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$rev || echo $$rev-dirty; })
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# make release builds these, static (no cgo), into dist/ with SHA256SUMS.
RELEASE_PLATFORMS := linux/amd64 linux/arm64
# Fuzz targets run briefly in every test run (5 s each: 16 targets, with
# their builds, take about 3 minutes of make test's 20); FUZZTIME raises it
# locally.
FUZZTIME ?= 5s
TESTFLAGS := -count=1 -timeout 18m

.PHONY: all build release image install-check test run broker-demo bench bench-scale soak deps fuzz vet hygiene flake clean incident

all: build

# deps installs what the tests need (every group of scripts/deps.sh);
# DEPS="core source" narrows it.
deps:
	@scripts/deps.sh $(DEPS)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/isrlab

# release: dist/isrlab-VERSION-linux-ARCH for each of RELEASE_PLATFORMS,
# static and stripped of local paths, and their SHA256SUMS (sha256sum -c
# checks them).
release:
	@rm -rf dist && mkdir -p dist
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=dist/isrlab-$(VERSION)-$$os-$$arch; \
		echo "release: $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o $$out ./cmd/isrlab; \
	done
	@cd dist && sha256sum isrlab-* > SHA256SUMS && cat SHA256SUMS

# image: the isrlab:VERSION container image, from a static binary and no
# base image (scripts/image.sh says what each backend needs to run in it).
image:
	@mkdir -p dist
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o dist/isrlab-image ./cmd/isrlab
	@scripts/image.sh dist/isrlab-image $(VERSION)

# install-check: go install github.com/isrlab/isrlab/cmd/isrlab@VERSION
# works for HEAD (served from a local file proxy, no network); minutes.
install-check:
	@GO=$(GO) scripts/install-check.sh

# vet: go vet, then staticcheck's unused check (U1000: functions, types
# and fields nothing uses), fetched from the module proxy on first use.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) -checks U1000 $(PKGS)

# hygiene fails on an untidy go.mod/go.sum, an unformatted file or a vet finding.
hygiene:
	@GO=$(GO) scripts/hygiene.sh

# Tests that run isrlab processes use the binary just built.
test: deps build hygiene
	ISRLAB_BIN=$(CURDIR)/$(BIN) $(GO) test $(TESTFLAGS) $(PKGS)
	@scripts/fuzz.sh $(FUZZTIME)

# flake runs test's go test N times (HOG=1: beside two busy loops; HOG=3 only
# run 3) and lists every test that failed in any run; the runs are in flake/.
N ?= 5
flake: deps build
	@GO=$(GO) N=$(N) HOG=$(HOG) TESTFLAGS="$(TESTFLAGS)" ISRLAB_BIN=$(CURDIR)/$(BIN) scripts/flake.sh $(PKGS)

fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

# run is the main job on the embedded default: the quickstart matrix (acks1
# and safe under a leader kill and a leader cut from the coordinators, each
# a 3+3 cluster in network namespaces), ending with the table and the
# results path; it installs only what that needs (deps.sh core source).
# broker-demo is the single-broker smoke test with kcat.
run: DEPS = core source
run: deps build
	$(BIN) matrix quickstart --parallel 2

broker-demo: deps build
	@scripts/broker-demo.sh

# incident plays the ISR shrink/expand incident (a binlog topic's ISR
# churn collapsing throughput) against its mitigations
# (scenarios/matrices/isr-churn.yaml: 5 cells of about 90 s each) and writes
# its report next to the matrix's table: report.md, and a metrics.svg in
# every cell's run directory (docs/incidents/isr-churn.md). It exits with
# the matrix's status, after writing the report either way.
RESULTS ?= results
incident: DEPS = core source
incident: deps build
	@status=0; $(BIN) matrix isr-churn --results $(RESULTS) || status=$$?; \
	$(BIN) series --svg --markdown $(RESULTS)/matrices/isr-churn/latest/report.md $(RESULTS)/matrices/isr-churn/latest || exit 255; \
	exit $$status

bench: DEPS = core source bench
bench: deps build
	@scripts/bench.sh

# bench-scale is only the scale set of bench (docs/PERFORMANCE.md, "Scale"):
# clusters of 1,000-10,000 partitions, which take minutes each.
bench-scale: deps build
	@scripts/bench.sh scale

# soak repeats the leader-kill experiment (acks=1 vs acks=all) SOAK times.
SOAK ?= 20
soak: build
	ISRLAB_SOAK=$(SOAK) $(GO) test ./broker -run TestSoakLeaderKill -v -count=1 -timeout 60m | grep -E '^soak|^(ok|FAIL|---)'

clean:
	rm -rf bin dist

# compat-sarama runs IBM/sarama's own functional suite (go test -tags
# functional, v1.61.1) against a 5-broker isrlab cluster behind toxiproxy on
# loopback, as the suite's docker-compose.yml lays Kafka out
# (docs/compatibility.md, "sarama's functional suite"). RUN=regexp narrows it.
.PHONY: compat-sarama
compat-sarama: build
	ISRLAB_BIN=$(CURDIR)/$(BIN) scripts/compat-sarama.sh
