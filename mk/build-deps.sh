#!/bin/sh
# Install what debian/control's Build-Depends name and this machine lacks (`make deb`, `make
# deps-deb`): debian/control is the one list of build dependencies.
#
#   sh mk/build-deps.sh [PROFILE]     PROFILE: nocheck, or nothing
#
# apt-get build-dep reads ./debian/control and adds build-essential.  What it installs is then
# marked as automatically installed, so that `apt autoremove` takes the build tools away again
# (the README says so); packages that were on the machine before are left as they were.
set -eu
profile=${1:-}
popt=${profile:+-P$profile}

if command -v dpkg-checkbuilddeps >/dev/null 2>&1 && dpkg-checkbuilddeps $popt >/dev/null 2>&1; then
    echo "==> the build dependencies (debian/control) are installed"
    exit 0
fi
echo "==> installing the build dependencies named in debian/control${profile:+ (profile $profile)}"
installed() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' | sort; }
before=$(mktemp)
trap 'rm -f "$before"' EXIT
installed >"$before"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get build-dep -y -qq --no-install-recommends $popt ./ >/dev/null
new=$(installed | comm -13 "$before" -)
if [ -n "$new" ]; then
    # shellcheck disable=SC2086  # one package name per word
    apt-mark auto $new >/dev/null
    echo "==> $(echo "$new" | wc -l) packages installed for the build, marked automatic:" \
         "'apt autoremove' removes them when you no longer build"
fi
