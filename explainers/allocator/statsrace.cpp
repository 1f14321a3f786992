// The allocator's statistics with a private pool in use, under ThreadSanitizer.
//
// Usage: statsrace pools | getstats ITERATIONS
//
// main() opens a private pool for stream 1 (begin_allocate_to_pool), then starts two
// threads and joins them:
//   pools     one thread allocates and frees on stream 1 (the private pool), the other
//             on stream 0 (the default pool);
//   getstats  one thread allocates and frees on stream 1 (the private pool), the other
//             calls getStats().
// Each does ITERATIONS rounds.  Stream 1 never captures, so the allocator warns once
// that private pools have been tested only during graph capture; the warning is
// collected, not printed.  The last line of stdout is "statsrace: MODE done".

#include <ATen/core/CachingHostAllocator.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "fake_backend.h"

namespace {

thread_local int current_stream = 0;

struct FakeHostAllocator final : FakeBackend {
 protected:
  // The calling thread's stream: the private pool takes what stream 1 allocates.
  FakeStream get_current_stream() const override { return FakeStream(current_stream); }
};

struct Quiet : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

void allocate_and_free(FakeHostAllocator* a, int stream, int iterations) {
  current_stream = stream;
  for (int i = 0; i < iterations; ++i) {
    auto [ptr, ctx] = a->allocate(256);
    a->free(ctx);
  }
}

// Written by the getStats thread only; it keeps the compiler from dropping the reads.
volatile int64_t sink = 0;

int64_t sum(const c10::CachingAllocator::Stat& s) {
  return s.current + s.peak + s.allocated + s.freed;
}

void read_stats(FakeHostAllocator* a, int iterations) {
  for (int i = 0; i < iterations; ++i) {
    auto stats = a->getStats();
    int64_t total = sum(stats.allocations) + sum(stats.allocated_bytes) +
        sum(stats.active_requests) + sum(stats.active_bytes);
    for (int64_t n : stats.bucket_allocation) {
      total += n;
    }
    sink = total;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 0;
  if ((mode != "pools" && mode != "getstats") || iterations <= 0) {
    std::fprintf(stderr, "usage: %s pools|getstats ITERATIONS\n", argv[0]);
    return 2;
  }
  Quiet quiet;
  c10::WarningUtils::set_warning_handler(&quiet);
  auto* a = new FakeHostAllocator();  // leaked, like torch's own
  a->begin_allocate_to_pool(c10::MempoolId_t{1, 1}, [](c10::Stream s) { return s.id() == 1; });
  std::thread private_pool(allocate_and_free, a, 1, iterations);
  std::thread other = mode == "pools" ? std::thread(allocate_and_free, a, 0, iterations)
                                      : std::thread(read_stats, a, iterations);
  private_pool.join();
  other.join();
  std::printf("statsrace: %s done\n", mode.c_str());
  return 0;
}
