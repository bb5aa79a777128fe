"""The peer side of a side-by-side benchmark: a process in the peer's own virtual environment
that answers one JSON request per line (``e2cnn_side.py``, ``disco_side.py``)."""

from __future__ import annotations

import json
import subprocess


class PeerProcess:
    """``cmd`` started with its stderr in ``log_path``; ``peer(op, **kw)`` sends one request and
    returns its answer."""

    def __init__(self, name: str, cmd: list[str], log_path: str, cwd: str | None = None):
        self.name = name
        self.log = open(log_path, "w")  # noqa: SIM115 (open for the process's lifetime)
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=cwd,
        )

    def __call__(self, op: str, **kw) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} process ended (log: {self.log.name})")
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.log.close()


class NoPeer:
    """Stands in for the peer under ``--no-peer``: every answer is empty, and no failure."""

    def __call__(self, op, **kw):
        return {"ok": False, "error": None}

    def close(self):
        pass
