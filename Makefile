# The two commands of README.md. Both install dependencies first (idempotent).
PRESET ?= release
JOBS ?= $(shell nproc)

.PHONY: setup build test test-asan serve bench format clean

setup:
	./scripts/setup

build: setup
	./scripts/build $(PRESET) -j $(JOBS)

test: build
	cd build/$(PRESET) && ctest --output-on-failure -j $(JOBS) -LE slow

test-asan: setup
	./scripts/build asan -j $(JOBS)
	cd build/asan && ctest --output-on-failure -j $(JOBS) -L "unit|golden|e2e"

serve: build
	./scripts/serve-demo build/$(PRESET)/sluice

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build
