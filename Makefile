# Every target builds its own virtual environment from the pinned requirements first: demo, check and
# install-skill the runtime set (requirements.txt), test and docs that set and theirs on top
# (requirements-test.txt), into the same venv; constraints.txt pins the whole closure of both.
# torch==2.13.0 is pinned on purpose: a looser pin pulls a multi-GB CUDA build.
VENV   := .venv
PYTHON := $(VENV)/bin/python
DEST   ?= $(HOME)/.claude/skills
PIP    := $(PYTHON) -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test check docs install-skill browser clean

$(VENV)/.installed: requirements.txt constraints.txt
	python3 -m venv $(VENV)
	$(PIP) -r requirements.txt
	touch $@

# A venv made by `make demo` gets the test set added, not rebuilt. uv installs it (its parallel downloads: 8 s
# against pip's 107 s for this set, measured on the 2-core VM), with bytecode compiled as pip would (every test
# process imports these); torch is already in place from pip (uv does not see the CPU build pip takes from this
# machine's disk) and the constraints hold it at 2.13.0. Where uv cannot install (no uv wheel for the platform, a
# registry only pip's own configuration reaches), pip does.
$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt
	$(PIP) uv
	$(PYTHON) -m uv pip install --quiet --python $(PYTHON) --compile-bytecode -c constraints.txt -r requirements-test.txt \
	  || { echo "make: uv could not install the test set; pip will (slower)" >&2; $(PIP) -r requirements-test.txt; }
	touch $@

demo: $(VENV)/.installed  ## run the doctor on its embedded demo case (a model with a planted bug)
	@$(PYTHON) diagnostics/doctor.py; status=$$?; \
	if [ $$status -eq 1 ]; then echo "(the doctor exits 1 when a check fails: here it found the planted bug, as it should)"; \
	else echo "make demo: expected the doctor to flag the planted bug (exit 1), got exit $$status" >&2; exit 1; fi

# Our own sources are byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (as on the project's VMs), each of the
# suite's ~470 processes would compile what it imports again (11 s of CPU over the suite, measured on the 2-core VM).
test: $(VENV)/.installed-test browser  ## the whole test suite, pack checker included, on two workers (one torch thread each)
	$(PYTHON) -m compileall -q -j 0 diagnostics ml_debug tools
	$(PYTHON) -m pytest -q -n 2 --dist loadfile

# The site's browser test (tests/test_site.py) drives Chromium with playwright (pip: requirements-test.txt); playwright's
# own browser download is not used. Debian's chromium is installed when missing and apt-get can (as root or with
# sudo), without the recommended desktop packages; where it cannot, the browser tests skip and say why.
browser:  ## Chromium for the site's browser test, installed with apt-get when missing
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo "sudo -n"); \
	  if command -v apt-get >/dev/null 2>&1 && $$sudo true 2>/dev/null; then \
	    echo "make: installing chromium for the site's browser test (apt-get)"; \
	    $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null \
	      || echo "make: apt-get could not install chromium: the browser tests will skip" >&2; \
	  else echo "make: no chromium, and no apt-get to install it as root or with sudo: the browser tests will skip" >&2; fi; }

check: $(VENV)/.installed  ## the pack checker alone: quotes, footnotes, links, evidence, SKILL.md budget
	$(PYTHON) tools/check_pack.py

# NO_MKDOCS_2_WARNING silences mkdocs-material's end-of-life banner; it changes nothing in the build.
docs: $(VENV)/.installed-test  ## build the docs site into build/site from the pack's own files (strict: any warning fails)
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

# It replaces only an unchanged earlier install of its own; FORCE=1 passes --force (replace whatever is there).
install-skill: $(VENV)/.installed  ## copy the agent-facing files into $(DEST)/ml-debug and validate the copy
	$(PYTHON) tools/install_skill.py $(DEST) $(if $(FORCE),--force)

# A .venv without the .installed marker was not made here: left alone.
clean:  ## remove the virtual environment this Makefile made, and pytest's cache
	@if [ -f $(VENV)/.installed ]; then rm -rf $(VENV); \
	elif [ -e $(VENV) ]; then echo "make clean: $(VENV) has no .installed marker, so this Makefile did not make it: left alone" >&2; fi
	rm -rf .pytest_cache
