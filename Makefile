# isrlab — see README.md.
GO      ?= go
BIN     := bin/isrlab
PKGS    := ./...
# Fuzz targets run briefly in every test run; FUZZTIME raises it locally.
FUZZTIME ?= 10s

.PHONY: all build test run bench deps fuzz vet clean

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

clean:
	rm -rf bin
