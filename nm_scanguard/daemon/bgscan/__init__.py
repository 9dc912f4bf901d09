"""The bgscan core: what each network we touched is in, the calls that suspend and restore its
bgscan, and the crash journal written from those states.

suspension_table  each network's state, event → state (pure)
ledger            what each network is in; the journal written from those states
suspension        the calls each state makes (suspend, recheck, restore)
evidence          what shows an object gone, or a Set landed, before an entry goes
replay            the crash journal's replay (left over, left behind)
journal           the crash journal (validated)

It imports only peers/ and the package's top modules.  Code outside this folder imports it
through this package, never a module of it (tests/unit/shared/test_layers.py): what it uses is
below.
"""

from .journal import DEFAULT_STATE_DIR, Journal
from .ledger import Suspended, kept
from .suspension import Bgscan, NothingToSuspend

__all__ = ["DEFAULT_STATE_DIR", "Bgscan", "Journal", "NothingToSuspend", "Suspended", "kept"]
