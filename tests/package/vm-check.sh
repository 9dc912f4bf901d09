#!/bin/bash
# Install the built .deb on a booted Debian 12 system (the lab VM) and check it the way a user
# meets it: hardened service running as its own user, STATUS= line, CLI without root, bus
# activation, crash recovery, clean removal and purge.
#
#   tests/package/vm-check.sh ../nm-scanguard_0.1.0_all.deb [WIFI_INTERFACE]
#
# Needs root, systemd as PID 1, NetworkManager and wpa_supplicant running, and apt able to
# fetch the dependencies.  With WIFI_INTERFACE (connected, NetworkManager-managed) it also
# checks that a hold suspends bgscan and that `apt-get remove` puts the original back.
# One PASS/FAIL line per check; exit status 1 if any check failed.  Changes the system: it
# installs and purges nm-scanguard and creates (then deletes) the user sgcheck.
set -u

deb=$(realpath "${1:?usage: $0 PACKAGE.deb [WIFI_INTERFACE]}")
iface=${2:-}
name=io.github.nm_scanguard.ScanGuard1
path=/io/github/nm_scanguard/ScanGuard1
user=sgcheck
out=$(mktemp)
fails=0

pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }
note() { echo "NOTE  $*"; }
# check DESCRIPTION COMMAND...: run it, PASS on exit 0, else FAIL with its output indented.
check() {
    local what=$1; shift
    if "$@" >"$out" 2>&1; then pass "$what"; else fail "$what"; sed 's/^/      /' "$out"; fi
}
# eventually SECONDS COMMAND...: retry until it succeeds (for state that settles).
eventually() {
    local limit=$1; shift
    local end=$((SECONDS + limit))
    until "$@"; do [ "$SECONDS" -ge "$end" ] && return 1; sleep 0.2; done
}
mainpid() { systemctl show -p MainPID --value scanguard; }
# refused COMMAND...: the command fails, and because of authorisation (not a typo or a crash).
refused() { ! "$@" >"$out.r" 2>&1 && grep -qiE 'denied|not authori[sz]ed|NotAuthorized' "$out.r"; }
uninstalled() {
    local st; st=$(dpkg-query -W -f='${db:Status-Status}' nm-scanguard 2>/dev/null)
    [ -z "$st" ] || [ "$st" = not-installed ]
}
# files_left LIST: print the files (not directories) of a `dpkg -L` list that still exist.
files_left() {
    local f
    while read -r f; do
        if [ ! -d "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; }; then echo "$f"; fi
    done <"$1"
}
bgscan_is() { [ "$(bgscan "$1")" = "$2" ]; }
status_field() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
# bgscan of IFACE's current wpa_supplicant network, as wpa_supplicant reports it (quoted).
bgscan() {
    local ifpath netpath
    ifpath=$(busctl --json=short call fi.w1.wpa_supplicant1 /fi/w1/wpa_supplicant1 \
        fi.w1.wpa_supplicant1 GetInterface s "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0])')
    netpath=$(busctl --json=short get-property fi.w1.wpa_supplicant1 "$ifpath" \
        fi.w1.wpa_supplicant1.Interface CurrentNetwork | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"])')
    busctl --json=short get-property fi.w1.wpa_supplicant1 "$netpath" \
        fi.w1.wpa_supplicant1.Network Properties |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["data"].get("bgscan", {}).get("data", ""))'
}

[ "$(id -u)" = 0 ] || { echo "run as root"; exit 2; }
[ -d /run/systemd/system ] || { echo "systemd is not PID 1 here"; exit 2; }
export DEBIAN_FRONTEND=noninteractive

echo "== install"
if [ -n "$iface" ]; then original=$(bgscan "$iface"); note "bgscan on $iface before install: $original"; fi
check "apt-get install $deb" apt-get install -y -q "$deb"
dpkg -L nm-scanguard | sort >"$out.files"
check "service active" eventually 15 systemctl is-active --quiet scanguard
check "enabled for multi-user.target" systemctl is-enabled --quiet scanguard
pid=$(mainpid)
check "main process runs as user scanguard" test "$(status_field "$pid" Uid)" = "$(id -u scanguard)"
netdev=$(getent group netdev | cut -d: -f3)
check "supplementary group netdev ($netdev)" grep -qw "$netdev" <<<"$(status_field "$pid" Groups)"
check "no effective capabilities" test "$(status_field "$pid" CapEff)" = 0000000000000000
check "no_new_privs set" test "$(status_field "$pid" NoNewPrivs)" = 1
check "seccomp filter active" test "$(status_field "$pid" Seccomp)" = 2
check "owns $name on the system bus" busctl status "$name"
check "STATUS= line in systemctl status" eventually 15 \
    sh -c 'systemctl status scanguard --no-pager | grep -q "^ *Status: \""'
systemctl status scanguard --no-pager | grep "Status:" | sed 's/^ */      /'
systemd-analyze security scanguard --no-pager 2>/dev/null | tail -1 | sed 's/^/      online: /'

echo "== as an unprivileged user"
id "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh "$user"
check "scanguardctl status works without root" runuser -u "$user" -- scanguardctl status
sed 's/^/      /' "$out"
check "scanguardctl status --json is JSON" \
    sh -c "runuser -u $user -- scanguardctl status --json | python3 -m json.tool"
check "properties readable" runuser -u "$user" -- busctl get-property "$name" "$path" "$name" Version
check "DeviceEvent refused" refused runuser -u "$user" -- busctl call "$name" "$path" "$name" DeviceEvent sss wlan0 up ""
check "Reload refused without admin authentication" \
    refused runuser -u "$user" -- busctl call "$name" "$path" "$name" Reload
check "other interfaces refused by the bus policy" \
    refused runuser -u "$user" -- busctl call "$name" "$path" org.freedesktop.DBus.ObjectManager GetManagedObjects

echo "== life cycle"
check "systemctl reload keeps it running" sh -c 'systemctl reload scanguard && sleep 1 && systemctl is-active --quiet scanguard'
kill -KILL "$pid"
check "restarted after SIGKILL (Restart=on-failure)" \
    eventually 15 sh -c "systemctl is-active --quiet scanguard && [ \"\$(systemctl show -p MainPID --value scanguard)\" != $pid ]"
check "/run/scanguard kept across the restart" test -d /run/scanguard
systemctl stop scanguard
check "bus activation starts the unit" sh -c \
    "runuser -u $user -- busctl call $name $path org.freedesktop.DBus.Peer Ping && systemctl is-active --quiet scanguard"
if journalctl -u scanguard -b --no-pager -o cat | grep -E 'Traceback|Operation not permitted|Read-only file system|MemoryError|Bad system call' >"$out"; then
    fail "journal free of sandbox errors"; sed 's/^/      /' "$out"
else
    pass "journal free of sandbox errors"
fi
if journalctl -k -b --no-pager | grep -E 'audit.*(type=1326|SECCOMP).*scanguard' >"$out"; then
    fail "no seccomp denials logged by the kernel"; sed 's/^/      /' "$out"
else
    pass "no seccomp denials logged by the kernel"
fi

if [ -n "$iface" ]; then
    echo "== bgscan on $iface"
    scanguardctl hold --reason vm-check --interface "$iface" -- sleep 120 &
    holder=$!
    check "a hold suspends bgscan" eventually 15 bgscan_is "$iface" ""
fi

echo "== remove"
check "apt-get remove" apt-get remove -y -q nm-scanguard
check "service stopped" sh -c '! systemctl is-active --quiet scanguard'
if [ -n "$iface" ]; then
    check "bgscan restored on removal" test "$(bgscan "$iface")" = "$original"
    kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
fi
check "conffile kept until purge" test -f /etc/scanguard/scanguard.conf

echo "== purge"
check "apt-get purge" apt-get purge -y -q nm-scanguard
check "package gone from dpkg" uninstalled
check "/etc/scanguard gone" test ! -e /etc/scanguard
check "/run/scanguard gone" test ! -e /run/scanguard
check "no unit symlinks left" sh -c '! find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled -name "scanguard*" | grep -q .'
check "every packaged file gone" test -z "$(files_left "$out.files")"
check "no byte-code left" test ! -e /usr/lib/python3/dist-packages/nm_scanguard
check "name no longer activatable" sh -c "! busctl status $name"
if getent passwd scanguard >/dev/null; then
    note "system user scanguard kept (Debian does not remove system users on purge)"
fi

userdel "$user" 2>/dev/null
rm -f "$out" "$out.files" "$out.r"
echo "== $fails check(s) failed"
[ "$fails" = 0 ]
