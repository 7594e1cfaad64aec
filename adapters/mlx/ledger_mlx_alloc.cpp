// ledger_mlx_alloc: allocation traffic and counter readings inside MLX's own
// allocator, for the ledger's allocator lanes (ledger-alloc-adapter/1; the
// protocol side is ledger_mlx_alloc_adapter.py, which loads this library
// with ctypes, so every call below runs without Python's GIL).
//
// Built by `make mlx-alloc-lib` against libmlx.so and the headers of the
// pinned mlx-cpu wheel. Buffers are real mlx::core::array objects whose data
// comes from mlx::core::allocator::malloc (the allocator the counters
// describe) and that free it when destroyed. The readings are the public
// getters mlx::core::get_active_memory, get_cache_memory and
// get_peak_memory, called one at a time: MLX has no call that reads them
// together under the allocator's lock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/memory.h"

namespace mx = mlx::core;

namespace {

// Holder is one live buffer: an array when the size fits an int32 shape,
// the allocator's Data otherwise (both free through allocator().free).
struct Holder {
  std::unique_ptr<mx::array> arr;
  std::unique_ptr<mx::allocator::Data> data;
  const void* ptr = nullptr;
  uint64_t size = 0;
};

Holder* make(uint64_t n) {
  auto* h = new Holder();
  mx::allocator::Data d = mx::allocator::malloc(n);
  h->ptr = d.buffer().ptr();
  h->size = h->ptr ? mx::allocator::allocator().size(d.buffer()) : 0;
  if (n < (1ull << 31)) {
    h->arr = std::make_unique<mx::array>(std::move(d), mx::Shape{static_cast<int>(n)}, mx::uint8);
  } else {
    h->data = std::make_unique<mx::allocator::Data>(std::move(d));
  }
  return h;
}

void write_bytes(Holder* h, uint8_t v) {
  if (h->arr && h->size > 0 && h->ptr) {
    auto* p = h->arr->data<uint8_t>();
    p[0] = v;
    p[h->arr->size() - 1] = v;
  }
}

} // namespace

extern "C" {

// lmx_counters reads active, cache and peak, one call each, in that order.
void lmx_counters(uint64_t out[3]) {
  out[0] = mx::get_active_memory();
  out[1] = mx::get_cache_memory();
  out[2] = mx::get_peak_memory();
}

// lmx_alloc creates a buffer of n bytes; it returns a handle, or null with
// a message in err when MLX threw or handed out no memory. *ptr and *size
// receive the buffer's address and the allocator's own size of it.
void* lmx_alloc(uint64_t n, char* err, int errlen, uint64_t* ptr, uint64_t* size) {
  err[0] = 0;
  try {
    Holder* h = make(n);
    *ptr = reinterpret_cast<uint64_t>(h->ptr);
    *size = h->size;
    if (!h->ptr && n > 0) {
      snprintf(err, errlen, "mlx::core::allocator::malloc(%llu) returned a null buffer", (unsigned long long)n);
      delete h;
      return nullptr;
    }
    return h;
  } catch (const std::exception& e) {
    snprintf(err, errlen, "%s", e.what());
    return nullptr;
  }
}

void lmx_free(void* h) { delete static_cast<Holder*>(h); }
void lmx_clear_cache() { mx::clear_cache(); }
uint64_t lmx_set_memory_limit(uint64_t v) { return mx::set_memory_limit(v); }
uint64_t lmx_set_cache_limit(uint64_t v) { return mx::set_cache_limit(v); }
uint64_t lmx_get_memory_limit() { return mx::get_memory_limit(); }

// lmx_observe runs `mutators` threads, mutator m repeatedly creating and
// destroying arrays of sizes[m] bytes (at most `live` at a time), while the
// calling thread takes `readings` readings of (active, cache, peak) with
// lmx_counters. Before the readings every mutator has held `live` buffers
// once (the warm-up), so with the cache limit above the traffic's bytes
// every later request is served from MLX's cache: the raw bytes MLX holds
// stay constant. Reading i waits until the mutators have done
// i*min_ops/readings operations since the first reading. out gets
// readings*3 values; stats gets: [0] mutator operations during the
// readings, [1] buffer addresses first seen during the readings (fresh
// allocations), [2..4] quiescent (active, cache, peak) before the traffic
// resumed, [5..7] quiescent counters after it stopped, [8] 1 if the traffic
// stalled (10 s without the operations a reading waited for).
int lmx_observe(int readings, int mutators, const uint64_t* sizes, int live, uint64_t min_ops,
                uint64_t* out, uint64_t* stats, char* err, int errlen) {
  err[0] = 0;
  try {
    std::mutex seen_mu;
    std::set<const void*> seen;
    // Warm-up: each mutator's working set, created and destroyed once.
    {
      std::vector<Holder*> hs;
      for (int m = 0; m < mutators; m++)
        for (int k = 0; k < live; k++) {
          Holder* h = make(sizes[m]);
          seen.insert(h->ptr);
          hs.push_back(h);
        }
      for (auto* h : hs) delete h;
    }
    uint64_t q[3];
    lmx_counters(q);
    stats[2] = q[0]; stats[3] = q[1]; stats[4] = q[2];
    std::atomic<uint64_t> ops{0}, fresh{0};
    std::atomic<bool> stop{false}, go{false};
    std::vector<std::thread> ts;
    for (int m = 0; m < mutators; m++) {
      ts.emplace_back([&, m] {
        std::mt19937_64 rng(42 + m);
        std::vector<Holder*> mine;
        while (!go.load()) std::this_thread::yield();
        while (!stop.load(std::memory_order_relaxed)) {
          if (mine.size() < (size_t)live && (mine.empty() || (rng() & 1))) {
            Holder* h = make(sizes[m]);
            write_bytes(h, (uint8_t)m);
            {
              std::lock_guard<std::mutex> lk(seen_mu);
              if (seen.insert(h->ptr).second) fresh++;
            }
            mine.push_back(h);
          } else {
            size_t i = rng() % mine.size();
            delete mine[i];
            mine[i] = mine.back();
            mine.pop_back();
          }
          ops.fetch_add(1, std::memory_order_relaxed);
        }
        for (auto* h : mine) delete h;
      });
    }
    go.store(true);
    while (ops.load() < (uint64_t)(20 * mutators)) std::this_thread::yield();
    uint64_t start = ops.load();
    stats[8] = 0;
    for (int i = 0; i < readings; i++) {
      uint64_t need = start + (uint64_t)i * min_ops / (uint64_t)readings;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (ops.load(std::memory_order_relaxed) < need) {
        if (std::chrono::steady_clock::now() > deadline) { stats[8] = 1; break; }
        std::this_thread::yield();
      }
      if (stats[8]) break;
      lmx_counters(out + 3 * i);
    }
    stats[0] = ops.load() - start;
    stop.store(true);
    for (auto& t : ts) t.join();
    stats[1] = fresh.load();
    lmx_counters(q);
    stats[5] = q[0]; stats[6] = q[1]; stats[7] = q[2];
    return 0;
  } catch (const std::exception& e) {
    snprintf(err, errlen, "%s", e.what());
    return -1;
  }
}

} // extern "C"
