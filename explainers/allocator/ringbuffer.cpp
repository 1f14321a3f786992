// The host allocator's trace buffer when recording is re-enabled with a smaller
// max_entries, built with AddressSanitizer against the installed header.
//
// Usage: ringbuffer shrink | clear | window
//
// Recording is enabled with max_entries 8, and seven external registrations (two
// trace entries each: SEGMENT_ALLOC and ALLOC) fill the c10::RingBuffer and wrap it,
// leaving its next slot at 6.  Recording is enabled again with max_entries 2,
// without clearHistory ("shrink") or with it ("clear"), and two more registrations
// are made.  RingBuffer::setMaxEntries does not reset the next slot, and
// insertEntries resets it only when it equals the maximum, so in "shrink" the slot
// runs past the buffer's end.  Prints one JSON line when the program survives.
//
// "window" replays, in a fixed order on one thread, what the trace buffer sees when
// recordHistory(true, ..., 2, ..., clearHistory=true) runs while another thread
// registers memory: recordHistory's setMaxEntries(2) and its clear() each take and
// release the buffer's alloc_trace_lock, and record_trace takes no allocator lock,
// so the other thread's two registrations (four insertEntries) can land between
// them.  The allocator's trace_buffer_ is private, so the replay drives a
// c10::RingBuffer of the allocator's own TraceEntry type, filled with copies of the
// entries the allocator recorded, through that sequence of calls.

#include <ATen/core/CachingHostAllocator.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "fake_backend.h"

namespace {
std::shared_ptr<c10::GatheredContext> no_context() { return nullptr; }
}  // namespace

int main(int argc, char** argv) {
  const bool window = argc == 2 && std::strcmp(argv[1], "window") == 0;
  if (argc != 2 || (std::strcmp(argv[1], "shrink") != 0 && std::strcmp(argv[1], "clear") != 0 && !window)) {
    std::fprintf(stderr, "usage: ringbuffer shrink|clear|window\n");
    return 2;
  }
  const bool clear = std::strcmp(argv[1], "clear") == 0;
  using RC = c10::CachingDeviceAllocator::RecordContext;
  auto* allocator = new FakeBackend();
  static char memory[16][64];
  allocator->recordHistory(true, no_context, 8, RC::STATE, false);
  for (int i = 0; i < 7; ++i) {
    allocator->recordExternalRegister(memory[i], sizeof(memory[i]));
  }
  if (window) {
    const auto recorded = allocator->getTraces();  // the 8 newest of the 14 entries
    c10::RingBuffer<FakeBackend::TraceEntry> ring;
    ring.setMaxEntries(8);                                    // the first recordHistory
    for (int i = 0; i < 14; ++i) ring.insertEntries(recorded[i % recorded.size()]);  // 7 registrations
    ring.setMaxEntries(2);                                    // recordHistory(..., 2, ..., true): setMaxEntries
    for (int i = 0; i < 4; ++i) ring.insertEntries(recorded[i % recorded.size()]);   // another thread: 2 registrations
    ring.clear();                                             // the same recordHistory: clear()
    std::vector<FakeBackend::TraceEntry> left;
    ring.getEntries(left);
    std::printf("{\"traces_before\": %zu, \"traces_after\": %zu}\n", recorded.size(), left.size());
    return 0;
  }
  const size_t before = allocator->getTraces().size();
  allocator->recordHistory(true, no_context, 2, RC::STATE, clear);
  for (int i = 7; i < 9; ++i) {
    allocator->recordExternalRegister(memory[i], sizeof(memory[i]));
  }
  std::printf("{\"traces_before\": %zu, \"traces_after\": %zu}\n", before, allocator->getTraces().size());
  return 0;
}
