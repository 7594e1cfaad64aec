#!/usr/bin/env python3
"""ledger-alloc-adapter/1 adapter for PyTorch's CUDA caching allocator.

Traffic: Python threads creating and dropping torch.empty(n, dtype=uint8,
device="cuda") tensors (the ATen binding releases the GIL inside the
allocator call, so mutators allocate concurrently with the reader);
mutator 0 also calls torch.cuda.empty_cache() every 8 operations, so
segments are released and cudaMalloc'd again and reserved memory moves.

Readings:
  coherent     torch.cuda.memory_stats(): allocated_bytes.all.current,
               reserved_bytes.all.current, allocated_bytes.all.peak, all
               copied under the allocator's lock in one call
  independent  torch.cuda.memory_reserved(), then
               torch.cuda.memory_allocated(): two calls (each is one
               memory_stats() of its own)

Usage: python3 ledger_torch_alloc_adapter.py
"""

import os
import platform
import random
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ledger_alloc_adapter as laa  # noqa: E402

import torch  # noqa: E402


def counters():
    s = torch.cuda.memory_stats()
    return {"active": s.get("allocated_bytes.all.current", 0), "reserved": s.get("reserved_bytes.all.current", 0),
            "peak": s.get("allocated_bytes.all.peak", 0)}


class TorchAlloc:
    def __init__(self):
        self.total = torch.cuda.get_device_properties(0).total_memory
        self.mem_limit = self.total
        self.slots = {}

    def info(self, req):
        return {"rules": "pytorch-cuda", "counters": ["active", "reserved", "peak"], "memory_limit": self.mem_limit,
                "coherent": "torch.cuda.memory_stats()",
                "independent": "torch.cuda.memory_reserved(), then torch.cuda.memory_allocated()"}

    def observe(self, req):
        n, mut, sizes, live = req["readings"], req["mutators"], req["sizes"], req["live"]
        coherent = req["mode"] == "coherent"
        torch.cuda.empty_cache()
        # Warm-up: each mutator's working set once.
        ws = [torch.empty(sizes[m], dtype=torch.uint8, device="cuda") for m in range(mut) for _ in range(live)]
        del ws
        torch.cuda.synchronize()
        before = counters()
        ops = [0] * mut
        stop = threading.Event()
        errs = []

        def mutator(m):
            rng = random.Random(42 + m)
            mine = []
            try:
                while not stop.is_set():
                    if len(mine) < live and (not mine or rng.random() < 0.5):
                        mine.append(torch.empty(sizes[m], dtype=torch.uint8, device="cuda"))
                    else:
                        mine.pop(rng.randrange(len(mine)))
                    ops[m] += 1
                    if m == 0 and ops[m] % 8 == 0:
                        torch.cuda.empty_cache()
            except Exception as e:  # reported as the observation's error
                errs.append(e)
            finally:
                mine.clear()

        old_si = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        ts = [threading.Thread(target=mutator, args=(m,)) for m in range(mut)]
        for t in ts:
            t.start()
        try:
            while sum(ops) < 20 * mut and not errs:
                pass
            start = sum(ops)
            readings = []
            stalled = False
            import time
            for i in range(n):
                need = start + i * req["min_ops"] // n
                deadline = time.monotonic() + 10
                while sum(ops) < need:
                    if time.monotonic() > deadline or errs:
                        stalled = True
                        break
                    time.sleep(0)
                if stalled:
                    break
                if coherent:
                    s = torch.cuda.memory_stats()
                    readings.append([s["allocated_bytes.all.current"], s["reserved_bytes.all.current"], s["allocated_bytes.all.peak"]])
                else:
                    r = torch.cuda.memory_reserved()
                    a = torch.cuda.memory_allocated()
                    readings.append([r, a])
            done = sum(ops) - start
        finally:
            stop.set()
            for t in ts:
                t.join()
            sys.setswitchinterval(old_si)
        if errs:
            raise errs[0]
        torch.cuda.synchronize()
        return {"fields": ["active", "reserved", "peak"] if coherent else ["reserved", "active"],
                "readings": readings, "mutator_ops": done, "fresh_buffers": -1,
                "quiescent_before": before, "quiescent_after": counters(), "stalled": stalled}

    def steps(self, req):
        res = []
        for s in req["steps"]:
            r = {"before": counters(), "size": -1}
            if s["op"] == "alloc":
                try:
                    self.slots[s["slot"]] = torch.empty(s.get("n", 0), dtype=torch.uint8, device="cuda")
                except Exception as e:  # torch.OutOfMemoryError for a refused request
                    r["error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
            elif s["op"] == "free":
                self.slots.pop(s["slot"], None)
            elif s["op"] == "clear_cache":
                torch.cuda.empty_cache()
            else:
                raise ValueError("step op %r" % s["op"])
            r["after"] = counters()
            res.append(r)
        return {"results": res}

    def set_limits(self, req):
        old = {"memory": self.mem_limit, "cache": 0}  # PyTorch has no cache limit
        if req.get("memory"):
            self.mem_limit = min(req["memory"], self.total)
            torch.cuda.set_per_process_memory_fraction(self.mem_limit / self.total)
        return old


def main():
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    p = torch.cuda.get_device_properties(0)
    hello = {
        "implementation": "pytorch-cuda-caching-allocator", "version": torch.__version__,
        "device": {"model": p.name[:512], "driver": "CUDA %s" % torch.version.cuda,
                   "attrs": {"compute_capability": "%d.%d" % (p.major, p.minor), "total_memory": str(p.total_memory)}},
        "runtime": {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": platform.python_version(),
                    "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")[:256],
                    "allocator_backend": str(torch.cuda.get_allocator_backend())},
        "source": {"repository": "github.com/pytorch/pytorch", "commit": str(torch.version.git_version)},
    }
    a = TorchAlloc()
    laa.serve(hello, {"info": a.info, "observe": a.observe, "steps": a.steps, "set_limits": a.set_limits})


if __name__ == "__main__":
    main()
