"""The package VM's checks each start from a state they verified (tests/lab/package_vm.py): the
private-profile check runs on this tree's package, and when the upgrade check stopped early and
left the previous release installed with its conffile edited, the check purges before it
installs (a plain install over an edited conffile stops at dpkg's prompt)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.lab import package_vm


class Stop(Exception):
    """Ends the check once the commands under test have been issued."""


class LeftByAFailedUpgrade:
    """A guest where the previous release (0.1.0) is installed, conffile edited."""

    def __init__(self, stop_at: str = "systemctl is-active"):
        self.installed = "0.1.0"
        self.commands: list[str] = []
        self.stop_at = stop_at
        self.vm = SimpleNamespace(background=False)

    def run(self, cmd: str, timeout: float = 60) -> tuple[int, str, str]:
        self.commands.append(cmd)
        if cmd.startswith(self.stop_at):
            raise Stop(cmd)
        if cmd.startswith("dpkg-query"):
            if self.installed is None:
                return 1, "", "dpkg-query: no packages found matching nm-scanguard"
            return 0, f"install ok installed {self.installed}", ""
        if cmd.startswith("apt-get purge"):
            self.installed = None
        elif cmd.startswith("apt-get install"):
            assert self.installed is None, "installed over the edited conffile: dpkg would ask"
            self.installed = cmd.rsplit("_", 2)[1]
        return 0, "", ""

    def check(self, cmd: str, timeout: float = 60) -> str:
        rc, out, err = self.run(cmd, timeout)
        assert rc == 0, err
        return out

    def journal(self, unit: str) -> str:
        return ""


def test_the_private_profile_check_purges_what_a_failed_upgrade_left():
    lab = LeftByAFailedUpgrade()
    seen = package_vm.private_profile_check(lab, "/lab/pkg/nm-scanguard_0.2.0_all.deb", 300)
    assert "Stop" in seen["failed"]
    apt = [c for c in lab.commands if c.startswith("apt-get")]
    assert apt == ["apt-get purge -y -q nm-scanguard",
                   "apt-get install -y -q /lab/pkg/nm-scanguard_0.2.0_all.deb"]
    assert seen["installed"] == "0.2.0"


def test_the_private_profile_check_keeps_this_trees_package():
    lab = LeftByAFailedUpgrade()
    lab.installed = "0.2.0"
    seen = package_vm.private_profile_check(lab, "/lab/pkg/nm-scanguard_0.2.0_all.deb", 300)
    assert "Stop" in seen["failed"]
    assert not [c for c in lab.commands if c.startswith("apt-get")]
    assert seen["installed"] == "0.2.0"


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_the_fake_refuses_an_install_over_an_edited_conffile(version):
    lab = LeftByAFailedUpgrade()
    with pytest.raises(AssertionError, match="dpkg would ask"):
        lab.check(f"apt-get install -y -q /lab/pkg/nm-scanguard_{version}_all.deb")
