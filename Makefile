# isrlab — see README.md.
GO      ?= go
BIN     := bin/isrlab
PKGS    := ./...
# Fuzz targets run briefly in every test run; FUZZTIME raises it locally.
FUZZTIME ?= 10s

.PHONY: all build test run bench soak deps fuzz vet clean

all: build

deps:
	@scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/isrlab

vet:
	$(GO) vet $(PKGS)

test: deps build vet
	$(GO) test -count=1 -timeout 15m $(PKGS)
	@scripts/fuzz.sh $(FUZZTIME)

fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

run: deps build
	@scripts/run.sh

bench: deps build
	@scripts/bench.sh

# soak repeats the leader-kill experiment (acks=1 vs acks=all) SOAK times.
SOAK ?= 20
soak: build
	ISRLAB_SOAK=$(SOAK) $(GO) test ./broker -run TestSoakLeaderKill -v -count=1 -timeout 60m | grep -E '^soak|^(ok|FAIL|---)'

clean:
	rm -rf bin
