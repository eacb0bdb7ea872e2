# openvia: build, install and test.
#   make                    release build (libvipl.so, libpvm3.so, viabench, viainfo, pvmd, pvm)
#   make install PREFIX=dir lays out bin/ lib/ include/ lib/pkgconfig/
#   make test               everything CI runs
#   make bench              openvia beside UCX, libfabric and the kernel (a table)
#   make bench-sock         viarun beside kernel TCP: sockperf, iperf3, redis
#   make report             every seed's figures as PNG + JSON and report/index.html
#                           (make report-quick: the same in a few minutes)
PREFIX ?= /usr/local
CARGO ?= cargo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
SOVERSION := 1
STAGE := $(CURDIR)/dist

.PHONY: all build install stage test test-deps test-rust test-c test-sock test-pvm test-man test-report clean bench bench-sock report report-quick

# Debian packages each job needs; scripts/ensure-packages.sh installs the
# missing ones as root, else names them and the command, and stops.
ENSURE := scripts/ensure-packages.sh
TEST_PKGS := gcc g++ make pkg-config python3 iproute2 nftables pvm pvm-dev pvm-examples man-db groff-base xvfb x11-apps x11-utils
BENCH_PKGS := ucx-utils libfabric-bin sockperf iperf3 redis-server redis-tools
SOCK_BENCH_PKGS := sockperf iperf3 redis-server redis-tools
REPORT_PKGS := python3-matplotlib
MAN1 := $(wildcard docs/man/*.1)
MAN7 := $(wildcard docs/man/*.7)

all: build

build:
	$(CARGO) build --release -p vipl -p viabench -p viainfo -p pvm3 -p openvia-pvm -p viaip -p viarun

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 target/release/viabench $(DESTDIR)$(PREFIX)/bin/viabench
	install -m 755 target/release/viainfo $(DESTDIR)$(PREFIX)/bin/viainfo
	install -m 755 target/release/libvipl.so $(DESTDIR)$(PREFIX)/lib/libvipl.so.$(SOVERSION)
	ln -sf libvipl.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libvipl.so
	install -m 644 include/vipl.h $(DESTDIR)$(PREFIX)/include/vipl.h
	install -m 755 target/release/libpvm3.so $(DESTDIR)$(PREFIX)/lib/libpvm3.so.3
	ln -sf libpvm3.so.3 $(DESTDIR)$(PREFIX)/lib/libpvm3.so
	install -m 755 target/release/pvmd $(DESTDIR)$(PREFIX)/bin/pvmd
	install -m 755 target/release/pvm $(DESTDIR)$(PREFIX)/bin/pvm
	install -m 755 target/release/viaip $(DESTDIR)$(PREFIX)/bin/viaip
	install -m 644 include/pvm3.h $(DESTDIR)$(PREFIX)/include/pvm3.h
	install -m 755 target/release/viarun $(DESTDIR)$(PREFIX)/bin/viarun
	install -m 755 target/release/libviarun.so $(DESTDIR)$(PREFIX)/lib/libviarun.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' vipl.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/vipl.pc
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(MAN7) $(DESTDIR)$(PREFIX)/share/man/man7/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' pvm3.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/pvm3.pc

# An installed tree inside the checkout, used by the C tests.
stage:
	$(MAKE) install PREFIX=$(STAGE)

test: test-deps test-rust test-c test-sock test-pvm test-man test-report

# viarun: TCP programs under viarun against themselves without it.
test-sock: test-deps stage
	tests/sock/run.sh $(STAGE)/bin

test-deps:
	@$(ENSURE) $(TEST_PKGS)

test-rust: test-deps
	$(CARGO) test --workspace

test-c: test-deps stage
	@# A C user's build line must work against the installed tree.
	cc -Wall -Wextra -Werror -o $(STAGE)/vnettest-pkgconfig examples/c/vnettest.c examples/c/vipl_example.c \
		$$(PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config --cflags --libs vipl)
	$(STAGE)/vnettest-pkgconfig -h >/dev/null 2>&1 || [ $$? -le 2 ]
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig tests/c/run.sh $(STAGE)/lib
	@# The same for a PVM program, against our pvm3.h and libpvm3.
	cc -Wall -Wextra -Werror -o $(STAGE)/pingpong-pkgconfig tests/pvm/pingpong.c \
		$$(PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config --cflags --libs pvm3)
	@# viainfo lists the shared-memory device and its JSON parses.
	$(STAGE)/bin/viainfo --json | python3 -c 'import json,sys; d=json.load(sys.stdin); \
		assert any(x["name"] == "/dev/via_lo" and x["attributes"] for x in d["devices"]), d'

# Every man page renders, without a warning from man or groff.
test-man: test-deps
	@for p in $(MAN1) $(MAN7); do \
		w=$$(MANWIDTH=80 man --warnings -l $$p 2>&1 >/dev/null) && [ -z "$$w" ] || \
		{ echo "man -l $$p: $${w:-failed}" >&2; exit 1; }; \
	done; echo "man pages: $(words $(MAN1) $(MAN7)) render"

# PVM 3 compatibility: our header against Debian's, and Debian's unmodified
# example binaries on our libpvm3.so.3 and pvmd (needs pvm, pvm-dev,
# pvm-examples).
test-pvm: test-deps build
	tests/pvm/abi_check.sh
	tests/pvm/run_examples.sh $(CURDIR)/target/release
	tests/pvm/getfds.sh $(CURDIR)/target/release
	tests/pvm/pvmd_death.sh $(CURDIR)/target/release
	tests/pvm/console_compare.sh $(CURDIR)/target/release
	tests/pvm/multihost.sh $(CURDIR)/target/release
	tests/pvm/mesh.sh $(CURDIR)/target/release

clean:
	$(CARGO) clean
	rm -rf $(STAGE) examples/c/build

# The main job: build, then openvia beside UCX, libfabric and the kernel.
bench: build
	@$(ENSURE) --optional "their rows will say so" $(BENCH_PKGS)
	python3 python/compare.py --viabench target/release/viabench
	@echo "Plots of every seed's figures: make report (5-15 min here, it states its own estimate; make report-quick: a few minutes)"

# viarun beside kernel TCP on this host, alternating rounds: sockperf
# ping-pong and iperf3 (tests/sock/bench.sh), then redis-server with
# redis-benchmark, every connection checked to be over shm
# (tests/sock/server_bench.sh), then one connection per request
# (tests/sock/conn_bench.sh).
bench-sock: build
	@$(ENSURE) $(SOCK_BENCH_PKGS)
	tests/sock/bench.sh target/release 5
	tests/sock/server_bench.sh target/release 5
	tests/sock/conn_bench.sh target/release 3

# Every seed's figures, regenerated here: report/index.html (python/report.py).
report: build
	@$(ENSURE) $(REPORT_PKGS)
	@$(ENSURE) --optional "their curves will be absent" $(BENCH_PKGS)
	python3 python/report.py

report-quick: build
	@$(ENSURE) $(REPORT_PKGS)
	@$(ENSURE) --optional "their curves will be absent" $(BENCH_PKGS)
	python3 python/report.py --quick

# The quick report into dist/report, then every figure it claims is
# checked: a valid PNG with its JSON (python/report_check.py).
test-report: test-deps build
	@$(ENSURE) $(REPORT_PKGS)
	@$(ENSURE) --optional "their curves will be absent" $(BENCH_PKGS)
	python3 python/report.py --quick --out $(STAGE)/report
	python3 python/report_check.py $(STAGE)/report
