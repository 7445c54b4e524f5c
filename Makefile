# The two commands of README.md. Both install dependencies first (idempotent).
PRESET ?= release
JOBS ?= $(shell nproc)

PREFIX ?= /usr/local

.PHONY: setup build test test-asan install serve bench format clean

setup:
	./scripts/setup

build: setup
	./scripts/build $(PRESET) -j $(JOBS)

test: build
	cd build/$(PRESET) && ctest --output-on-failure -j $(JOBS) -LE slow

test-asan: setup
	./scripts/build asan -j $(JOBS)
	cd build/asan && ctest --output-on-failure -j $(JOBS) -L "unit|golden|e2e"

# The CLI, libsluice.so/.a, include/sluice/sluice.h, sluice.pc and sluice-static.pc, the Python
# and Java bindings (docs/c-api.md). DESTDIR=... stages the files for packaging.
install: build
	cmake --install build/$(PRESET) --prefix $(PREFIX)

serve: build
	./scripts/serve-demo build/$(PRESET)/sluice

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build
