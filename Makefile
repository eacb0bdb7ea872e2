# openvia: build, install and test.
#   make                    release build (libvipl.so, viabench)
#   make install PREFIX=dir lays out bin/ lib/ include/ lib/pkgconfig/
#   make test               everything CI runs
PREFIX ?= /usr/local
CARGO ?= cargo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
SOVERSION := 1
STAGE := $(CURDIR)/dist

.PHONY: all build install stage test test-rust test-c test-pvm clean bench

all: build

build:
	$(CARGO) build --release -p vipl -p viabench -p pvm3 -p openvia-pvm

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 target/release/viabench $(DESTDIR)$(PREFIX)/bin/viabench
	install -m 755 target/release/libvipl.so $(DESTDIR)$(PREFIX)/lib/libvipl.so.$(SOVERSION)
	ln -sf libvipl.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libvipl.so
	install -m 644 include/vipl.h $(DESTDIR)$(PREFIX)/include/vipl.h
	install -m 755 target/release/libpvm3.so $(DESTDIR)$(PREFIX)/lib/libpvm3.so.3
	ln -sf libpvm3.so.3 $(DESTDIR)$(PREFIX)/lib/libpvm3.so
	install -m 755 target/release/pvmd $(DESTDIR)$(PREFIX)/bin/pvmd
	install -m 755 target/release/pvm $(DESTDIR)$(PREFIX)/bin/pvm
	install -m 644 include/pvm3.h $(DESTDIR)$(PREFIX)/include/pvm3.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' vipl.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/vipl.pc

# An installed tree inside the checkout, used by the C tests.
stage:
	$(MAKE) install PREFIX=$(STAGE)

test: test-rust test-c test-pvm

test-rust:
	$(CARGO) test --workspace

test-c: stage
	@# A C user's build line must work against the installed tree.
	cc -Wall -Wextra -Werror -o $(STAGE)/vnettest-pkgconfig examples/c/vnettest.c examples/c/vipl_example.c \
		$$(PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config --cflags --libs vipl)
	$(STAGE)/vnettest-pkgconfig -h >/dev/null 2>&1 || [ $$? -le 2 ]
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig tests/c/run.sh $(STAGE)/lib

# PVM 3 compatibility: our header against Debian's, and Debian's unmodified
# example binaries on our libpvm3.so.3 and pvmd (needs pvm, pvm-dev,
# pvm-examples).
test-pvm: build
	tests/pvm/abi_check.sh
	tests/pvm/run_examples.sh $(CURDIR)/target/release
	tests/pvm/pvmd_death.sh $(CURDIR)/target/release
	tests/pvm/console_compare.sh $(CURDIR)/target/release
	tests/pvm/multihost.sh $(CURDIR)/target/release
	tests/pvm/mesh.sh $(CURDIR)/target/release

clean:
	$(CARGO) clean
	rm -rf $(STAGE) examples/c/build

# The main job: build, then openvia beside UCX, libfabric and the kernel.
bench: build
	@command -v ucx_perftest >/dev/null && command -v fi_pingpong >/dev/null || \
		{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		  apt-get update -qq && apt-get install -y -qq ucx-utils libfabric-bin >/dev/null; } || \
		echo "note: ucx-utils/libfabric-bin missing; their rows will say so"
	python3 python/compare.py --viabench target/release/viabench
