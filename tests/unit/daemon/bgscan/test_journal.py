"""The crash journal distrusts its file: every entry is checked, a bad file is set aside, nothing
at the path can hang or kill a start, and restoring many entries costs one write."""

import json
import os
import stat
import threading
import time

import pytest

from nm_scanguard.daemon.bgscan import journal as J
from nm_scanguard.peers.values import IFNAMSIZ, valid_bgscan, valid_ifname, valid_network_path
from nm_scanguard.daemon.bgscan.journal import Journal, JournalEntry

CAFE = "Café ☕"
IFACE0 = "/fi/w1/wpa_supplicant1/Interfaces/0"
NET0 = IFACE0 + "/Networks/0"
NET1 = "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/1"
NM_BGSCAN = "simple:30:-70:86400"


def net(i: int, n: int) -> str:
    return f"/fi/w1/wpa_supplicant1/Interfaces/{i}/Networks/{n}"


def write_raw(tmp_path, data) -> None:
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(tmp_path / "suspended.json", mode) as f:
        f.write(text)


# ---- interface names: the kernel's rules -------------------------------------------------------

@pytest.mark.parametrize("name", [
    "wlan0", "wlp2s0", "wlé0", "Café☕x", "Café☕Café",
    "é" * ((IFNAMSIZ - 1) // 2) + "x" * ((IFNAMSIZ - 1) % 2),  # exactly 15 bytes, multi-byte
    "$(id)",  # the kernel allows it; it is only ever a D-Bus string argument, never a shell word
])
def test_kernel_interface_names_are_accepted(name):
    assert 0 < len(name.encode()) < IFNAMSIZ
    assert valid_ifname(name)


@pytest.mark.parametrize("name", [
    "", ".", "..", "wlan0\n", "wlan0\r", "\nwlan0", "a/b", "wlan0:1", "wl an0", CAFE,
    "wl\tan0", "wl\u00a0an0", "wl\u2028an0", "wl\u3000an0",  # Unicode whitespace too
    "wl\x00an0", "wl\x7f", "wl\x1b[31m", "wl\x85",  # NUL, DEL, escape, C1 control
    "x" * IFNAMSIZ, "é" * (IFNAMSIZ // 2), "Café☕Café☕",  # 16 bytes, counted in UTF-8
    "wl\ud800",  # a lone surrogate cannot be UTF-8 at all
])
def test_names_the_kernel_refuses_are_refused(name):
    assert not valid_ifname(name)


def test_length_is_counted_in_bytes_not_characters():
    name = "Café☕Café☕"
    assert len(name) < IFNAMSIZ <= len(name.encode())
    assert not valid_ifname(name)
    assert valid_ifname(name[:-1])


# ---- network paths and bgscan values ---------------------------------------------------------

@pytest.mark.parametrize("path", [NET0, net(3, 17), net(12, 4294967295)])
def test_network_object_paths_are_accepted(path):
    assert valid_network_path(path)


@pytest.mark.parametrize("path", [
    "/n/0", "", "/", "$(id)", CAFE, NET0 + "\n", NET0 + "/", NET0 + "/x",
    "/fi/w1/wpa_supplicant1/Interfaces/0", "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/",
    IFACE0 + "/Networks/../1", "/fi/w1/wpa_supplicant1/Interfaces/../0/Networks/1",
    IFACE0 + "/Networks/01", IFACE0 + "/Networks/-1", IFACE0 + "/Networks/+1",
    IFACE0 + "/Networks/\u0663",  # an Arabic-Indic digit is not decimal here
    IFACE0 + "/BSSs/1", "/" + NET0, IFACE0 + "/Networks/1 ",
    " " + NET0, None, 3,
])
def test_other_paths_are_refused(path):
    assert not valid_network_path(path)


@pytest.mark.parametrize("value", [
    NM_BGSCAN, "simple:30:-65:300",  # NetworkManager's two values
    "simple:64:-70:360", "simple:1:0:1",  # other managers' (ChromeOS shill) and the contract test's
    "simple:30:-70:86400:2",  # wpa_supplicant 2.11's fifth field: BSS transition queries
])
def test_bgscan_settings_are_accepted(value):
    assert valid_bgscan(value)


@pytest.mark.parametrize("value", [
    # Replayed by root's wpa_supplicant: learn's last field is the file it writes its database
    # to, so a journal entry could make it write anywhere.  Only simple's numbers are kept.
    "learn:30:-70:3600:/etc/shadow", "learn:30:-65:300:/var/lib/wpa_supplicant/learn",
    "learn:30:-70:3600", "simple:30:-70:3600:/etc/shadow", "simple:30:-70:86400:2:9",
    "simple", "simple:", "simple:30", "simple:30:-70", "simple:30:-70:", "simple::-70:86400",
    "simple:-30:-70:86400", "simple:30:+70:86400", "simple:30:-70:-86400", "simple:30:--70:86400",
    "simple:30:-70:86400 ", " simple:30:-70:86400", "simple:30:-70:1234567890",
    "simple:30:-70:\u0668\u0666\u0664\u0660\u0660",  # Arabic-Indic digits are not decimal here
    "", "$(id)", "simple:$(id)\n", 'simple:"30"', "simple:'30'", 'simple:30" -o "x', "simple:30\\",
    "Simple:30:-70:86400", "1simple", ":30:-70", "simple;30", "simple:30:-70:86400\n",
    "simple:30:-70:86400\x00", "simple:\t30:-70:86400", "simple:" + CAFE, "simple:30:-70:86400é",
    CAFE, "a" * 300, None, 30,
])
def test_other_bgscan_values_are_refused(value):
    assert not valid_bgscan(value)


def test_a_journal_naming_a_file_for_wpa_supplicant_restores_nothing(tmp_path, caplog):
    """The journal is replayed into root's wpa_supplicant: an entry whose bgscan names a file
    (a compromised daemon's, or a tampered journal's) is dropped and logged, the others kept."""
    (tmp_path / "suspended.json").write_text(json.dumps({
        NET0: {"ifname": "wlan0", "bgscan": "learn:30:-70:3600:/etc/shadow"},
        NET1: {"ifname": "wlan0", "bgscan": NM_BGSCAN}}))
    assert Journal(str(tmp_path)).load() == {NET1: JournalEntry("wlan0", NM_BGSCAN)}
    assert "/etc/shadow" in caplog.text


# ---- recording and reading -------------------------------------------------------------------

@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
def test_record_is_visible_to_a_new_instance(tmp_path, ifname):
    Journal(str(tmp_path)).record(NET0, ifname, NM_BGSCAN)
    assert Journal(str(tmp_path)).load() == {NET0: JournalEntry(ifname=ifname, bgscan=NM_BGSCAN)}


def test_file_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        j = Journal(str(tmp_path / "state"))
        j.record(NET0, "wlan0", NM_BGSCAN)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(j.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700


def test_forget_removes_entry_and_leaves_no_temp_files(tmp_path):
    j = Journal(str(tmp_path))
    j.record(NET0, "wlan0", NM_BGSCAN)
    j.record(NET1, "wlan1", "simple:30:-65:300")
    j.forget(NET0)
    assert Journal(str(tmp_path)).load() == {NET1: JournalEntry("wlan1", "simple:30:-65:300")}
    assert os.listdir(tmp_path) == ["suspended.json"]


def test_a_new_instance_does_not_overwrite_what_the_previous_one_left(tmp_path):
    Journal(str(tmp_path)).record(NET0, "wlan0", NM_BGSCAN)
    Journal(str(tmp_path)).record(NET1, "wlan0", "simple:30:-65:300")  # no load() first
    assert set(Journal(str(tmp_path)).load()) == {NET0, NET1}


def test_a_journal_of_the_former_state_module_is_read(tmp_path):
    # state.py wrote the same shape, indented: an upgrade must not lose a suspended bgscan.
    (tmp_path / "suspended.json").write_text(json.dumps(
        {NET0: {"ifname": "wlan0", "bgscan": NM_BGSCAN}}, indent=1, sort_keys=True))
    assert Journal(str(tmp_path)).load() == {NET0: JournalEntry("wlan0", NM_BGSCAN)}


@pytest.mark.parametrize("network, ifname, bgscan", [
    ("/n/0", "wlan0", NM_BGSCAN), (NET0, "wlan0\n", NM_BGSCAN), (NET0, CAFE, NM_BGSCAN),
    (NET0, "wlan0", ""), (NET0, "wlan0", "simple:" + CAFE), (NET0, "wlan0", '"simple"'),
])
def test_record_refuses_what_load_would_drop(tmp_path, network, ifname, bgscan):
    j = Journal(str(tmp_path))
    with pytest.raises(ValueError):
        j.record(network, ifname, bgscan)
    assert j.entries() == {}
    assert not (tmp_path / "suspended.json").exists()


def test_failed_record_is_not_remembered(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    j = Journal(str(blocker))
    with pytest.raises(OSError):
        j.record(NET0, "wlan0", NM_BGSCAN)
    assert j.entries() == {}


# ---- one bad entry is dropped, the rest kept ---------------------------------------------------

GOOD = {"ifname": "wlan0", "bgscan": NM_BGSCAN}
BAD_ENTRIES = {
    "/n/0": GOOD,  # key not an object path
    "$(id)": GOOD,
    "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/../../x": GOOD,
    NET0 + "\n": GOOD,
    CAFE: GOOD,
    net(0, 10): "wlan0",  # entries that are not objects
    net(0, 11): ["wlan0", NM_BGSCAN],
    net(0, 12): None,
    net(0, 13): 7,
    net(0, 14): {"ifname": "wlan0\n", "bgscan": NM_BGSCAN},
    net(0, 15): {"ifname": "..", "bgscan": NM_BGSCAN},
    net(0, 16): {"ifname": CAFE, "bgscan": NM_BGSCAN},
    net(0, 17): {"ifname": "Café☕Café☕", "bgscan": NM_BGSCAN},  # 16 bytes
    net(0, 18): {"ifname": 0, "bgscan": NM_BGSCAN},
    net(0, 19): {"bgscan": NM_BGSCAN},
    net(0, 20): {"ifname": "wlan0", "bgscan": ""},
    net(0, 21): {"ifname": "wlan0", "bgscan": 'simple:30" -o "x'},
    net(0, 22): {"ifname": "wlan0", "bgscan": "$(id)"},
    net(0, 23): {"ifname": "wlan0", "bgscan": "simple:" + CAFE},
    net(0, 24): {"ifname": "wlan0", "bgscan": 30},
    net(0, 25): {"ifname": "wlan0"},
}
GOOD_ENTRIES = {
    net(0, 1): GOOD,
    net(1, 2): {"ifname": "wlé0", "bgscan": "simple:30:-65:300", "note": "extra keys are ignored"},
}


def test_each_bad_entry_is_dropped_and_logged_the_rest_kept(tmp_path, caplog):
    write_raw(tmp_path, {**BAD_ENTRIES, **GOOD_ENTRIES})
    loaded = Journal(str(tmp_path)).load()
    assert loaded == {net(0, 1): JournalEntry("wlan0", NM_BGSCAN),
                      net(1, 2): JournalEntry("wlé0", "simple:30:-65:300")}
    dropped = [r for r in caplog.records if "dropping entry" in r.getMessage()]
    assert len(dropped) == len(BAD_ENTRIES)
    for key in BAD_ENTRIES:
        assert any(repr(key) in r.getMessage() for r in dropped), key
    assert (tmp_path / "suspended.json").exists()  # the file is kept: only entries were bad


def test_dropped_entries_leave_the_file_at_the_next_write(tmp_path):
    write_raw(tmp_path, {**BAD_ENTRIES, **GOOD_ENTRIES})
    j = Journal(str(tmp_path))
    j.load()
    with j.batch():
        pass  # nothing forgotten, but load() dropped entries: the file is rewritten
    assert set(json.loads((tmp_path / "suspended.json").read_text())) == set(GOOD_ENTRIES)


def test_a_long_bad_key_is_cut_in_the_log(tmp_path, caplog):
    key = "/x" * 5000
    write_raw(tmp_path, {key: GOOD})
    assert Journal(str(tmp_path)).load() == {}
    (message,) = [r.getMessage() for r in caplog.records if "dropping entry" in r.getMessage()]
    assert key not in message and repr(key)[:J.SHOW - 1] + "…" in message


# ---- a file that cannot be used at all ------------------------------------------------------

def deep_nesting() -> str:
    return "[" * (J.MAX_BYTES - 1)


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON"),  # not UTF-8
    ("", "not valid JSON"),
    ("[]", "a JSON array, not an object"),
    ('"' + NET0 + '"', "a JSON string, not an object"),
    ("null", "a JSON null, not an object"),
    ("true", "a JSON boolean, not an object"),
    ("3.5", "a JSON number, not an object"),
    (deep_nesting, "not valid JSON"),  # RecursionError in the parser, not a crash
    ('{"x": ' + "9" * 5000 + "}", "not valid JSON"),  # above Python's int digit limit
])
def test_unusable_file_is_reported_set_aside_and_replaced(tmp_path, caplog, content, problem):
    write_raw(tmp_path, content() if callable(content) else content)
    j = Journal(str(tmp_path))
    assert j.load() == {}
    assert problem in caplog.text and str(tmp_path / "suspended.json") in caplog.text
    assert (tmp_path / "suspended.json.bad").exists()
    j.record(NET0, "wlan0", NM_BGSCAN)
    assert Journal(str(tmp_path)).load() == {NET0: JournalEntry("wlan0", NM_BGSCAN)}


def test_oversized_file_is_refused_even_if_valid(tmp_path, caplog):
    entries = {net(0, n): GOOD for n in range(J.MAX_BYTES // 50)}
    write_raw(tmp_path, entries)
    assert os.path.getsize(tmp_path / "suspended.json") > J.MAX_BYTES
    assert Journal(str(tmp_path)).load() == {}
    assert f"more than the {J.MAX_BYTES}" in caplog.text
    assert (tmp_path / "suspended.json.bad").exists()


def test_a_file_at_the_limit_is_read(tmp_path):
    entries = {}
    n = 0
    while len(json.dumps({**entries, net(0, n): GOOD})) <= J.MAX_BYTES:
        entries[net(0, n)] = GOOD
        n += 1
    write_raw(tmp_path, entries)
    assert len(Journal(str(tmp_path)).load()) == len(entries)


def load_in_thread(j: Journal, seconds: float = 5.0):
    """load() in a thread, so that a regression that blocks fails the test instead of hanging."""
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", j.load()), daemon=True)
    start = time.monotonic()
    t.start()
    t.join(seconds)
    return t, result, time.monotonic() - start


def test_symlink_to_a_fifo_neither_blocks_nor_is_followed(tmp_path, caplog):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "suspended.json").symlink_to(fifo)
    j = Journal(str(tmp_path))
    thread, result, took = load_in_thread(j)
    if thread.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load() blocked on a symlink to a FIFO")
    print(f"\nload() of a symlink to a FIFO returned in {took * 1000:.1f} ms")
    assert result["v"] == {}
    assert "symbolic link" in caplog.text
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # the target is left alone
    assert os.path.islink(tmp_path / "suspended.json.bad")
    j.record(NET0, "wlan0", NM_BGSCAN)
    assert stat.S_ISREG(os.lstat(tmp_path / "suspended.json").st_mode)


def test_a_fifo_itself_does_not_block(tmp_path, caplog):
    os.mkfifo(tmp_path / "suspended.json")
    thread, result, _ = load_in_thread(Journal(str(tmp_path)))
    if thread.is_alive():
        os.close(os.open(tmp_path / "suspended.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load() blocked on a FIFO")
    assert result["v"] == {}
    assert "a FIFO (named pipe), not a regular file" in caplog.text


def test_symlink_to_a_valid_journal_is_not_followed(tmp_path, caplog):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({NET0: GOOD}))
    (tmp_path / "suspended.json").symlink_to(elsewhere)
    assert Journal(str(tmp_path)).load() == {}
    assert "symbolic link" in caplog.text
    assert json.loads(elsewhere.read_text()) == {NET0: GOOD}  # the target is untouched


def test_directory_is_set_aside_so_writes_work_again(tmp_path, caplog):
    (tmp_path / "suspended.json").mkdir()
    (tmp_path / "suspended.json" / "junk").write_text("x")
    j = Journal(str(tmp_path))
    assert j.load() == {}
    assert "a directory, not a regular file" in caplog.text
    j.record(NET0, "wlan0", NM_BGSCAN)
    assert Journal(str(tmp_path)).load() == {NET0: JournalEntry("wlan0", NM_BGSCAN)}


def test_an_old_bad_file_in_the_way_does_not_stop_setting_aside(tmp_path):
    (tmp_path / "suspended.json.bad").mkdir()  # a directory where the file would go
    write_raw(tmp_path, "{not json")
    j = Journal(str(tmp_path))
    assert j.load() == {}
    j.record(NET0, "wlan0", NM_BGSCAN)
    assert Journal(str(tmp_path)).load() == {NET0: JournalEntry("wlan0", NM_BGSCAN)}


# ---- batched writes ------------------------------------------------------------------------

def test_without_a_batch_each_forget_writes(tmp_path, writes):
    j = Journal(str(tmp_path))
    j.record(NET0, "wlan0", NM_BGSCAN)
    j.record(NET1, "wlan0", NM_BGSCAN)
    before = writes["n"]
    j.forget(NET0)
    j.forget(NET1)
    j.forget(NET1)  # already gone: nothing to write
    assert writes["n"] - before == 2


def test_forgetting_two_writes_once(tmp_path, writes):
    j = Journal(str(tmp_path))
    with j.batch():
        pass
    j.record(NET0, "wlan0", NM_BGSCAN)
    j.record(NET1, "wlan0", NM_BGSCAN)
    before = writes["n"]
    j.forget(NET0, NET1)
    assert writes["n"] - before == 1
    assert Journal(str(tmp_path)).load() == {}


@pytest.mark.parametrize("in_batch", [False, True])
def test_a_forget_that_cannot_be_written_is_logged_and_written_by_the_next_write(
        tmp_path, monkeypatch, caplog, in_batch):
    j = Journal(str(tmp_path))
    j.record(NET0, "wlan0", NM_BGSCAN)
    j.record(NET1, "wlan0", NM_BGSCAN)
    real = os.replace

    def full(*_args, **_kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    if in_batch:
        with j.batch():
            j.forget(NET0)
    else:
        j.forget(NET0)  # not raised: a stale entry only makes a later start look again
    assert "cannot update" in caplog.text and "No space left on device" in caplog.text
    assert NET0 in Journal(str(tmp_path)).load() and NET0 not in j.entries()
    monkeypatch.setattr(os, "replace", real)
    j.record(NET1, "wlan1", NM_BGSCAN)
    assert Journal(str(tmp_path)).load() == {NET1: JournalEntry("wlan1", NM_BGSCAN)}


def test_record_inside_a_batch_is_on_disk_at_once(tmp_path):
    # The caller sets "" right after record(): the entry must not wait for the batch to end.
    j = Journal(str(tmp_path))
    with j.batch():
        j.record(NET0, "wlan0", NM_BGSCAN)
        assert NET0 in Journal(str(tmp_path)).load()


def test_a_batch_that_raises_still_writes(tmp_path):
    j = Journal(str(tmp_path))
    j.record(NET0, "wlan0", NM_BGSCAN)
    with pytest.raises(KeyError):
        with j.batch():
            j.forget(NET0)
            raise KeyError("boom")
    assert Journal(str(tmp_path)).load() == {}


def test_2000_entries_forgotten_in_a_batch_cost_one_write(tmp_path, writes):
    n = 2000
    big = 1 << 20  # 2000 entries are ~190 KiB, beyond MAX_BYTES: a real journal holds a handful
    write_raw(tmp_path, {net(0, i): GOOD for i in range(n)})
    j = Journal(str(tmp_path), max_bytes=big)
    start = time.perf_counter()
    entries = j.load()
    with j.batch():
        for key in entries:
            j.forget(key)
    took = time.perf_counter() - start
    print(f"\nload + forget of {len(entries)} entries in a batch: {took * 1000:.1f} ms, "
          f"{writes['n']} write(s)")
    assert len(entries) == n
    assert writes["n"] == 1
    assert Journal(str(tmp_path)).load() == {}
