# nm-scanguard — the two commands a person needs are `make demo` and `make test`.
# Everything here runs as root on a fresh Debian 12 machine and installs what it needs.

PYTHON  ?= /usr/bin/python3
PYTEST  = $(PYTHON) -m pytest -p no:cacheprovider
CACHE   ?= $(CURDIR)/.cache
export CACHE

# Debian packages, by purpose.  `make deps-*` installs only the missing ones.
DEPS_RUNTIME = python3-dbus-fast python3-dbus-next python3-gi gir1.2-nm-1.0 python3-systemd
DEPS_TEST    = $(DEPS_RUNTIME) python3-pytest python3-pytest-asyncio python3-dbusmock \
               python3-pytest-xdist python3-hypothesis mypy python3-venv dbus dbus-daemon wpasupplicant iproute2 \
               iputils-ping procps util-linux systemd polkitd duktape network-manager \
               python3-matplotlib
DEPS_LAB     = $(DEPS_TEST) qemu-system-x86 busybox network-manager hostapd iw tshark \
               wireless-regdb kmod udev iperf3 python3-matplotlib gcc libc6-dev pkg-config \
               libnl-genl-3-dev geoclue-2.0 geoclue-2-demo $(DEPS_PREVIOUS)
# The lab's upgrade check builds the previous release from its commit: that release's
# Build-Depends beyond DEPS_DEB (0.1.0 wrote its man pages with argparse-manpage).
DEPS_PREVIOUS = python3-argparse-manpage
# The package rung's own tools; what the build itself needs is debian/control's Build-Depends
# (mk/build-deps.sh installs them), the one list of build dependencies.
DEPS_DEB     = lintian git
# Debian's tools must not pick up a python3 from pyenv or a virtualenv on PATH.
DEB_PATH     = /usr/sbin:/usr/bin:/sbin:/bin

DBUS_TESTS = tests/dbus tests/api tests/access
# The D-Bus rung spends most of its time waiting for the daemon and the buses (46 % of one core
# in one process): three pytest-xdist workers take it from 204 s to 75 s on two cores.  Each test
# has its own private bus, so the split does not change what a test sees.
DBUS_JOBS ?= 3
# The unit rung is CPU-bound: one pytest-xdist worker per core (50 s -> 31 s on two cores).
UNIT_JOBS ?= 2
# The linter comes from PyPI, pinned, in a virtualenv under $(CACHE); mypy is Debian's.
RUFF_VERSION = 0.17.5
RUFF         = $(CACHE)/ruff-$(RUFF_VERSION)/bin/ruff
# Which D-Bus library a run really uses: one that marshals non-ASCII wrongly is skipped.  Prints
# it; exits 3 if it is not $SCANGUARD_DBUS_LIB (1 if no library can be imported at all).
SHOW_LIB     = $(PYTHON) -c 'import os, sys, nm_scanguard.dbuslib as d; print("    D-Bus library in use:", d.LIBRARY, *("(skipped: " + s + ")" for s in d.SKIPPED)); sys.exit(3 if d.LIBRARY != os.environ["SCANGUARD_DBUS_LIB"] else 0)'
# $(call with_lib,LIB,COMMAND): run COMMAND with SCANGUARD_DBUS_LIB=LIB if the daemon really uses
# LIB here.  On Debian 12 it refuses dbus-fast 1.84.2 (FACTS.md: wrong lengths for non-ASCII) and
# falls back to dbus-next, so a "dbus_fast" pass would repeat the dbus_next pass word for word:
# it is not run, and the line says why.  (The refusal itself is tested in tests/unit.)
define with_lib
	{ SCANGUARD_DBUS_LIB=$(1) $(SHOW_LIB); rc=$$?; \
	  if [ $$rc -eq 0 ]; then SCANGUARD_DBUS_LIB=$(1) $(2); \
	  elif [ $$rc -eq 3 ]; then echo "    not run with $(1): the daemon does not use it on this release (above); the pass with the library it uses covers this"; \
	  else false; fi; }
endef

# $(call step,NAME,COMMANDS): print the step's name, run it, print how long it took.
define step
	@echo "==> [$$(date +%H:%M:%S)] $(1)"; start=$$(date +%s); \
	( $(2) ); rc=$$?; \
	echo "<== $(1): $$(( $$(date +%s) - start )) s$$( [ $$rc -eq 0 ] || echo ", FAILED (exit $$rc)")"; \
	exit $$rc
endef

.PHONY: all test lint demo paper roam bench bench-medium deb clean-install archive-check deps-test deps-lab deps-deb unit dbus fault contract lab package clean \
        model model-long model-mutants model-exhaustive fault-explore

all:
	@echo "Use 'make demo' (the Wi-Fi lab, guard off vs on) or 'make test' (every test)."
	@echo "'make test-trixie': rung 9 alone, the unit, D-Bus, fault, model, contract and package rungs on Debian 13."

# $(call apt_install,PACKAGES): install the missing ones, marked as installed automatically so
# that `apt autoremove` takes them away again (README: make demo's packages, make deb's tools).
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "==> installing Debian packages:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  apt-mark auto $$missing >/dev/null; \
	  echo "==> marked as installed automatically: 'apt autoremove' removes them when no longer wanted"; \
	else echo "==> Debian packages already installed"; fi
endef

deps-test:
	$(call apt_install,$(DEPS_TEST))
deps-lab:
	$(call apt_install,$(DEPS_LAB))
deps-deb:
	@PATH=$(DEB_PATH) sh mk/build-deps.sh
	$(call apt_install,$(DEPS_DEB))

# Two lab checks run with make lab (and make lab-trixie), not in the gate, which must stay under
# 40 minutes on CI's 2 cores: make paper's own (test_lab_paper.py: its "without TSQ" sender
# proves the paper's set-up, not the guard), and Debian's GeoClue under abort_scans (≈150 s;
# in the gate the abort check makes GeoClue's own call, Scan with Type=passive, and diagnose's
# attribution of a direct caller is held by tests/unit/diagnose).
LAB_IN_TEST = not without_tsq and not geoclue

# The rungs of docs/testing.md, in its order and with its numbers and names: each step prints
# "==> [time] rung N/10 NAME: what it runs" and "<== ...: T s"; docs/testing.md's item N says
# what rung N proves.  Rung 3 prints one step per D-Bus library.
test: deps-test deps-lab deps-deb trixie-deps
	$(call step,rung 1/10 lint: mypy --strict and ruff,$(MAKE) -s lint)
	$(call step,rung 2/10 unit: tests/unit (policy; config; holds; journal; rates),$(PYTEST) -q -n $(UNIT_JOBS) tests/unit)
	$(call step,rung 3/10 D-Bus: $(DBUS_TESTS) on a private bus with dbus-fast (SCANGUARD_DBUS_LIB=dbus_fast),\
	  $(call with_lib,dbus_fast,$(PYTEST) -v -n $(DBUS_JOBS) $(DBUS_TESTS)))
	$(call step,rung 3/10 D-Bus: the same with dbus-next,\
	  $(call with_lib,dbus_next,$(PYTEST) -v -n $(DBUS_JOBS) $(DBUS_TESTS)))
	$(call step,rung 4/10 fault: tests/fault (Hypothesis) with each D-Bus library,\
	  $(call with_lib,dbus_fast,$(PYTEST) -v -s tests/fault) && \
	  $(call with_lib,dbus_next,$(PYTEST) -v -s tests/fault))
	$(call step,rung 5/10 model: tests/model sampled (seed $(MODEL_SEED)) and systematic (--from $(EXPLORE_IN_TEST)),\
	  $(PYTHON) -m tests.model.parallel --seed $(MODEL_SEED) && \
	  $(PYTHON) -m tests.model.explore --close --from $(EXPLORE_IN_TEST))
	$(call step,rung 6/10 contract: tests/contract against the real wpa_supplicant (dbus-fast; dbus-next),\
	  $(call with_lib,dbus_fast,$(PYTEST) -v tests/contract) && \
	  $(call with_lib,dbus_next,$(PYTEST) -q tests/contract))
	$(call step,rung 7/10 package: tests/package (build; lintian; hardening),$(PYTEST) -v tests/package)
	$(call step,rung 8/10 clean install: a new user's install in fresh Debian 12 and 13 roots (the README's commands; the upgrade),$(MAKE) -s clean-install)
	$(call step,rung 9/10 Debian 13: rungs 2-7 in a trixie root (unit; D-Bus; contract; package; fault; model),$(MAKE) -s test-trixie)
	$(call step,rung 10/10 lab: tests/lab (QEMU; mac80211_hwsim; NetworkManager),$(PYTEST) -v -s tests/lab -k '$(LAB_IN_TEST)')
	@echo "==> [$$(date +%H:%M:%S)] done: all 10 rungs passed"

$(RUFF):
	$(PYTHON) -m venv $(CACHE)/ruff-$(RUFF_VERSION)
	$(CACHE)/ruff-$(RUFF_VERSION)/bin/pip install -q --disable-pip-version-check ruff==$(RUFF_VERSION)

lint: deps-test $(RUFF)
	$(PYTHON) -m mypy nm_scanguard
	$(RUFF) check --no-cache nm_scanguard tests completion man

# One target per rung, named after the folder it runs (rungs 2, 3, 4, 5, 6, 7 and 10).
unit: deps-test
	$(PYTEST) -v tests/unit
dbus: deps-test
	$(PYTEST) -v $(DBUS_TESTS)
fault: deps-test
	$(PYTEST) -v -s tests/fault
# fault-explore: the fault rung with a fresh seed (make test's run derives its examples from the
# tests' code and draws the same sequences every time): EXAMPLES sequences per D-Bus library;
# prints the seed and the command that repeats the run.  SEED=N repeats one.  A sequence found
# here becomes an @example in tests/fault in the commit that fixes it.
EXAMPLES ?= 100
fault-explore: deps-test
	@seed=$${SEED:-$$($(PYTHON) -c 'import secrets; print(secrets.randbelow(2**31))')}; \
	echo "==> fault rung: $(EXAMPLES) sequences per D-Bus library, seed $$seed (repeat with: make fault-explore SEED=$$seed EXAMPLES=$(EXAMPLES))"; \
	$(call with_lib,dbus_fast,SCANGUARD_FAULT_EXAMPLES=$(EXAMPLES) $(PYTEST) -v -s --hypothesis-seed=$$seed tests/fault/test_fault_injection.py) && \
	$(call with_lib,dbus_next,SCANGUARD_FAULT_EXAMPLES=$(EXAMPLES) $(PYTEST) -v -s --hypothesis-seed=$$seed tests/fault/test_fault_injection.py); \
	rc=$$?; echo "==> fault rung, seed $$seed: $$( [ $$rc -eq 0 ] && echo passed || echo "FAILED (repeat with: make fault-explore SEED=$$seed EXAMPLES=$(EXAMPLES))")"; exit $$rc
# The model rung (tests/model: the daemon's code against simulated peers, in-process, 2000
# sequences, split over one worker process per core: tests/model/parallel.py); model-long
# runs SEQUENCES of them; model-mutants checks that it catches deliberately broken variants of
# the daemon (edits to a temporary copy, never to the tree; one process each).
# make test runs the model rung with a fixed seed (MODEL_SEED): the simulation is deterministic,
# so the sequences that passed here are the ones CI runs; model and model-long draw a new seed
# each time (printed with the command that repeats the run) to find what those miss.
SEQUENCES ?= 100000
MODEL_SEED ?= 20261126
model: deps-test
	$(PYTHON) -m tests.model.parallel $(if $(SEED),--seed $(SEED))
model-long: deps-test
	$(PYTHON) -m tests.model.parallel --only-machine --sequences $(SEQUENCES) $(if $(SEED),--seed $(SEED))
# The systematic mode (tests/model/explore.py): every sequence of at most K events of its
# alphabet from each of its starting situations, each also closed by the liveness check, and
# checked like the sampled rung.  model-exhaustive's bound is explore.py's EXHAUSTIVE (depth 2
# from the situations where a call sequence waits, depth 1 from the rest: within 600 s on two
# cores); make test runs a smaller one (EXPLORE_IN_TEST).  FROM=... another bound, as explore's
# --from takes it (e.g. FROM=all:2, every situation at depth 2: about half an hour).
# model-mutants runs every variant against model-exhaustive's bound and the plain tests.
# depth 1 from every situation: 25 s; depth 2 from start would add 45 s to a gate near its
# 40 minutes, and model-exhaustive runs it.
EXPLORE_IN_TEST = all:1
FROM ?= exhaustive
model-exhaustive: deps-test
	$(PYTHON) -m tests.model.explore --close --from $(FROM)
model-mutants: deps-test
	$(PYTHON) -m tests.model.mutants --from $(FROM)
contract: deps-test
	$(PYTEST) -v tests/contract
package: deps-test deps-deb
	$(PYTEST) -v tests/package
lab: deps-lab deps-deb  # the package VM (tests/lab/test_package_vm.py) builds the .deb
	$(PYTEST) -v -s tests/lab

# Resource figures (RSS, PSS, CPU, start to bus name) of the daemon idle and sampling; prints,
# asserts nothing.  BENCH_ARGS='--against REV' also measures git revision REV in the same run.
bench: deps-test
	$(PYTHON) -m tests.bench.bench_daemon --seconds 60 $(BENCH_ARGS)
	$(PYTHON) -m tests.bench.bench_polkit

demo: deps-lab
	$(PYTHON) -m tests.lab.demo $(DEMO_ARGS)

# The paper's experiment matrix in the lab, guard off and on (issue 24; docs/paper.md).  Not part
# of `make test`: about 20 minutes.  PAPER_ARGS='--cells upload-tsq --seconds 60' for a part;
# `make paper-trixie` runs it on Debian 13.
paper: deps-lab
	$(PYTEST) -v -s tests/lab/test_lab_paper.py
	$(PYTHON) -m tests.lab.paper $(PAPER_ARGS)

# A fade under load in the lab, roam_scans = targeted against full, and issue 35's checks (a)-(d)
# (docs/roaming.md); fails if a check fails.  Not part of `make test`: about 20 minutes.
# ROAM_ARGS='--scenarios walk' for a part; `make roam-trixie` runs it on Debian 13.
roam: deps-lab
	$(PYTHON) -m tests.lab.roam_study $(ROAM_ARGS)

bench-medium: deps-lab
	$(PYTHON) -m tests.lab.bench_medium

# A user's build (README, "Install"): debian/control's Build-Depends (mk/build-deps.sh), then the
# binary package with the build's unit tests; DEB_BUILD_OPTIONS=nocheck skips those tests and
# the packages only they need (the nocheck build profile).
DEB_PROFILE = $(if $(filter nocheck,$(DEB_BUILD_OPTIONS)),nocheck)
deb:
	@PATH=$(DEB_PATH) sh mk/build-deps.sh $(DEB_PROFILE)
	PATH=$(DEB_PATH) $(if $(DEB_PROFILE),DEB_BUILD_PROFILES=nocheck) dpkg-buildpackage -us -uc -b --post-clean
	@ls -1 ../nm-scanguard_*_all.deb

# A new user's install from fresh Debian 12 and 13 roots (tests/debian_roots/clean_install.py): the
# README's install commands word for word, the installed result, and the upgrade from the
# previous release.  A step of make test.
clean-install: trixie-deps
	$(PYTHON) tests/debian_roots/clean_install.py run $(CLEAN_INSTALL_ARGS)

# How the archive would build and test it: sbuild (unshare mode) and autopkgtest (unshare runner)
# in clean chroots of Debian 12 and 13, lintian --pedantic (tests/debian_roots/archive-check.sh).  Not
# part of make test: it builds the package once more per release.
archive-check:
	$(call apt_install,sbuild autopkgtest mmdebstrap uidmap)
	sh tests/debian_roots/archive-check.sh $(ARCHIVE_RELEASES)

clean:
	rm -rf build dist *.egg-info .pybuild debian/.debhelper debian/nm-scanguard debian/files \
	       debian/*.substvars debian/*.debhelper.log debian/debhelper-build-stamp debian/tmp
	find . -name __pycache__ -prune -exec rm -rf {} +

# Debian 13 for the lower rungs: trixie-root, test-trixie, trixie-shell (see the file).
include mk/trixie.mk
