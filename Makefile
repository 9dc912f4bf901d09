# nm-scanguard — the two commands a person needs are `make demo` and `make test`.
# Everything here runs as root on a fresh Debian 12 machine and installs what it needs.

PYTHON  ?= /usr/bin/python3
PYTEST  = $(PYTHON) -m pytest -p no:cacheprovider
CACHE   ?= $(CURDIR)/.cache
export CACHE

# Debian packages, by purpose.  `make deps-*` installs only the missing ones.
DEPS_RUNTIME = python3-dbus-fast python3-dbus-next python3-pyroute2 python3-gi gir1.2-nm-1.0 \
               python3-systemd
DEPS_TEST    = $(DEPS_RUNTIME) python3-pytest python3-pytest-asyncio python3-dbusmock \
               dbus dbus-daemon wpasupplicant iproute2 iputils-ping systemd
DEPS_LAB     = $(DEPS_TEST) qemu-system-x86 busybox network-manager hostapd iw tshark \
               wireless-regdb kmod udev iperf3 python3-matplotlib
DEPS_DEB     = $(DEPS_RUNTIME) debhelper dh-python pybuild-plugin-pyproject python3-setuptools \
               python3-wheel python3-argparse-manpage python3-pytest python3-pytest-asyncio \
               lintian dpkg-dev fakeroot git
# Debian's tools must not pick up a python3 from pyenv or a virtualenv on PATH.
DEB_PATH     = /usr/sbin:/usr/bin:/sbin:/bin

DBUS_TESTS = tests/dbus tests/api tests/policy

.PHONY: all test demo bench deb deps-test deps-lab deps-deb unit dbus contract lab package clean

all:
	@echo "Use 'make demo' (the Wi-Fi lab, guard off vs on) or 'make test' (every test)."

define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "==> installing Debian packages:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	else echo "==> Debian packages already installed"; fi
endef

deps-test:
	$(call apt_install,$(DEPS_TEST))
deps-lab:
	$(call apt_install,$(DEPS_LAB))
deps-deb:
	$(call apt_install,$(DEPS_DEB))

test: deps-test deps-lab deps-deb
	@echo "==> [1/6] unit tests (policy, config, rates)"
	$(PYTEST) -q tests/unit
	@echo "==> [2/6] D-Bus tests on a private bus: daemon, API, policy (dbus-fast)"
	SCANGUARD_DBUS_LIB=dbus_fast $(PYTEST) -v $(DBUS_TESTS)
	@echo "==> [3/6] the same with dbus-next"
	SCANGUARD_DBUS_LIB=dbus_next $(PYTEST) -v $(DBUS_TESTS)
	@echo "==> [4/6] contract tests against the real wpa_supplicant (dbus-fast, dbus-next)"
	SCANGUARD_DBUS_LIB=dbus_fast $(PYTEST) -v tests/contract
	SCANGUARD_DBUS_LIB=dbus_next $(PYTEST) -q tests/contract
	@echo "==> [5/6] package: build, lintian, hardening"
	$(PYTEST) -v tests/package
	@echo "==> [6/6] the virtual Wi-Fi lab (QEMU, mac80211_hwsim, NetworkManager)"
	$(PYTEST) -v -s tests/lab

unit: deps-test
	$(PYTEST) -v tests/unit
dbus: deps-test
	$(PYTEST) -v $(DBUS_TESTS)
contract: deps-test
	$(PYTEST) -v tests/contract
package: deps-test deps-deb
	$(PYTEST) -v tests/package
lab: deps-lab
	$(PYTEST) -v -s tests/lab

# Resource figures (RSS, CPU) of the daemon idle and sampling; prints, asserts nothing.
bench: deps-test
	$(PYTHON) -m tests.bench.bench_daemon --seconds 60

demo: deps-lab
	$(PYTHON) -m tests.lab.demo

deb: deps-deb
	PATH=$(DEB_PATH) dpkg-buildpackage -us -uc -b --post-clean
	@ls -1 ../nm-scanguard_*_all.deb

clean:
	rm -rf build dist *.egg-info .pybuild debian/.debhelper debian/nm-scanguard debian/files \
	       debian/*.substvars debian/*.debhelper.log debian/debhelper-build-stamp debian/tmp
	find . -name __pycache__ -prune -exec rm -rf {} +
