# commprof: `make demo` runs the whole job on whatever hardware is here; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch 2.13.0 lies on this kind of machine's disk; on a GPU box pick the CUDA build you serve with.
TORCH_SPEC ?= torch==2.13.0
# Ranks for the demo: one per GPU, or 2 gloo ranks on a CPU-only machine.
NPROC ?= $(shell n=$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$$n" -ge 1 ] 2>/dev/null && echo $$n || echo 2)
RUNS ?= runs
SWEEP ?=

.PHONY: install dev extras lint test test-fast test-processes browser-test demo sweep report gpu-smoke bench clean FORCE

# The runtime only: torch (TORCH_SPEC, installed once: later targets keep whatever torch the venv holds, unless
# TORCH_SPEC is given on the command line) and what the pipeline imports. About 1 GB, under 2 minutes on 2 cores.
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(if $(filter file,$(origin TORCH_SPEC)),,FORCE)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ "$(origin TORCH_SPEC)" != file ] || ! $(PY) -c 'import torch' 2>/dev/null; then \
		echo "pip install $(TORCH_SPEC)"; $(PY) -m pip install --quiet "$(TORCH_SPEC)"; fi
	$(PY) -c 'import torch; print("torch==" + torch.__version__)' > $(VENV)/torch-pin.txt
	$(PY) -m pip install --quiet -e . -c $(VENV)/torch-pin.txt
	touch $@

# The test and lint tools on top of the runtime (no FlashInfer or b12x: their binding tests check commprof's calls
# against recorded signatures, tests/flashinfer_record.py and tests/b12x_record.py, where they are absent).
dev: $(VENV)/.dev

$(VENV)/.dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev]' -c $(VENV)/torch-pin.txt
	touch $@

# FlashInfer and b12x (about 1.7 GB and 1 GB), each only where it keeps the torch installed above: b12x needs
# torch >= 2.12. With them the binding tests also bind against the installed packages.
extras: install
	$(PY) -m pip install --quiet -e '.[flashinfer]' -c $(VENV)/torch-pin.txt || echo "FlashInfer not installed next to this torch"
	$(PY) -m pip install --quiet -e '.[b12x]' -c $(VENV)/torch-pin.txt || echo "b12x not installed next to this torch: pip install 'commprof[b12x]' to bind and run it"

lint: dev
	$(VENV)/bin/ruff check commprof tests bench tools
	$(VENV)/bin/ruff format --check commprof tests bench tools

# Every test in one pytest run (each worker collects once), one pytest-xdist worker per core, at most 4, each file on
# one worker (--dist loadfile), so a file's shared fixtures are made once; GPU tests run one at a time
# (tests/conftest.py). Its last line is its cost: the CPU seconds of every process it ran (tools/cpu_seconds.py).
# Compiled modules are written and reused even where the environment sets PYTHONDONTWRITEBYTECODE (this one does):
# else every process a test starts compiles commprof's modules again from source, 0.3-0.5 CPU-seconds each, which
# no installed commprof pays.
XDIST := -n auto --maxprocesses 4 --dist loadfile
BYTECODE := PYTHONDONTWRITEBYTECODE=
test: dev
	$(BYTECODE) $(PY) tools/cpu_seconds.py "make test" -- $(PY) -m pytest -q $(XDIST)

# The tests that start no process (`-m "not processes"`): the everyday loop while editing.
test-fast: dev
	$(BYTECODE) $(PY) tools/cpu_seconds.py "make test-fast" -- $(PY) -m pytest -q -m "not processes" $(XDIST)

# The tests that start processes alone (torchrun sweeps on gloo, fork servers, subprocesses, a browser).
test-processes: dev
	$(BYTECODE) $(PY) tools/cpu_seconds.py "make test-processes" -- $(PY) -m pytest -q -m processes $(XDIST)

# The report in headless Chromium; installs Debian's chromium first when run as root without it.
browser-test: dev
	command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q chromium; }
	$(PY) -m pytest -q tests/test_report_chromium.py

sweep: install
	$(VENV)/bin/torchrun --nproc-per-node $(NPROC) -m commprof.allreduce_sweep --out $(RUNS) $(if $(SWEEP),--sweep $(SWEEP))

report: install
	$(PY) -m commprof report --latest $(RUNS)

demo: sweep report

# Every GPU path, one verdict each (docs/gpu-check.md). On a GPU box without a package index:
# `make gpu-smoke PY=python3 [OUT=dir] [ARCHIVE=file.tgz] [EXTENDED=1]` runs `python3 -m commprof.gpu_smoke` with that
# interpreter's own packages from this checkout (no venv is built); without CUDA it says so.
gpu-smoke: $(if $(filter $(VENV)/bin/python,$(PY)),install)
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m commprof.gpu_smoke $(if $(OUT),--out $(OUT)) \
		$(if $(ARCHIVE),--archive $(ARCHIVE)) $(if $(EXTENDED),--extended)

bench: install
	$(PY) bench/harness_overhead.py
	$(PY) bench/point_overhead.py
	$(PY) bench/fork_server_start.py
	$(PY) bench/report_render.py
	$(PY) bench/crossover_cost.py

clean:
	rm -rf $(VENV) build *.egg-info
