"""The programs the daemon and the CLI talk to, each behind one module: the system bus
connection (`bus`), wpa_supplicant (`supplicant`), NetworkManager (`nm`), the kernel's
rtnetlink link counters (`netlink`) and nl80211 scan events (`nl80211`).

A peer module speaks its peer's protocol and returns plain values; it never imports the
daemon, diagnose or the CLI (tests/unit/shared/test_layers.py)."""
