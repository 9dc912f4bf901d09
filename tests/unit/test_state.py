"""The crash journal: written before suspending, survives a new instance, tolerates damage."""

import json
import os

from nm_scanguard.state import Journal


def test_record_is_visible_to_a_new_instance(tmp_path):
    j = Journal(str(tmp_path))
    j.record("/fi/w1/wpa_supplicant1/Interfaces/0/Networks/0", "wlan0", "simple:30:-70:86400")
    again = Journal(str(tmp_path)).load()
    assert again == {"/fi/w1/wpa_supplicant1/Interfaces/0/Networks/0":
                     {"ifname": "wlan0", "bgscan": "simple:30:-70:86400"}}


def test_forget_removes_entry_and_leaves_no_temp_files(tmp_path):
    j = Journal(str(tmp_path))
    j.record("/n/0", "wlan0", "a")
    j.record("/n/1", "wlan1", "b")
    j.forget("/n/0")
    assert Journal(str(tmp_path)).load() == {"/n/1": {"ifname": "wlan1", "bgscan": "b"}}
    assert os.listdir(tmp_path) == ["suspended.json"]


def test_state_dir_is_created(tmp_path):
    j = Journal(str(tmp_path / "run" / "scanguard"))
    j.record("/n/0", "wlan0", "a")
    assert (tmp_path / "run" / "scanguard" / "suspended.json").exists()


def test_damaged_journal_is_reported_not_fatal(tmp_path, caplog):
    (tmp_path / "suspended.json").write_text("{not json")
    assert Journal(str(tmp_path)).load() == {}
    assert "cannot read" in caplog.text


def test_entries_of_wrong_shape_are_dropped(tmp_path):
    (tmp_path / "suspended.json").write_text(json.dumps({"/n/0": {"bgscan": 3}, "/n/1": "x",
                                                         "/n/2": {"bgscan": "simple", "ifname": "w"}}))
    assert Journal(str(tmp_path)).load() == {"/n/2": {"ifname": "w", "bgscan": "simple"}}
