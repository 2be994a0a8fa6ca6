# SPDX-License-Identifier: Apache-2.0
# `shapevm dap`: a scripted Debug Adapter Protocol client doing a VS Code session's request sequence
# on examples/lstm_cell.py (initialize, launch, setBreakpoints, configurationDone, threads,
# stackTrace, scopes, variables, evaluate, next, stepIn, continue, disconnect) and checking that the
# variables pane shows `x` with its runtime shape; malformed messages and unknown requests get
# error responses and the session goes on.
import json
import subprocess
import threading
import queue

from conftest import ROOT

PROGRAM = ROOT / "examples" / "lstm_cell.py"


class Client:
    def __init__(self, shapevm_bin):
        self.proc = subprocess.Popen([shapevm_bin, "dap"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.seq = 0
        self.messages = queue.Queue()
        threading.Thread(target=self._reader, daemon=True).start()
        self.events = []

    def _reader(self):
        out = self.proc.stdout
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                byte = out.read(1)
                if not byte:
                    self.messages.put(None)
                    return
                header += byte
            length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
            self.messages.put(json.loads(out.read(length)))

    def raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, command, arguments=None):
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments or {}}).encode()
        self.raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def next_message(self):
        message = self.messages.get(timeout=60)
        assert message is not None, "the adapter closed its output; stderr: " + self.proc.stderr.read().decode()
        return message

    def response(self, seq):
        while True:
            message = self.next_message()
            if message["type"] == "event":
                self.events.append(message)
            elif message.get("request_seq") == seq:
                return message

    def request(self, command, arguments=None, success=True):
        reply = self.response(self.send(command, arguments))
        assert reply["success"] is success, reply
        return reply

    def event(self, name):
        for index, message in enumerate(self.events):
            if message["event"] == name:
                return self.events.pop(index)
        while True:
            message = self.next_message()
            if message["type"] == "event" and message["event"] == name:
                return message
            if message["type"] == "event":
                self.events.append(message)


def test_dap_session_shows_runtime_shapes(shapevm_bin):
    client = Client(shapevm_bin)
    try:
        caps = client.request("initialize", {"adapterID": "shapevm", "linesStartAt1": True})["body"]
        assert caps["supportsConfigurationDoneRequest"] is True
        # Bad input first: the session must go on.
        client.raw(b"Content-Length: 9\r\n\r\n{not json")
        bad = client.next_message()
        assert bad["type"] == "response" and bad["success"] is False and "malformed" in bad["message"]
        unknown = client.request("frobnicate", success=False)
        assert "unknown request 'frobnicate'" in unknown["message"]

        client.request("launch", {"program": str(PROGRAM), "function": "lstm_cell",
                                  "args": ["--dim", "batch=2", "--dim", "seq=3", "--jit-level", "O0"]})
        client.event("initialized")
        bps = client.request("setBreakpoints", {"source": {"path": str(PROGRAM)},
                                                "breakpoints": [{"line": 14}, {"line": 10}]})["body"]["breakpoints"]
        assert bps[0]["verified"] is True and bps[0]["line"] == 14
        assert bps[1]["verified"] is False and "no code" in bps[1]["message"]
        client.request("setExceptionBreakpoints", {"filters": []})
        client.request("configurationDone")
        stopped = client.event("stopped")["body"]
        assert stopped["reason"] == "breakpoint"

        threads = client.request("threads")["body"]["threads"]
        assert len(threads) == 1
        frames = client.request("stackTrace", {"threadId": threads[0]["id"]})["body"]["stackFrames"]
        assert frames[0]["name"] == "lstm_cell" and frames[0]["line"] == 14
        assert frames[0]["source"]["path"].endswith("lstm_cell.py")
        scopes = client.request("scopes", {"frameId": frames[0]["id"]})["body"]["scopes"]
        variables = client.request("variables", {"variablesReference": scopes[0]["variablesReference"]})["body"]["variables"]
        by_name = {v["name"]: v for v in variables}
        # The variables pane: x with its runtime shape and dtype, and its elements on demand.
        assert by_name["x"]["value"].startswith("f32[2,3,128]"), by_name["x"]
        assert by_name["x"]["type"] == "f32[2,3,128]"
        assert by_name["h"]["value"].startswith("f32[2,256]") and by_name["batch"]["value"] == "2"
        assert "gx" not in by_name  # not assigned yet
        elements = client.request("variables", {"variablesReference": by_name["x"]["variablesReference"]})["body"]["variables"]
        assert elements[0]["name"] == "[0,0,0]" and elements[-1]["name"] == "..."
        float(elements[1]["value"])

        evaluated = client.request("evaluate", {"expression": "W_ih", "frameId": frames[0]["id"]})["body"]
        assert evaluated["result"].startswith("f32[1024,128]") and evaluated["variablesReference"] > 0
        dead = client.request("evaluate", {"expression": "nothing_here", "frameId": 0}, success=False)
        assert "no variable or register 'nothing_here'" in dead["message"]

        client.request("next", {"threadId": 1})
        assert client.event("stopped")["body"]["reason"] == "step"
        frames = client.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert frames[0]["line"] == 15
        variables = client.request("variables", {"variablesReference": scopes[0]["variablesReference"]})["body"]["variables"]
        assert any(v["name"] == "rows" and v["value"].startswith("f32[6,128]") for v in variables), variables
        client.request("stepIn", {"threadId": 1})
        client.event("stopped")
        frames = client.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert frames[0]["line"] == 16

        client.request("continue", {"threadId": 1})
        assert client.event("exited")["body"]["exitCode"] == 0
        client.event("terminated")
        client.request("disconnect")
        assert client.proc.wait(timeout=30) == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_dap_stops_at_a_run_error(shapevm_bin):
    # Post-mortem: a failing matmul stops with reason "exception" and the failing frame's
    # variables; continuing ends the run with the error. `restart` (at a stop or after the end)
    # runs the program again from the start with the breakpoints kept.
    program = ROOT / "tests" / "python" / "debug" / "fails.py"
    client = Client(shapevm_bin)
    try:
        client.request("initialize", {"adapterID": "shapevm", "linesStartAt1": True})
        client.request("launch", {"program": str(program), "function": "f",
                                  "args": ["--dim", "n=2", "--jit-level", "O0"]})
        client.event("initialized")
        client.request("configurationDone")
        stopped = client.event("stopped")["body"]
        assert stopped["reason"] == "exception" and "contracting dims differ" in stopped["text"], stopped
        frames = client.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert [f["name"] for f in frames] == ["project", "f"] and frames[0]["line"] == 5
        scopes = client.request("scopes", {"frameId": frames[0]["id"]})["body"]["scopes"]
        variables = client.request("variables", {"variablesReference": scopes[0]["variablesReference"]})["body"]["variables"]
        by_name = {v["name"]: v for v in variables}
        assert by_name["z"]["value"].startswith("f32[2,3]") and by_name["w"]["value"].startswith("f32[4,5]")
        # Restart from the error stop: a breakpoint set there stops the new run first.
        bps = client.request("setBreakpoints", {"source": {"path": str(program)}, "breakpoints": [{"line": 9}]})
        assert bps["body"]["breakpoints"][0]["verified"], bps
        client.request("restart")
        stopped = client.event("stopped")["body"]
        assert stopped["reason"] == "breakpoint", stopped
        assert client.request("stackTrace", {"threadId": 1})["body"]["stackFrames"][0]["line"] == 9
        client.request("continue", {"threadId": 1})
        assert client.event("stopped")["body"]["reason"] == "exception"
        client.request("continue", {"threadId": 1})
        assert client.event("exited")["body"]["exitCode"] != 0
        client.event("terminated")
        # Restart after the end: the program runs again, the breakpoint kept.
        client.request("restart")
        assert client.event("stopped")["body"]["reason"] == "breakpoint"
        client.request("disconnect")
        client.proc.wait(timeout=30)
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
