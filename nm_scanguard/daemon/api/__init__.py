"""The D-Bus API scanguardd exports, and the hold table behind its Hold method.

methods     our bus API: its methods, who may call them
callers     who is calling: the bus's uid, polkit's answer, polkitd's helper
holders     each holder watched until it leaves the bus
properties  what the object shows (Devices built here) and its changes sent
export      serving an object from its XML
holds       the hold table and its caps

It may import guard/, peers/, the package's top modules and the daemon's shared ones (changes,
throttle); never bgscan/ nor the daemon's composition (tests/unit/shared/test_layers.py).
"""
