# Herald: build, test and benchmark entry points.
#   make deps        install the Debian packages Herald builds, tests and benchmarks with (idempotent)
#   make build       debug build
#   make release     release build as shipped: static Swift runtime, as make dist builds it (swift build -c release --static-swift-stdlib)
#   make dist        release tarball: static Swift runtime, LICENSE, docs, Deploy (.build/dist/herald-VERSION-linux-ARCH.tar.gz)
#   make dist-check  make dist, then check the tarball outside the tree: --version, no Swift runtime, mock-apns + send
#   make demo        the main job end to end: private redis-server, APNs emulator, 100,000 notifications
#   make test        deps, build (the tests start the herald binary), then swift test (the fault matrix's fast cells)
#   make matrix      the whole fault matrix (HERALD_MATRIX=full, ~2.5 min); its lines also go to .build/fault-matrix.txt
#   make bench-send  herald send vs h2load against one emulator (Benchmarks/send-vs-h2load.sh)
#   make bench-compare  h2load vs Herald's worker vs aioapns, latency sweep, 1 vs 2 workers (Benchmarks/compare.sh)
#   make bench-micro micro-benchmarks (Benchmarks/Package.swift, package-benchmark: time, mallocs)
#   make fuzz        libFuzzer targets (Tests/Fuzz), FUZZ_SECONDS each (default 60); fails on a crash
#   make api-fuzz    schemathesis (PyPI, in .build/api-fuzz-venv) against docs/api.openapi.yaml and a real
#                    `herald api` on a private redis-server; API_FUZZ_EXAMPLES per operation (default 100)
#   make bench-api   batch POST throughput of `herald api` with h2load (Benchmarks/api-throughput.sh)
#   make sanitize    the unit and integration tests under AddressSanitizer (.build-asan)
#   make alerts-test the Prometheus alert rules: promtool check and unit tests (Deploy/prometheus/alerts.test.yaml),
#                    and Deploy/validate.py's static checks of the deployment files
#   make clean       remove .build
# Variables: SWIFT (default swift), BENCH_ARGS (extra arguments for bench-send and bench-compare),
#   FUZZ_SECONDS (seconds per fuzz target), FUZZ_TARGETS (a subset, e.g. "FuzzJobDecoder").

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

SWIFT ?= swift
BENCH_ARGS ?=

# Debian packages: C libraries Herald links (nghttp2, OpenSSL, hiredis), the tools the
# tests and benchmarks start (redis-server, h2load/nghttp, nghttpd, openssl) and
# python3-cryptography for Benchmarks/tools/mint-jwt.py, python3-venv for the peer client's
# virtualenv (Benchmarks/.venv, aioapns from PyPI), prometheus for promtool (the alert rules'
# unit tests and `promtool check metrics` on a worker's scrape) and python3-yaml for
# Deploy/validate.py.
DEB_PACKAGES := libnghttp2-dev libssl-dev libhiredis-dev redis-server nghttp2-client \
	nghttp2-server pkg-config openssl python3-cryptography python3-venv prometheus python3-yaml

# sudo only when not root (CI and the dev machines run as root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps build release dist dist-check demo test matrix bench-send bench-compare bench-micro fuzz api-fuzz bench-api sanitize alerts-test clean

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' \
			|| missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then \
		echo "deps: all Debian packages present"; \
	else \
		echo "deps: installing$$missing"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

build: deps
	$(SWIFT) build

# The same flags as make dist: the binaries the demo and the benchmarks run are the shipped ones,
# and one build folder serves both (a flag change rebuilds everything). A static Swift runtime is
# also the faster one: calls into it skip the dynamic linker's PLT stubs (Benchmarks/README.md).
release: deps
	$(SWIFT) build -c release --static-swift-stdlib

# The release tarball. The Swift runtime and Foundation are linked statically
# (--static-swift-stdlib), so the binary needs only glibc, libstdc++ and the three C libraries'
# runtime packages (libnghttp2-14, libssl3, libhiredis0.14 on Debian bookworm). The archive is
# reproducible from one commit: sorted, owned by root, files dated at the commit's time.
# HERALD_COMMIT names the commit when there is no .git (see Plugins/BuildInfo).
VERSION := $(shell sed -n 's/.*static let string = "\(.*\)".*/\1/p' Sources/HeraldBuildInfo/HeraldVersion.swift)
DIST_ARCH := $(shell uname -m | sed 's/^aarch64$$/arm64/')
DIST_NAME := herald-$(VERSION)-linux-$(DIST_ARCH)
DIST_DIR := .build/dist
SWIFT_BACKTRACE_STATIC := $(shell dirname "$$(dirname "$$(readlink -f "$$(command -v $(SWIFT))")")")/libexec/swift/linux/swift-backtrace-static
dist: deps
	$(SWIFT) build -c release --static-swift-stdlib --product herald
	rm -rf $(DIST_DIR)/$(DIST_NAME) $(DIST_DIR)/$(DIST_NAME).tar.gz
	mkdir -p $(DIST_DIR)/$(DIST_NAME)/bin $(DIST_DIR)/$(DIST_NAME)/libexec/herald
	install -m 0755 "$$($(SWIFT) build -c release --static-swift-stdlib --show-bin-path)/herald" $(DIST_DIR)/$(DIST_NAME)/bin/herald
	# The backtracer, so a crash still prints a symbolicated backtrace (SWIFT_BACKTRACE, docs/operations.md).
	if [ -x "$(SWIFT_BACKTRACE_STATIC)" ]; then \
		install -m 0755 "$(SWIFT_BACKTRACE_STATIC)" $(DIST_DIR)/$(DIST_NAME)/libexec/herald/swift-backtrace-static; fi
	install -m 0644 LICENSE README.md CHANGELOG.md $(DIST_DIR)/$(DIST_NAME)/
	# Shell completion (flags, subcommands and the allowed values of --log-level, --environment, …).
	mkdir -p $(DIST_DIR)/$(DIST_NAME)/completions
	for shell in bash zsh fish; do \
		$(DIST_DIR)/$(DIST_NAME)/bin/herald --generate-completion-script $$shell > $(DIST_DIR)/$(DIST_NAME)/completions/herald.$$shell; done
	cp -R docs Deploy $(DIST_DIR)/$(DIST_NAME)/
	find $(DIST_DIR)/$(DIST_NAME) -name '__pycache__' -prune -exec rm -rf {} +
	mtime=$$(git log -1 --format=%ct 2>/dev/null || echo 0); \
	tar -C $(DIST_DIR) --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$$mtime \
		-cf - $(DIST_NAME) | gzip -n -9 > $(DIST_DIR)/$(DIST_NAME).tar.gz
	cd $(DIST_DIR) && sha256sum $(DIST_NAME).tar.gz > $(DIST_NAME).tar.gz.sha256
	@echo "dist: $(DIST_DIR)/$(DIST_NAME).tar.gz ($$(du -h $(DIST_DIR)/$(DIST_NAME).tar.gz | cut -f1))"

# What CI checks of the tarball (.ci/dist-check): unpacked in a temporary folder outside the
# tree, it starts, links no Swift runtime, and delivers one notification to its own emulator.
dist-check: dist
	bash .ci/dist-check $(DIST_DIR)/$(DIST_NAME).tar.gz

demo: release
	.build/release/herald demo

test: deps
	$(SWIFT) build
	$(SWIFT) test

# Every cell of the fault matrix (docs/reliability.md): real redis-server, emulator and worker
# binary per cell, one fault each; the slow cells (Redis stopped 10 s, every 403 reason, a halted
# app's recovery) run only here.
matrix: deps
	$(SWIFT) build --build-tests
	rm -f .build/fault-matrix.txt
	HERALD_MATRIX=full HERALD_MATRIX_REPORT=$(CURDIR)/.build/fault-matrix.txt $(SWIFT) test --skip-build --filter FaultMatrix
	@echo "figures: .build/fault-matrix.txt"

# The alert rules fire in the cases they are meant for and stay quiet in the others (promtool's
# rule unit tests on synthetic series); swift test runs the same (AlertRuleTests).
alerts-test: deps
	promtool check rules Deploy/prometheus/alerts.yaml
	promtool test rules Deploy/prometheus/alerts.test.yaml
	python3 Deploy/validate.py

bench-send: deps
	bash Benchmarks/send-vs-h2load.sh $(BENCH_ARGS)

bench-compare: deps
	bash Benchmarks/compare.sh $(BENCH_ARGS)

clean:
	rm -rf .build .build-asan Tests/Fuzz/.build

# The micro-benchmarks are a package of their own (Benchmarks/.build); the first build takes
# several minutes. `cd Benchmarks && swift package benchmark thresholds check` compares with
# Benchmarks/Thresholds/.
bench-micro: deps
	cd Benchmarks && $(SWIFT) package benchmark

# The fuzz targets are a package of their own (Tests/Fuzz/.build), built with -sanitize=fuzzer and
# AddressSanitizer; each runs FUZZ_SECONDS on a copy of its seed corpus (docs/reliability.md).
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) SWIFT=$(SWIFT) bash Tests/Fuzz/fuzz.sh

# schemathesis generates requests from docs/api.openapi.yaml and checks every answer against it
# (status, headers, JSON schema, no 5xx); Tests/APIFuzz/api-fuzz.sh starts Redis and the API.
API_FUZZ_EXAMPLES ?= 100
api-fuzz: deps
	$(SWIFT) build --product herald
	API_FUZZ_EXAMPLES=$(API_FUZZ_EXAMPLES) bash Tests/APIFuzz/api-fuzz.sh

bench-api: deps
	bash Benchmarks/api-throughput.sh $(BENCH_ARGS)

# The tests under AddressSanitizer, in a build folder of their own (.build-asan). The unit suites
# run with LeakSanitizer too, the tests' own scaffolding suppressed
# (Tests/Sanitizers/lsan-suppressions.txt). The integration suite runs without leak checks: it
# starts the sanitized herald binary (beside the test bundle, so it is built first), and
# LeakSanitizer would turn each exit into a failure over the process-lifetime objects still held.
SANITIZE_ENV := SWIFT_BACKTRACE=enable=no
sanitize: deps
	$(SWIFT) build --sanitize=address --scratch-path .build-asan
	$(SANITIZE_ENV) LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/Sanitizers/lsan-suppressions.txt \
		$(SWIFT) test --sanitize=address --scratch-path .build-asan --filter 'APNsTests|TransportTests|QueueTests'
	$(SANITIZE_ENV) ASAN_OPTIONS=detect_leaks=0 HERALD_UNDER_ASAN=1 \
		$(SWIFT) test --sanitize=address --scratch-path .build-asan --skip-build --filter IntegrationTests
