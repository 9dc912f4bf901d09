"""The bgscan core: what each network we touched is in (suspension_table: the rule, pure, and
the Ledger: the states and the crash journal written from them), the calls that suspend and
restore its bgscan and replay the journal (suspension), what counts as evidence from
wpa_supplicant (evidence), and the journal file (journal).  It imports only peers/ and the
package's top modules; code outside imports what is below, never a module of it (test_layers.py).
"""

from .journal import DEFAULT_STATE_DIR, Journal
from .suspension import Bgscan, NothingToSuspend
from .suspension_table import Suspended, kept

__all__ = ["DEFAULT_STATE_DIR", "Bgscan", "Journal", "NothingToSuspend", "Suspended", "kept"]
