#!/bin/sh
# Build a Debian 13 "trixie" root directory for the lower test rungs with mmdebstrap.
#
#   tests/debian_roots/trixie-root.sh PACKAGES_FILE TARGET_DIR
#
# Called by tests/debian_roots/trixie.py, which names TARGET_DIR after a hash of this file and of
# PACKAGES_FILE: a change to either makes the next run build a new root instead of testing a stale
# one.  Environment: TRIXIE_MIRROR, the Debian mirror (trixie.py passes the one the host's own
# apt sources use, or its override).  Needs root and mmdebstrap (apt-get install mmdebstrap).
set -eu

packages_file=$1
target=$2
mirror=${TRIXIE_MIRROR:?"set TRIXIE_MIRROR to a Debian mirror (tests/debian_roots/trixie.py does)"}

# One comma-separated list, comments and blank lines dropped.
include=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$packages_file" | paste -sd, -)
[ -n "$include" ] || { echo "trixie-root.sh: no packages in $packages_file" >&2; exit 1; }

# Documentation, manual pages and translations are never read by a test: leaving them out
# makes the root about a quarter smaller.  The copyright files stay.
exec mmdebstrap \
    --mode=root \
    --variant=apt \
    --format=directory \
    --components=main \
    --include="$include" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    trixie "$target" "deb $mirror trixie main"
