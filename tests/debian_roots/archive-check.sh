#!/bin/sh
# How the Debian archive would build and test the package, with the archive's own tools, on each
# release (`make archive-check`; not a step of make test: the package is built again per release):
#
#   1. the source package (dpkg-source -b of the tree as git sees it; 3.0 (native));
#   2. sbuild in unshare mode builds it in a clean chroot made from a tarball of the release
#      (mmdebstrap --variant=buildd), installing only debian/control's Build-Depends, running
#      the build's tests (dh_auto_test), then lintian --pedantic on the result;
#   3. autopkgtest with its unshare runner runs debian/tests against the built .deb in another
#      clean root unpacked from the same tarball.
#
#   sh tests/debian_roots/archive-check.sh [RELEASE...]     (default: bookworm trixie)
#
# Needs root, sbuild, autopkgtest, mmdebstrap and uidmap (make archive-check installs them).
# sbuild's and autopkgtest's unshare modes map ids through /etc/subuid and /etc/subgid: root
# gets a range there if it has none.  The tarballs are cached in $TRIXIE_CACHE/sbuild; results
# go to a fresh folder printed at the start.  Exit status: non-zero if any step failed.
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${TRIXIE_CACHE:-/var/cache/nm-scanguard}/sbuild
mirror=${TRIXIE_MIRROR:-http://deb.debian.org/debian}
releases=${*:-bookworm trixie}
out=$(mktemp -d /tmp/scanguard-archive-check.XXXXXX)
mkdir -p "$cache"
echo "==> archive check: $releases; results in $out"

for f in /etc/subuid /etc/subgid; do
    grep -q '^root:' "$f" 2>/dev/null || echo 'root:1000000:65536' >>"$f"
done

# 1. the source package, from the files git would commit (uncommitted work included)
version=$(sed -n '1s/^nm-scanguard (\([^)]*\)).*/\1/p' "$repo/debian/changelog")
src="$out/nm-scanguard-$version"
mkdir -p "$src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$repo" && xargs -0 cp --parents -t "$src")
(cd "$out" && dpkg-source -b "nm-scanguard-$version" >"$out/dpkg-source.log" 2>&1)
dsc="$out/nm-scanguard_$version.dsc"
echo "    source package: $(basename "$dsc")"

failed=""
for release in $releases; do
    tarball="$cache/$release-amd64.tar.zst"
    if [ ! -e "$tarball" ]; then
        echo "    $release: making the build chroot's tarball (mmdebstrap --variant=buildd)"
        mmdebstrap --variant=buildd --include=ca-certificates --skip=output/dev \
            "$release" "$tarball.tmp.tar.zst" "deb $mirror $release main" \
            >"$out/$release-mmdebstrap.log" 2>&1 && mv "$tarball.tmp.tar.zst" "$tarball" || {
            echo "FAIL $release: mmdebstrap (log $out/$release-mmdebstrap.log)"; failed="$failed $release"; continue; }
    fi
    mkdir -p "$out/$release"
    t=$(date +%s)
    # 2. sbuild: a clean chroot, Build-Depends only, the build's tests, lintian --pedantic.
    # The .changes names debian/changelog's distribution (unstable, where an upload goes), not
    # the release it was built on: lintian warns when the two differ.  sbuild's exit status
    # does not count lintian's verdict, its summary line does ("Lintian: pass").
    if (cd "$out/$release" && sbuild --chroot-mode=unshare --chroot="$tarball" \
            --dist="$(dpkg-parsechangelog -l "$repo/debian/changelog" -S Distribution)" \
            --arch-all --no-arch-any --source --run-lintian --lintian-opt=--pedantic \
            --lintian-opt=--fail-on=error,warning --no-run-autopkgtest --nolog "$dsc" \
            >"$out/$release/sbuild.log" 2>&1) \
        && grep -Eq '^Lintian: (pass|info)$' "$out/$release/sbuild.log"; then
        echo "PASS $release: sbuild --chroot-mode=unshare built and lintian --pedantic passed ($(( $(date +%s) - t )) s)"
    else
        echo "FAIL $release: sbuild (log $out/$release/sbuild.log):"; tail -25 "$out/$release/sbuild.log"
        failed="$failed $release"; continue
    fi
    grep -E '^[EWIPX]: ' "$out/$release/sbuild.log" | sed 's/^/        lintian: /' || true
    # 3. autopkgtest against the built package, in a fresh root from the same tarball
    t=$(date +%s)
    deb=$(ls "$out/$release"/nm-scanguard_*_all.deb)
    # --apt-upgrade: the tarball has no package lists (mmdebstrap empties them), and the tests'
    # Depends come from the archive, as on Debian's CI, which updates its testbeds the same way.
    # Exit 2: every test that ran passed and some were skipped.  dbus-api needs
    # isolation-container, which the unshare runner does not offer (Debian's CI runs it in lxc
    # or qemu); make clean-install runs it in its clean roots.  Any other non-zero: a failure.
    rc=0
    autopkgtest --apt-upgrade --output-dir "$out/$release/autopkgtest" "$deb" "$dsc" -- \
        unshare --release "$release" --tarball "$tarball" >"$out/$release/autopkgtest.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 2 ]; then
        echo "PASS $release: autopkgtest (unshare runner, exit $rc) in $(( $(date +%s) - t )) s:"
        sort -u "$out/$release/autopkgtest/summary" | sed 's/^/        /'
    else
        echo "FAIL $release: autopkgtest (log $out/$release/autopkgtest.log):"
        cat "$out/$release/autopkgtest/summary" 2>/dev/null || tail -25 "$out/$release/autopkgtest.log"
        failed="$failed $release"
    fi
done
[ -z "$failed" ] || { echo "==> archive check failed on:$failed (logs in $out)"; exit 1; }
echo "==> archive check passed: $releases"
