"""scanguardd: the process (`entry`, `service`), its wiring (`daemon`), the guard of each
interface (`guard`, deciding with `policy` and suspending bgscan through `suspension` and
its table), the crash journal, holds, the polkit scan deferral, and the D-Bus API it exports
(`api`, `export`).

Only this package imports it: diagnose and the CLI reach the daemon over D-Bus
(tests/unit/shared/test_layers.py)."""
