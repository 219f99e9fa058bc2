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
# The `make fuzz` campaign's seed: fixed, so two runs on one machine draw the same programs and the
# second says what changed in the frameworks, not in the draw. SEED=random explores new programs;
# the nightly workflow passes its run number.
SEED   ?= 1

.PHONY: all fuzz latest test unit lint probes venv bench schema matrix drafts device-package clean distclean

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

# reports/latest -> the run folder $(1): a relative link, made beside it and renamed over the old
# one, so a reader never finds it missing or half-made (os.replace: `mv -T` is GNU only).
link_latest = run='$(patsubst %/,%,$(1))'; \
	[ -d "$$run" ] || { echo "make latest: $$run: no such run folder" >&2; exit 2; }; \
	dir=$$(dirname "$$run"); \
	ln -sfn "$$(basename "$$run")" "$$dir/latest.tmp" && \
	$(PYTHON) -c 'import os, sys; os.replace(sys.argv[1], sys.argv[2])' "$$dir/latest.tmp" "$$dir/latest" && \
	echo "$$dir/latest -> $$(basename "$$run")"

# A short CPU campaign into a fresh run folder, then reports/latest pointed at it and the history
# re-rendered. The campaign's exit status 1 (new findings) is what a fuzz run is for, so only a
# set-up or usage error (2) or a bug of aliasfuzz itself (3) fails `make fuzz`; a run folder that
# was written all the same (a harness error, say) still becomes reports/latest first.
RUN := reports/run-$(shell date +%Y%m%d-%H%M%S)
fuzz: probes
	@status=0; $(VENV)/bin/aliasfuzz fuzz --budget $(BUDGET) --profile quick $(if $(filter random,$(SEED)),,--seed $(SEED)) --out $(RUN) || status=$$?; \
	if [ -f $(RUN)/campaign.json ]; then \
	    ( $(call link_latest,$(RUN)) ) && $(VENV)/bin/aliasfuzz report --history $(dir $(RUN)) || exit $$?; \
	    echo "report: $(RUN)/report.html (and report.md); history: $(dir $(RUN))history.html"; \
	fi; \
	[ $$status -le 1 ] || exit $$status

# `make latest RUN=reports/run-...` points reports/latest (beside RUN) at that run folder; the
# nightly workflow reads reports/latest.
latest:
	@[ "$(origin RUN)" = "command line" ] || { echo "make latest: give RUN=<a run folder>" >&2; exit 2; }; \
	$(call link_latest,$(RUN))

# Every tier; the run ends with its 20 slowest tests, so that what the suite's time goes to shows.
test: probes lint
	$(PY) -m harness.build --cargo-test --full=$(FULL) --cuda=$(CUDA)
	$(PY) -m pytest -q --durations=20

# The unit tier alone (tests/unit/: no probe build, no process, no service), for a quick check.
unit: $(STAMP)
	$(PY) -m pytest -q -m unit

# The formatters decide the layout and ruff's rule set holds (pyproject.toml, rust_probes/rustfmt.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	cd rust_probes && cargo fmt --check

# The probe protocol's JSON Schema is generated from the op table (harness/case/ops.py).
schema: $(STAMP)
	$(PY) -m harness.targets.schema --write

# The porting table in docs/ (every snapshot method x every op that can change its source, run on
# every CPU target); tests/probes/test_matrix.py fails when it is stale.
# The committed matrix has the CPU targets' columns, which every build has (FULL=1 or not);
# `aliasfuzz matrix` alone gives every target of the machine a column.
MATRIX_TARGETS := torch:cpu,torch:cpu+foreach,torch:cpu+compile,candle:cpu,burn:flex,burn:ndarray
matrix: probes
	$(VENV)/bin/aliasfuzz matrix --targets $(MATRIX_TARGETS) --out docs/matrix

# Upstream report drafts of the project's candidate bugs (the cases under tests/cases that call
# themselves candidates and no baseline entry names), with an index, in docs/candidates/.
drafts: probes
	rm -rf docs/candidates
	$(VENV)/bin/aliasfuzz draft --candidates --out docs/candidates

# dist/device/: the CUDA probes (built here with CUDA 13.0's compiler from PyPI), aliasfuzz's
# wheels and the p11 cases, for a GPU machine with no network and no Rust; dist/device/run.sh is
# its one command (docs/DEVICES.md).
device-package: $(STAMP)
	$(PY) -m harness.device_package

bench: probes
	$(VENV)/bin/aliasfuzz bench

clean:
	rm -rf reports/run-* reports/latest reports/latest.tmp reports/history.html .hypothesis

distclean: clean
	rm -rf $(VENV) rust_probes/target dist
