"""The adapter side of ledger-alloc-adapter/1, the ledger's allocator
protocol (runner/alloc_ext.go is the specification and the Go codec).

Pure Python (3.8+, standard library only), shared by the MLX and PyTorch
allocator adapters. Frames are those of ledger-adapter/1 (a 1-byte type, a
4-byte little-endian payload length, the payload):

  H  hello, both ways: UTF-8 JSON, protocol "ledger-alloc-adapter/1".
  R  request, ledger -> adapter: UTF-8 JSON {"op": ...}
  A  reply, adapter -> ledger: UTF-8 JSON
  U  unsupported, adapter -> ledger: UTF-8 reason (the runtime has no way
     to do what the request asks)
  E  error, adapter -> ledger: UTF-8 message
  Q  bye, ledger -> adapter: exit 0

Every request gets exactly one answer (A, U or E), in order. The adapter
only generates traffic and reports readings; the ledger decides.
"""

import json
import os
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from ledger_adapter import read_frame, write_frame, ProtocolError  # noqa: E402

PROTOCOL = "ledger-alloc-adapter/1"


class Unsupported(Exception):
    """Raised by a runtime's handler for a request it cannot serve."""


def serve(hello, handlers, stdin=None, stdout=None):
    """Answer requests with handlers[op](request) -> dict until bye or EOF."""
    fin = stdin or sys.stdin.buffer
    fout = stdout or sys.stdout.buffer
    fr = read_frame(fin)
    if fr is None or fr[0] != "H" or json.loads(fr[1].decode("utf-8")).get("protocol") != PROTOCOL:
        raise ProtocolError("the first frame is not a %s hello" % PROTOCOL)
    hello = dict(hello, protocol=PROTOCOL)
    write_frame(fout, "H", json.dumps(hello).encode("utf-8"))
    fout.flush()
    # LEDGER_ALLOC_DUMP=FILE appends one JSON line per request: the request
    # and its answer, as sent (runner.ReplayAllocLane re-derives a verdict
    # from such a file).
    dump = open(os.environ["LEDGER_ALLOC_DUMP"], "a") if os.environ.get("LEDGER_ALLOC_DUMP") else None
    while True:
        fr = read_frame(fin)
        if fr is None or fr[0] == "Q":
            return
        if fr[0] != "R":
            raise ProtocolError("unexpected frame type %r" % fr[0])
        req = None
        try:
            req = json.loads(fr[1].decode("utf-8"))
            h = handlers.get(req.get("op"))
            if h is None:
                raise Unsupported("op %r" % req.get("op"))
            typ, out = "A", json.dumps(h(req), separators=(",", ":")).encode("utf-8")
        except Unsupported as e:
            typ, out = "U", str(e).encode("utf-8")[:1024]
        except Exception as e:  # the ledger records it as an error
            typ, out = "E", ("%s: %s" % (type(e).__name__, e)).encode("utf-8")[:1024]
        write_frame(fout, typ, out)
        fout.flush()
        if dump:
            dump.write(json.dumps({"request": req, "type": typ, "answer": out.decode("utf-8")}, separators=(",", ":")) + "\n")
            dump.flush()
