// A fake CPU backend for at::CachingHostAllocatorImpl, shared by harness.cpp,
// statsrace.cpp and edgecases.cpp.
//
// The allocator is a header-only template over a stream type and an event type;
// the device work goes through private virtual hooks that throw by default and
// that a backend (CUDA's, for one) overrides.  This backend needs no GPU and no
// CUDA runtime, only libc10, so the real allocator code runs on any machine:
//   - a stream is only a hashable identity to the allocator (streams_ is a
//     ska::flat_hash_set<S>), plus conversions to and from c10::Stream;
//   - events complete immediately (query_event returns true);
//   - malloc and free stand in for cudaHostAlloc and cudaFreeHost;
//   - the thresholds are fixed, so a run does not depend on PYTORCH_*_ALLOC_CONF;
//   - no stream ever captures, and no background thread processes events.
//
// A program that needs one hook to behave differently derives from FakeBackend
// and overrides that hook (statsrace.cpp: the current stream; edgecases.cpp: a
// record_stream that fails).
//
// Include it after <ATen/core/CachingHostAllocator.h>: harness.cpp declares
// PlainAtomic before that header, for the "atomics removed" overlay.

#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <vector>

namespace {

struct FakeStream {
  int id = 0;
  FakeStream() = default;
  explicit FakeStream(int i) : id(i) {}
  explicit FakeStream(c10::Stream s) : id(static_cast<int>(s.id())) {}
  operator c10::Stream() const {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CPU), id);
  }
  bool operator==(const FakeStream& o) const { return id == o.id; }
};

struct FakeEvent {};

}  // namespace

template <>
struct std::hash<FakeStream> {
  size_t operator()(const FakeStream& s) const noexcept { return std::hash<int>()(s.id); }
};

namespace {

using Base = at::CachingHostAllocatorImpl<FakeStream, FakeEvent>;

struct FakeBackend : Base {
  bool pinned_use_background_threads() override { return false; }

 protected:
  void allocate_host_memory(size_t size, void** ptr) override { *ptr = std::malloc(size); }
  void free_block(at::HostBlock<FakeStream>* block) override { std::free(block->ptr_); }
  void record_stream(std::optional<std::vector<FakeEvent>>& events, FakeStream) override {
    events->emplace_back();
  }
  bool query_event(FakeEvent&) override { return true; }
  FakeStream get_current_stream() const override { return FakeStream(); }
  bool stream_is_capturing(FakeStream) const override { return false; }
  size_t pinned_max_round_threshold() const override { return size_t(1) << 20; }
  size_t pinned_max_cached_size() const override { return size_t(1) << 30; }
};

}  // namespace
