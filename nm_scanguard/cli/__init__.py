"""scanguardctl (`scanguardctl`), and the NetworkManager profile writing its `config set` does
through libnm (`profiles`).  It talks to the daemon over D-Bus only and imports nothing of it
(tests/unit/shared/test_layers.py)."""
