# openvia: build, install and test.
#   make                    release build (libvipl.so, viabench)
#   make install PREFIX=dir lays out bin/ lib/ include/ lib/pkgconfig/
#   make test               everything CI runs
PREFIX ?= /usr/local
CARGO ?= cargo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
SOVERSION := 1
STAGE := $(CURDIR)/dist

.PHONY: all build install stage test test-rust test-c clean

all: build

build:
	$(CARGO) build --release -p vipl -p viabench

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 target/release/viabench $(DESTDIR)$(PREFIX)/bin/viabench
	install -m 755 target/release/libvipl.so $(DESTDIR)$(PREFIX)/lib/libvipl.so.$(SOVERSION)
	ln -sf libvipl.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libvipl.so
	install -m 644 include/vipl.h $(DESTDIR)$(PREFIX)/include/vipl.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' vipl.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/vipl.pc

# An installed tree inside the checkout, used by the C tests.
stage:
	$(MAKE) install PREFIX=$(STAGE)

test: test-rust test-c

test-rust:
	$(CARGO) test --workspace

test-c: stage
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig tests/c/run.sh $(STAGE)/lib

clean:
	$(CARGO) clean
	rm -rf $(STAGE) examples/c/build
