# Debian 13 "trixie" for the lower test rungs (issue 10); included by the Makefile.
#
#   make trixie-root   build the trixie root tree unless it is cached (mmdebstrap, about a
#                      minute; installs mmdebstrap on the host first); prints its path and size
#   make test-trixie   rung 9 of make test: the root, then inside it with trixie's python3
#                      rungs 2-7 (docs/testing.md): unit; tests/dbus tests/api tests/access with
#                      dbus_fast (Debian 13's library); tests/contract against trixie's
#                      wpa_supplicant with each library; tests/package; tests/fault with
#                      dbus_fast; the model rung with make test's seed.  One at a time, each
#                      step timed, a summary at the end; non-zero exit if any step failed.
#   make trixie-shell  a shell inside the root (the repository read-only at /src), to debug
#   make lab-trixie    the lab on Debian 13: the VM boots a trixie root of its own (kernel 6.12,
#                      NetworkManager 1.52, wpa_supplicant 2.10-24, systemd 257, polkitd 126;
#                      tests/debian_roots/trixie-lab-packages.txt, cached like the other root) and
#                      runs the package VM test and the guard checks that matter most.  Not part
#                      of `make test`: it takes about 15 minutes more than the 40 that has.
#
# Variables (environment or command line):
#   PYTHON               the host's Debian python3 that runs tests/debian_roots/trixie.py (the tests
#                        themselves run with the root's /usr/bin/python3)
#   TRIXIE_CACHE         where roots are kept, outside the checkout so that CI runs and later
#                        runs reuse them (default /var/cache/nm-scanguard)
#   TRIXIE_MIRROR        the Debian mirror (default: the one this host's apt sources use, else
#                        http://deb.debian.org/debian)
#   TRIXIE_STEP_TIMEOUT  seconds after which a step is killed and fails (default 420)
#   TRIXIE_TOTAL_TIMEOUT seconds after which the whole run stops, failing (default 1200)
#   TRIXIE_ARGS          more arguments for `trixie.py test`, e.g. TRIXIE_ARGS='--only unit'
#   TRIXIE_FAULT_EXAMPLES  generated sequences per fault test and library in the root (default
#                        10, $SCANGUARD_FAULT_EXAMPLES if set): the host's pass runs 25; fewer
#                        here keep `make test` under 40 minutes (the trixie fault pass was 5 of them)
#   TRIXIE_MODEL_SEQUENCES  the model rung's sequences in the root (default 500,
#                        $SCANGUARD_MODEL_SEQUENCES if set): the host's pass runs 2000 of the
#                        same daemon code, and this one shows that Python 3.13 and trixie's
#                        libraries run them alike; a quarter of them keeps `make test` in its
#                        40 minutes
# See tests/debian_roots/README.md.  Needs root, unshare and overlayfs.

PYTHON       ?= /usr/bin/python3
TRIXIE_CACHE ?= /var/cache/nm-scanguard
TRIXIE_FAULT_EXAMPLES ?= $(or $(SCANGUARD_FAULT_EXAMPLES),10)
TRIXIE_MODEL_SEQUENCES ?= $(or $(SCANGUARD_MODEL_SEQUENCES),500)
TRIXIE       = TRIXIE_CACHE=$(TRIXIE_CACHE) $(PYTHON) tests/debian_roots/trixie.py

.PHONY: trixie-root test-trixie trixie-shell trixie-deps lab-trixie paper-trixie roam-trixie

# The guard checks issue 10 names (baseline scans, guard on, restore, reconnect, kill -9, hold,
# dispatcher), the non-ASCII check that starts the daemon, config set against NetworkManager
# 1.52, and every package VM check.  Left out: the weak-signal and explicit-scan checks and the
# client-scan module (they run on Debian 12 in `make test`).
LAB_TRIXIE_SELECT = not weak_signal and not explicit_scan and not client_scans

trixie-deps:
	@command -v mmdebstrap >/dev/null || { \
	  echo "==> installing mmdebstrap (builds the trixie root)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }

trixie-root: trixie-deps
	$(TRIXIE) root

# The model rung runs with make test's fixed seed (MODEL_SEED), like the host's: the gate draws
# the same sequences on every run.
test-trixie: trixie-deps
	SCANGUARD_FAULT_EXAMPLES=$(TRIXIE_FAULT_EXAMPLES) SCANGUARD_MODEL_SEED=$(MODEL_SEED) \
	  SCANGUARD_MODEL_SEQUENCES=$(TRIXIE_MODEL_SEQUENCES) \
	  $(TRIXIE) test $(TRIXIE_ARGS)

trixie-shell: trixie-deps
	$(TRIXIE) shell

lab-trixie: trixie-deps deps-lab deps-deb
	SCANGUARD_LAB_RELEASE=trixie TRIXIE_CACHE=$(TRIXIE_CACHE) \
	  $(PYTEST) -v -s tests/lab -k '$(LAB_TRIXIE_SELECT)'

# `make paper` on Debian 13 (kernel 6.12), into paper-results-trixie/.
paper-trixie: trixie-deps deps-lab
	SCANGUARD_LAB_RELEASE=trixie TRIXIE_CACHE=$(TRIXIE_CACHE) \
	  $(PYTHON) -m tests.lab.paper --out paper-results-trixie $(PAPER_ARGS)

# `make roam` on Debian 13 (kernel 6.12), into roam-results-trixie/.
roam-trixie: trixie-deps deps-lab
	SCANGUARD_LAB_RELEASE=trixie TRIXIE_CACHE=$(TRIXIE_CACHE) \
	  $(PYTHON) -m tests.lab.roam_study --out roam-results-trixie $(ROAM_ARGS)
