# Debian 13 "trixie" for the lower test rungs (issue 10); included by the Makefile.
#
#   make trixie-root   build the trixie root tree unless it is cached (mmdebstrap, about a
#                      minute; installs mmdebstrap on the host first); prints its path and size
#   make test-trixie   the root, then inside it with trixie's python3: unit; tests/dbus tests/api
#                      tests/policy with dbus_fast and with dbus_next; tests/contract against
#                      trixie's wpa_supplicant with each; tests/fault with each.  One at a time,
#                      each step timed, a summary at the end; non-zero exit if any step failed.
#   make trixie-shell  a shell inside the root (the repository read-only at /src), to debug
#
# Variables (environment or command line):
#   PYTHON               the host's Debian python3 that runs tests/release/trixie.py (the tests
#                        themselves run with the root's /usr/bin/python3)
#   TRIXIE_CACHE         where roots are kept, outside the checkout so that CI runs and later
#                        runs reuse them (default /var/cache/nm-scanguard)
#   TRIXIE_MIRROR        the Debian mirror (default http://deb.debian.org/debian)
#   TRIXIE_STEP_TIMEOUT  seconds after which a step is killed and fails (default 420)
#   TRIXIE_TOTAL_TIMEOUT seconds after which the whole run stops, failing (default 1200)
#   TRIXIE_ARGS          more arguments for `trixie.py test`, e.g. TRIXIE_ARGS='--only unit'
# See tests/release/README.md.  Needs root, unshare and overlayfs.

PYTHON       ?= /usr/bin/python3
TRIXIE_CACHE ?= /var/cache/nm-scanguard
TRIXIE       = TRIXIE_CACHE=$(TRIXIE_CACHE) $(PYTHON) tests/release/trixie.py

.PHONY: trixie-root test-trixie trixie-shell trixie-deps

trixie-deps:
	@command -v mmdebstrap >/dev/null || { \
	  echo "==> installing mmdebstrap (builds the trixie root)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }

trixie-root: trixie-deps
	$(TRIXIE) root

test-trixie: trixie-deps
	$(TRIXIE) test $(TRIXIE_ARGS)

trixie-shell: trixie-deps
	$(TRIXIE) shell
