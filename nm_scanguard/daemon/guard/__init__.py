"""One interface's guard: each sample read, decided and acted on, and the parts it is made of.

guard       one interface: each sample, decide, suspend/restore (through bgscan/)
policy      rates + signal + holds → what should be (pure, no I/O)
sampling    its sampling loop and counters → rates
roaming     its signal floor: the signal, our own scans, which scans are ours
targeted    roaming by targeted scans of the network's other access points
station     where the station is, the access points it could move to
candidates  the access points each profile's network is known to have
scans       its scans: abort, refused requests, who asked, counts
problems    its problems, each logged once per change
report      the state it shows and its status
who_asked   who asked for each scan: the polkit rule's reports, the kernel's events

It may import bgscan/ (through its package), peers/, the package's top modules and the
daemon's shared ones (changes); never api/ nor the daemon's composition
(tests/unit/shared/test_layers.py).
"""
