"""Fixtures for every D-Bus test: a private system bus, the mocked peers, polling.

- ``system_bus``: a dbus-daemon of type "system" that allows everything, with
  ``DBUS_SYSTEM_BUS_ADDRESS`` pointing at it for the test (and for processes it starts).
- ``start_private_bus(policy, includes)``: the same by hand, e.g. default-deny plus a shipped
  policy file, to test who may call what.
- ``wpa_supplicant_mock``: tests/mocks/wpa_supplicant.py (a python-dbusmock template) running
  on ``system_bus``; control it through ``.control`` (see the template's docstring).
- ``nm_mock``: python-dbusmock's NetworkManager template on ``system_bus``
  (tests/peers.py ``NetworkManagerMock``).
- ``link``: a veth pair whose peer sits in a network namespace of its own; quiet until the
  test calls ``link.send(...)`` (tests/peers.py ``Link``).
- ``assert_eventually(condition, timeout)``: poll instead of sleeping.

Every Hypothesis test draws the same examples on every run of a commit: without
``--hypothesis-seed`` the profile "gate" (``derandomize=True``: the examples derive from the
test's own code) is loaded; with it, "seeded" (that seed, so a drawn seed repeats exactly).
Neither keeps an example database, whose saved failures would change the next run's draws.  The
exploration targets (``make fault-explore``, ``make model-long``) pass a fresh seed and print it.

Each test gets its own bus and mocks: nothing leaks between tests, and every process started
here is stopped in teardown, also when the test fails; a mock's log is printed when the test
failed.  ``call_failed(request)`` tells a fixture's teardown whether to print a log.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Iterator, TypeVar, Union

import pytest
from hypothesis import settings as hypothesis_settings

if TYPE_CHECKING:
    from tests.peers import Link, NetworkManagerMock

MOCK_TEMPLATE = Path(__file__).parent / "mocks" / "wpa_supplicant.py"

ALLOW_ALL_POLICY = """
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>"""

# The default policy of Debian's /usr/share/dbus-1/system.conf: what a real system bus enforces
# before its system.d files punch holes.
DEFAULT_DENY_POLICY = """
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"
          send_member="UpdateActivationEnvironment"/>
  </policy>"""


class PrivateBus:
    """A dbus-daemon of type "system" on a socket in a fresh directory.

    The directory is world-readable so that clients run as other users (setpriv) can connect.
    """

    def __init__(self, policy: str = ALLOW_ALL_POLICY, includes: Iterable[Union[str, Path]] = ()):
        self.directory = Path(tempfile.mkdtemp(prefix="scanguard-bus-"))
        self.directory.chmod(0o755)
        self.socket = self.directory / "system_bus_socket"
        config = self.directory / "bus.conf"
        include_lines = "".join(f"\n  <include>{Path(p)}</include>" for p in includes)
        config.write_text(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={self.socket}</listen>
  <auth>EXTERNAL</auth>{policy}{include_lines}
</busconfig>
""")
        self.process = subprocess.Popen(
            ["dbus-daemon", "--nofork", "--nopidfile", f"--config-file={config}",
             "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.process.stdout], [], [], 10)
        line = self.process.stdout.readline().strip() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"dbus-daemon did not start: {self.process.stderr.read()}")
        self.address = line

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_private_bus(policy: str = ALLOW_ALL_POLICY,
                      includes: Iterable[Union[str, Path]] = ()) -> PrivateBus:
    """Start a private system bus; the caller stops it (``bus.stop()``)."""
    return PrivateBus(policy, includes)


def stop_process(process: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after *timeout* seconds; reaps the process."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream:
            stream.close()


@pytest.fixture
def system_bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateBus]:
    """A private system bus that allows everything; DBUS_SYSTEM_BUS_ADDRESS points at it."""
    bus = start_private_bus()
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
    try:
        yield bus
    finally:
        bus.stop()


class MockProcess:
    """A python-dbusmock template in a process of its own (python3 -m dbusmock --system), its
    output appended to *log_path*.

    ``control`` is a dbus-python proxy for the template's org.freedesktop.DBus.Mock methods on
    ``MAIN_OBJ`` (blocking calls; the mock runs in another process, so they are safe from async
    tests).  ``mock_object(path)`` gives the same interface on any object.  Subclasses name the
    template, its bus name and its main object.
    """

    TEMPLATE: str  # one of python-dbusmock's templates, or the path of one
    BUS_NAME: str
    MAIN_OBJ: str
    WHAT = "mock"  # for messages

    def __init__(self, address: str, log_path: Path):
        import dbus  # dbus-python comes with python3-dbusmock

        self._dbus = dbus
        self.address = address
        self.log_path = log_path
        self.connection = dbus.bus.BusConnection(address)
        self.process: subprocess.Popen | None = None
        try:
            self.start()
        except BaseException:
            self.connection.close()
            raise

    def start(self, timeout: float = 10.0) -> None:
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.address)
        env.pop("NOTIFY_SOCKET", None)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dbusmock", "--system", "--template", self.TEMPLATE],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while not self.connection.name_has_owner(self.BUS_NAME):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.WHAT} did not start:\n{self.log()}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)
            self.process = None

    def mock_object(self, path: str):
        obj = self.connection.get_object(self.BUS_NAME, path, introspect=False)
        return self._dbus.Interface(obj, "org.freedesktop.DBus.Mock")

    @property
    def control(self):
        return self.mock_object(self.MAIN_OBJ)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        self.stop()
        self.connection.close()


class MockSupplicant(MockProcess):
    """The wpa_supplicant mock template (tests/mocks/wpa_supplicant.py).

    ``control`` drives /fi/w1/wpa_supplicant1, e.g. ``mock_object(net).GetMethodCalls("Set")``
    looks at a network.  ``restart()`` simulates a wpa_supplicant restart: the bus name gets a
    new owner and every object is gone.
    """

    TEMPLATE = str(MOCK_TEMPLATE)
    BUS_NAME = "fi.w1.wpa_supplicant1"
    MAIN_OBJ = "/fi/w1/wpa_supplicant1"
    WHAT = "wpa_supplicant mock"

    def restart(self) -> None:
        self.stop()
        deadline = time.monotonic() + 5
        while self.connection.name_has_owner(self.BUS_NAME) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.start()


Closable = TypeVar("Closable")


def yield_and_close(thing: Closable, request: pytest.FixtureRequest,
                    title: str) -> Iterator[Closable]:
    """For a fixture: yield *thing* (a mock, a daemon process...), close it afterwards, and print
    its ``log()`` under *title* if the test failed.  Use as ``yield from yield_and_close(...)``."""
    try:
        yield thing
    finally:
        thing.close()
        if call_failed(request):
            print(f"--- {title} ---\n{thing.log()}")


@pytest.fixture
def wpa_supplicant_mock(system_bus: PrivateBus, tmp_path: Path,
                        request: pytest.FixtureRequest) -> Iterator[MockSupplicant]:
    """The wpa_supplicant mock on ``system_bus``, with no interfaces yet (like ``wpa_supplicant -u``).

    Its call log (tmp_path/wpa_supplicant-mock.log) is printed when the test fails.
    """
    mock = MockSupplicant(system_bus.address, tmp_path / "wpa_supplicant-mock.log")
    yield from yield_and_close(mock, request, "wpa_supplicant mock log")


@pytest.fixture
def nm_mock(system_bus: PrivateBus, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[NetworkManagerMock]:
    """NetworkManager (python-dbusmock's template) on ``system_bus``, with no devices yet.

    Its log (tmp_path/nm-mock.log) is printed when the test fails.
    """
    from tests.peers import NetworkManagerMock

    mock = NetworkManagerMock(system_bus.address, tmp_path / "nm-mock.log")
    yield from yield_and_close(mock, request, "NetworkManager mock log")


@pytest.fixture(scope="session")
def _no_stale_namespaces() -> Iterator[None]:
    """A previous run killed mid-way may have left namespaces: clear ours, never others (once,
    in a session that makes links)."""
    from tests.peers import clear_stale_namespaces

    clear_stale_namespaces()
    yield


@pytest.fixture
def link(_no_stale_namespaces: None) -> Iterator[Link]:
    """A veth pair to play the Wi-Fi interface (``link.ifname``); no traffic until ``send()``."""
    from tests.peers import Link

    lk = Link()
    try:
        yield lk
    finally:
        lk.remove()


async def assert_eventually(condition: Callable[[], Union[Any, Awaitable[Any]]],
                            timeout: float = 5.0, interval: float = 0.01,
                            message: str | None = None) -> Any:
    """Poll *condition* (sync or async) until it returns something truthy; return that.

    Raises AssertionError with *message* (or the condition's name) after *timeout* seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() >= deadline:
            what = message or getattr(condition, "__name__", repr(condition))
            raise AssertionError(f"not true after {timeout} s: {what}")
        await asyncio.sleep(interval)


hypothesis_settings.register_profile("gate", derandomize=True, database=None)
hypothesis_settings.register_profile("seeded", derandomize=False, database=None)


def pytest_configure(config: pytest.Config) -> None:
    # derandomize=True would silently override a seed given on the command line, so a seed
    # selects the profile that honours it.
    seeded = config.getoption("--hypothesis-seed", default=None) is not None
    hypothesis_settings.load_profile("seeded" if seeded else "gate")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"_report_{report.when}", report)


def call_failed(request: pytest.FixtureRequest) -> bool:
    """In a fixture's teardown: did the test's setup or call fail?"""
    return any(getattr(getattr(request.node, f"_report_{when}", None), "failed", False)
               for when in ("setup", "call"))
