// The host allocator's trace buffer when recording is re-enabled with a smaller
// max_entries, built with AddressSanitizer against the installed header.
//
// Usage: ringbuffer shrink | clear
//
// Recording is enabled with max_entries 8, and seven external registrations (two
// trace entries each: SEGMENT_ALLOC and ALLOC) fill the c10::RingBuffer and wrap it,
// leaving its next slot at 6.  Recording is enabled again with max_entries 2,
// without clearHistory ("shrink") or with it ("clear"), and two more registrations
// are made.  RingBuffer::setMaxEntries does not reset the next slot, and
// insertEntries resets it only when it equals the maximum, so in "shrink" the slot
// runs past the buffer's end.  Prints one JSON line when the program survives.

#include <ATen/core/CachingHostAllocator.h>

#include <cstdio>
#include <cstring>

#include "fake_backend.h"

namespace {
std::shared_ptr<c10::GatheredContext> no_context() { return nullptr; }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "shrink") != 0 && std::strcmp(argv[1], "clear") != 0)) {
    std::fprintf(stderr, "usage: ringbuffer shrink|clear\n");
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
  const size_t before = allocator->getTraces().size();
  allocator->recordHistory(true, no_context, 2, RC::STATE, clear);
  for (int i = 7; i < 9; ++i) {
    allocator->recordExternalRegister(memory[i], sizeof(memory[i]));
  }
  std::printf("{\"traces_before\": %zu, \"traces_after\": %zu}\n", before, allocator->getTraces().size());
  return 0;
}
