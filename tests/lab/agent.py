"""Guest agent: runs inside the lab VM and executes what the host asks, over a virtio-serial port.

Protocol: one JSON object per line each way. A request has an `id` and an `op`; the reply carries
the same `id`, the guest's wall clock `t` and either the result fields or `error`. Requests are
served concurrently (one thread each), so a long `run` does not block a `spawn` or a `kill`.
On start the agent sends `{"id": 0, "hello": ...}` so the host knows the guest is ready.

Ops:
  run    {cmd, timeout}            -> {rc, out, err} or {timeout: true, out, err}; bash -c, own
                                      session; on timeout the whole process group is killed.
  spawn  {cmd, log}                -> {pid}; bash -c in its own session, stdout+stderr to `log`.
  wait   {pid, timeout}            -> {rc} (null while still running).
  kill   {pid, sig, timeout}       -> {rc}; signals the process group, SIGKILL after `timeout`.
  read   {path}                    -> {data} (base64).
  write  {path, data, mode}        -> {}.
  time   {}                        -> {} (just `t`).
  shutdown {}                      -> {}; kills every spawned group, syncs, powers the VM off.

Standard library only: it runs on the guest's /usr/bin/python3 before anything else is set up.
"""

import base64
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

PORT_NAME = "lab.agent"


def find_port() -> str:
    base = "/sys/class/virtio-ports"
    for _ in range(100):
        for entry in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            try:
                with open(f"{base}/{entry}/name") as f:
                    if f.read().strip() == PORT_NAME:
                        return f"/dev/{entry}"
            except OSError:
                pass
        time.sleep(0.1)
    raise SystemExit(f"agent: no virtio port named {PORT_NAME}")


def kill_group(proc: subprocess.Popen, sig: int, timeout: float) -> int:
    """Signal the process group of `proc`; escalate to SIGKILL if it outlives `timeout`."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.wait()


class Agent:
    def __init__(self, dev: str):
        self.fd = os.open(dev, os.O_RDWR)
        self.wlock = threading.Lock()
        self.procs: dict[int, subprocess.Popen] = {}

    def send(self, msg: dict) -> None:
        msg["t"] = time.time()
        data = memoryview((json.dumps(msg) + "\n").encode())
        with self.wlock:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]

    def serve(self) -> None:
        self.send({"id": 0, "hello": "nm-scanguard lab agent",
                   "uptime": float(open("/proc/uptime").read().split()[0])})
        buf = b""
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:  # host side not connected (yet / any more)
                time.sleep(0.2)
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    threading.Thread(target=self.handle, args=(line,), daemon=True).start()

    def handle(self, line: bytes) -> None:
        req = {}
        try:
            req = json.loads(line)
            reply = getattr(self, "op_" + req["op"])(req)
        except Exception as e:  # the host gets every failure as data, the agent keeps serving
            reply = {"error": f"{type(e).__name__}: {e}"}
        reply["id"] = req.get("id", -1)
        self.send(reply)

    def op_time(self, req):
        return {}

    def op_run(self, req):
        proc = subprocess.Popen(["/bin/bash", "-c", req["cmd"]], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=req.get("timeout"))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        reply = {"rc": proc.returncode, "out": out.decode(errors="replace"),
                 "err": err.decode(errors="replace")}
        if timed_out:
            reply["timeout"] = True
        return reply

    def op_spawn(self, req):
        log = open(req["log"], "wb", buffering=0)
        proc = subprocess.Popen(["/bin/bash", "-c", req["cmd"]], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=req.get("cwd") or "/")
        log.close()
        self.procs[proc.pid] = proc
        return {"pid": proc.pid}

    def op_wait(self, req):
        proc = self.procs[req["pid"]]
        try:
            return {"rc": proc.wait(req.get("timeout"))}
        except subprocess.TimeoutExpired:
            return {"rc": None}

    def op_kill(self, req):
        proc = self.procs[req["pid"]]
        if proc.poll() is not None:
            return {"rc": proc.returncode}
        return {"rc": kill_group(proc, req.get("sig", signal.SIGTERM), req.get("timeout", 5))}

    def op_read(self, req):
        with open(req["path"], "rb") as f:
            return {"data": base64.b64encode(f.read()).decode()}

    def op_write(self, req):
        path = req["path"]
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(req["data"]))
        os.chmod(path, req.get("mode", 0o644))
        return {}

    def op_shutdown(self, req):
        for proc in list(self.procs.values()):
            if proc.poll() is None:
                kill_group(proc, signal.SIGTERM, 3)
        os.sync()
        threading.Thread(target=self._poweroff, daemon=True).start()
        return {}

    def _poweroff(self):
        time.sleep(0.3)  # let the reply reach the host
        os.sync()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.reboot(0x4321FEDC)  # LINUX_REBOOT_CMD_POWER_OFF
        os._exit(1)


if __name__ == "__main__":
    print("agent: serving on", find_port(), file=sys.stderr, flush=True)
    Agent(find_port()).serve()
