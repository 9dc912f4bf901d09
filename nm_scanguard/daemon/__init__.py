"""scanguardd.  At the top, its composition: the process (`entry`, `service`), its wiring
(`daemon`), the guards by interface (`guard_set`), the off switch, the polkit scan deferral and
systemd's status line, and what every part shares (`changes`, `throttle`).  Below, its parts:
`guard/` (one interface's guard, deciding with its policy), `bgscan/` (the bgscan core: the
suspension table, the ledger, the calls, the crash journal) and `api/` (the D-Bus API and the
hold table).

Only this package imports it: diagnose and the CLI reach the daemon over D-Bus; who may import
whom inside it is in tests/unit/shared/test_layers.py."""
