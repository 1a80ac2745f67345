# isrlab — see README.md.
GO      ?= go
BIN     := bin/isrlab
PKGS    := ./...
# Fuzz targets run briefly in every test run; FUZZTIME raises it locally.
FUZZTIME ?= 10s

.PHONY: all build test run broker-demo bench soak deps fuzz vet clean

all: build

deps:
	@scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/isrlab

vet:
	$(GO) vet $(PKGS)

# Tests that run isrlab processes use the binary just built.
test: deps build vet
	ISRLAB_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 18m $(PKGS)
	@scripts/fuzz.sh $(FUZZTIME)

fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

# run is the main job on the embedded default: the quickstart matrix (acks1
# and safe under a leader kill and a leader cut from the coordinators, each
# a 3+3 cluster in network namespaces), ending with the table and the
# results path. broker-demo is the single-broker smoke test with kcat.
run: deps build
	$(BIN) matrix quickstart

broker-demo: deps build
	@scripts/broker-demo.sh

bench: deps build
	@scripts/bench.sh

# soak repeats the leader-kill experiment (acks=1 vs acks=all) SOAK times.
SOAK ?= 20
soak: build
	ISRLAB_SOAK=$(SOAK) $(GO) test ./broker -run TestSoakLeaderKill -v -count=1 -timeout 60m | grep -E '^soak|^(ok|FAIL|---)'

clean:
	rm -rf bin
