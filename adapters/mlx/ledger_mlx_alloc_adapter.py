#!/usr/bin/env python3
"""ledger-alloc-adapter/1 adapter for MLX's CPU allocator.

The traffic and the readings run in libledger_mlx_alloc.so
(ledger_mlx_alloc.cpp, built by `make mlx-alloc-lib` against the libmlx.so
of the pinned mlx-cpu wheel), called through ctypes, which releases the
GIL: the mutators are native threads creating and destroying
mlx::core::array objects whose data comes from MLX's allocator, and the
observer reads mlx::core::get_active_memory, get_cache_memory and
get_peak_memory one call at a time. Python threads could not make this
traffic: a Python-level array creation holds the GIL, and mx.eval, which
releases it, allocates through MLX's stream scheduler.

MLX has no call that reads the counters together under the allocator's
lock, so an observe request in mode "coherent" is answered unsupported.

Usage: python3 ledger_mlx_alloc_adapter.py --site DIR --lib FILE
"""

import argparse
import ctypes
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ledger_alloc_adapter as laa  # noqa: E402

U = ctypes.c_uint64
FIELDS = ["active", "cache", "peak"]
NO_SNAPSHOT = ("MLX %s has no call that reads active, cache and peak memory under one acquisition of the "
               "allocator's lock (mlx/memory.h declares get_active_memory, get_cache_memory and get_peak_memory "
               "as separate calls; mlx/backend/no_gpu/allocator.cpp:44-49 reads active and peak without the lock)")


class MLXAlloc:
    def __init__(self, lib):
        self.L = ctypes.CDLL(lib)
        self.L.lmx_alloc.restype = ctypes.c_void_p
        self.L.lmx_alloc.argtypes = [U, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(U), ctypes.POINTER(U)]
        self.L.lmx_free.argtypes = [ctypes.c_void_p]
        for f in ("lmx_set_memory_limit", "lmx_set_cache_limit", "lmx_get_memory_limit"):
            getattr(self.L, f).restype = U
        self.L.lmx_set_memory_limit.argtypes = [U]
        self.L.lmx_set_cache_limit.argtypes = [U]
        self.slots = {}

    def counters(self):
        c = (U * 3)()
        self.L.lmx_counters(c)
        return dict(zip(FIELDS, list(c)))

    def info(self, req):
        cache = self.L.lmx_set_cache_limit(U(1 << 30))
        self.L.lmx_set_cache_limit(U(cache))
        return {"rules": "mlx-cpu", "counters": FIELDS, "memory_limit": self.L.lmx_get_memory_limit(),
                "cache_limit": cache, "coherent": "",
                "independent": "mlx.core.get_active_memory(), get_cache_memory(), get_peak_memory() (C++ mlx::core::, one call each)"}

    def observe(self, req):
        if req["mode"] == "coherent":
            raise laa.Unsupported(NO_SNAPSHOT % MX_VERSION)
        n, m = req["readings"], req["mutators"]
        out = (U * (3 * n))()
        st = (U * 9)()
        err = ctypes.create_string_buffer(1024)
        sizes = (U * m)(*req["sizes"])
        # The traffic must stay under the cache limit (closed traffic).
        need = sum(req["sizes"]) * req["live"] * 2
        old = self.L.lmx_set_cache_limit(U(max(need, 64 << 20)))
        try:
            if self.L.lmx_observe(n, m, sizes, req["live"], U(req["min_ops"]), out, st, err, 1024) != 0:
                raise RuntimeError(err.value.decode("utf-8", "replace"))
        finally:
            self.L.lmx_set_cache_limit(U(old))
        vals = list(out)
        readings = [vals[3 * i:3 * i + 3] for i in range(n)]
        if st[8]:
            readings = [r for r in readings if any(r)]
        return {"fields": FIELDS, "readings": readings, "mutator_ops": st[0], "fresh_buffers": st[1],
                "quiescent_before": dict(zip(FIELDS, st[2:5])), "quiescent_after": dict(zip(FIELDS, st[5:8])),
                "stalled": bool(st[8])}

    def steps(self, req):
        res = []
        err = ctypes.create_string_buffer(1024)
        for s in req["steps"]:
            before = self.counters()
            r = {"before": before, "size": -1}
            if s["op"] == "alloc":
                p, sz = U(), U()
                h = self.L.lmx_alloc(U(s.get("n", 0)), err, 1024, ctypes.byref(p), ctypes.byref(sz))
                if h:
                    self.slots[s["slot"]] = h
                    r["size"] = sz.value
                else:
                    r["error"] = err.value.decode("utf-8", "replace") or "allocation failed"
            elif s["op"] == "free":
                h = self.slots.pop(s["slot"], None)
                if h:
                    self.L.lmx_free(ctypes.c_void_p(h))
            elif s["op"] == "clear_cache":
                self.L.lmx_clear_cache()
            else:
                raise ValueError("step op %r" % s["op"])
            r["after"] = self.counters()
            res.append(r)
        return {"results": res}

    def set_limits(self, req):
        old = {"memory": 0, "cache": 0}
        if req.get("memory"):
            old["memory"] = self.L.lmx_set_memory_limit(U(req["memory"]))
        if req.get("cache"):
            old["cache"] = self.L.lmx_set_cache_limit(U(req["cache"]))
        return old


def main():
    global MX_VERSION
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", required=True, help="where make mlx-deps installed mlx (var/mlx-cpu/site)")
    ap.add_argument("--lib", required=True, help="libledger_mlx_alloc.so (make mlx-alloc-lib)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.site))
    import mlx.core as mx  # noqa: E402  (loads the same libmlx.so the library links)

    MX_VERSION = mx.__version__
    a = MLXAlloc(os.path.abspath(args.lib))
    hello = {
        "implementation": "mlx-allocator", "version": mx.__version__,
        "device": {"model": platform.processor() or platform.machine(), "attrs": {"mlx.device": str(mx.default_device())}},
        "runtime": {"mlx": mx.__version__, "python": platform.python_version(), "allocator": "mlx/backend/no_gpu CommonAllocator",
                    "libmlx": os.path.realpath(os.path.join(os.path.dirname(mx.__file__), "lib", "libmlx.so"))[:256]},
        "source": {"repository": "github.com/ml-explore/mlx"},
    }
    laa.serve(hello, {"info": a.info, "observe": a.observe, "steps": a.steps, "set_limits": a.set_limits})


if __name__ == "__main__":
    main()
