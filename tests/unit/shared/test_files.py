"""nm_scanguard.files: the bounded read and the atomic write the journal, the settings file and
the scan-deferral file share (their own tests check each one's wording)."""

from __future__ import annotations

import os
import stat

import pytest

from nm_scanguard.files import Unreadable, kind, read_regular, write_atomic

NAMES = ["plain.json", "Café ☕.json"]


@pytest.mark.parametrize("name", NAMES)
def test_a_regular_file_is_read_whole(tmp_path, name):
    path = tmp_path / name
    path.write_bytes("Café ☕\n".encode())
    assert read_regular(str(path), 64, follow_symlinks=False) == "Café ☕\n".encode()


def test_nothing_there_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "missing"), 64, follow_symlinks=True)


def test_a_symlink_is_refused_only_when_not_followed(tmp_path):
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_regular(str(tmp_path / "link"), 64, follow_symlinks=True) == b"x"
    with pytest.raises(Unreadable) as e:
        read_regular(str(tmp_path / "link"), 64, follow_symlinks=False)
    assert e.value.why == "symlink"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Unreadable) as e:
        read_regular(str(tmp_path / "fifo"), 64, follow_symlinks=True)
    assert e.value.why == "kind" and kind(e.value.mode) == "a FIFO (named pipe)"


def test_a_directory_and_a_device_are_named(tmp_path):
    with pytest.raises(Unreadable) as e:
        read_regular(str(tmp_path), 64, follow_symlinks=True)
    assert kind(e.value.mode) == "a directory"
    with pytest.raises(Unreadable) as e:
        read_regular("/dev/zero", 64, follow_symlinks=True)
    assert e.value.why == "kind" and kind(e.value.mode) == "a character device"
    assert kind(stat.S_IFREG) is None


def test_a_file_over_the_limit_is_refused_with_its_size(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 65)
    with pytest.raises(Unreadable) as e:
        read_regular(str(tmp_path / "big"), 64, follow_symlinks=True)
    assert (e.value.why, e.value.size) == ("size", 65)
    (tmp_path / "exact").write_bytes(b"x" * 64)
    assert len(read_regular(str(tmp_path / "exact"), 64, follow_symlinks=True)) == 64


def test_a_path_that_cannot_be_opened_says_why(tmp_path):
    """A path through a regular file cannot be opened, as root too (root, who runs these
    tests, reads a mode-000 file, so a refused permission is not checked here)."""
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(Unreadable) as e:
        read_regular(str(tmp_path / "file" / "x"), 64, follow_symlinks=True)
    assert e.value.why == "open" and isinstance(e.value.error, NotADirectoryError)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("durable", [False, True])
def test_an_atomic_write_replaces_the_file_with_its_mode_and_leaves_nothing_beside(
        tmp_path, name, durable):
    path = tmp_path / name
    path.write_bytes(b"old")
    write_atomic(str(path), "Café ☕".encode(), mode=0o640, durable=durable)
    assert path.read_bytes() == "Café ☕".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == [name]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path, monkeypatch):
    path = tmp_path / "suspended.json"
    path.write_bytes(b"old")

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("nm_scanguard.files.os.replace", no_rename)
    with pytest.raises(OSError):
        write_atomic(str(path), b"new", mode=0o600, durable=True)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["suspended.json"]
