# aliasfuzz: the two commands a new user runs are `make fuzz` and `make test`.
# Everything they need (virtual environment, pinned packages, probe builds) is set up on the way,
# and nothing is reinstalled or rebuilt when nothing changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.aliasfuzz-installed
# FULL=1 also builds burn's wgpu backend (software Vulkan); CUDA=1 builds the CUDA paths.
FULL   ?= 0
CUDA   ?= 0
BUDGET ?= 2m

.PHONY: all fuzz test probes venv bench clean distclean

all: test

$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

# Cargo decides what is stale; one invocation per make run builds every probe.
probes: $(STAMP)
	$(PY) -m harness.build --full=$(FULL) --cuda=$(CUDA)

# A short CPU campaign into a fresh run folder; exit status 1 (new findings) is what a fuzz run
# is for, so only a set-up or usage error (2) fails `make fuzz`.
RUN := reports/run-$(shell date +%Y%m%d-%H%M%S)
fuzz: probes
	$(VENV)/bin/aliasfuzz fuzz --budget $(BUDGET) --profile quick --out $(RUN); \
	    status=$$?; [ $$status -le 1 ] || exit $$status
	$(VENV)/bin/aliasfuzz report --history reports
	@echo "report: $(RUN)/report.html (and report.md); history: reports/history.html"

test: probes
	$(PY) -m harness.build --cargo-test
	$(PY) -m pytest -q

bench: probes
	$(VENV)/bin/aliasfuzz bench

clean:
	rm -rf reports/run-* reports/history.html .hypothesis

distclean: clean
	rm -rf $(VENV) rust_probes/target
