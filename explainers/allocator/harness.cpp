// ThreadSanitizer harness for at::CachingHostAllocatorImpl (torch 2.14.1, 2.15.0).
//
// It instantiates the real, header-only pinned-memory caching allocator from
// the installed torch (ATen/core/CachingHostAllocator.h) with the fake CPU
// backend of fake_backend.h, so no GPU or CUDA runtime is needed: only libc10.
//
// Threads (TSAN numbers them T1, T2, ... in creation order):
//   run_worker      allocate / record_event / free, over and over
//   run_snapshotter getSegments() snapshots, like torch.cuda.memory._snapshot()
//   run_profiler    recordHistory(on/off) toggling, like _record_memory_history()
//
// Before the threads start, main() registers one external range
// (recordExternalRegister) and counts how often getSegments() lists it.
//
// Usage: harness ITERATIONS MAX_SECONDS
// Workers stop after ITERATIONS rounds, once each observer thread has done at
// least one round of its own, or at MAX_SECONDS, whichever comes first; the
// other threads stop when the workers are done.

#include <atomic>
#include <utility>

// PlainAtomic<T> has std::atomic<T>'s interface (load, store, exchange,
// conversion, assignment) but performs ordinary, unsynchronized accesses.
// It is unused with the header as installed.  The "atomics removed" build
// puts an overlay copy of CachingHostAllocator.h first on the include path in
// which only the four atomic fields are declared PlainAtomic<T> instead of
// std::atomic<T>; every use site stays byte-for-byte the shipped code.
// It must be declared before the header is included.
template <typename T>
struct PlainAtomic {
  T value_;
  constexpr PlainAtomic(T v) : value_(v) {}
  PlainAtomic(const PlainAtomic&) = delete;
  PlainAtomic& operator=(const PlainAtomic&) = delete;
  T load(std::memory_order = std::memory_order_seq_cst) const { return value_; }
  void store(T v, std::memory_order = std::memory_order_seq_cst) { value_ = v; }
  T exchange(T v, std::memory_order = std::memory_order_seq_cst) {
    return std::exchange(value_, v);
  }
  operator T() const { return value_; }
  T operator=(T v) { value_ = v; return v; }
};

#include <ATen/core/CachingHostAllocator.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "fake_backend.h"

namespace {

// A non-empty context, so context_when_allocated_ really holds shared_ptrs.
struct FakeContext : c10::GatheredContext {};

std::shared_ptr<c10::GatheredContext> gather_context() {
  return std::make_shared<FakeContext>();
}

// The fake backend as it is (fake_backend.h).
struct FakeHostAllocator final : FakeBackend {};

std::atomic<int> workers_running{0};
// Counted by the observer threads and read by the workers, which keep going
// until both observers have done at least one round (a loaded machine may
// otherwise finish the workers' rounds before an observer is scheduled).
// Relaxed: relaxed atomic operations add no happens-before edge that could
// hide a race from TSAN.
std::atomic<long> snapshots_taken{0};
std::atomic<long> toggles_done{0};

void run_worker(FakeHostAllocator* a, int iterations, double max_seconds, int seed) {
  const auto deadline = std::chrono::steady_clock::now() +
      std::chrono::duration<double>(max_seconds);
  const c10::Stream side_stream = FakeStream(seed + 1);
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    if (i >= iterations && snapshots_taken.load(std::memory_order_relaxed) > 0 &&
        toggles_done.load(std::memory_order_relaxed) > 0) {
      break;
    }
    auto [ptr, ctx] = a->allocate(64u << ((i + seed) % 3));  // 64, 128 or 256 bytes
    if (i % 4 == 0) {
      // Use on another stream: free() then queues an event and the block
      // returns to the free list later, via process_events().
      a->record_event(ptr, ctx, side_stream);
    }
    a->free(ctx);
  }
  workers_running.fetch_sub(1);
}

void run_snapshotter(FakeHostAllocator* a, size_t* max_segments) {
  while (workers_running.load() > 0) {
    auto segments = a->getSegments();
    if (segments.size() > *max_segments) {
      *max_segments = segments.size();
    }
    snapshots_taken.fetch_add(1, std::memory_order_relaxed);
  }
}

void run_profiler(FakeHostAllocator* a, size_t* max_traces) {
  using RC = c10::CachingDeviceAllocator::RecordContext;
  while (workers_running.load() > 0) {
    a->recordHistory(true, gather_context, 1000, RC::STATE, false);
    std::this_thread::yield();
    auto traces = a->getTraces();
    if (traces.size() > *max_traces) {
      *max_traces = traces.size();
    }
    a->recordHistory(false, nullptr, 0, RC::NEVER, false);
    toggles_done.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ITERATIONS MAX_SECONDS\n", argv[0]);
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  const double max_seconds = std::atof(argv[2]);
  auto* allocator = new FakeHostAllocator();
  size_t max_segments = 0, max_traces = 0;

  // Single-threaded, before the workload: is an external registration listed
  // by getSegments()?  (The header's comment on recordExternalRegister says it
  // is not.)  Registration is recorded only while history is on.
  using RC = c10::CachingDeviceAllocator::RecordContext;
  static char external[4096];
  allocator->recordHistory(true, gather_context, 1000, RC::STATE, false);
  allocator->recordExternalRegister(external, sizeof external);
  int external_listed = 0;
  for (const auto& seg : allocator->getSegments()) {
    external_listed += seg.address == reinterpret_cast<size_t>(external);
  }
  allocator->recordExternalUnregister(external);
  allocator->recordHistory(false, nullptr, 0, RC::NEVER, true);

  const int n_workers = 2;
  workers_running.store(n_workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < n_workers; ++w) {
    threads.emplace_back(run_worker, allocator, iterations, max_seconds, w);
  }
  threads.emplace_back(run_snapshotter, allocator, &max_segments);
  threads.emplace_back(run_profiler, allocator, &max_traces);
  for (auto& t : threads) {
    t.join();
  }
  // One machine-readable line; TSAN reports go to stderr.
  std::printf(
      "harness: workers=%d iterations=%d snapshots=%ld toggles=%ld "
      "max_segments=%zu max_traces=%zu external_listed=%d\n",
      n_workers, iterations, snapshots_taken.load(), toggles_done.load(), max_segments, max_traces,
      external_listed);
  // The allocator is deliberately leaked, like the process-wide one in torch.
  return 0;
}
