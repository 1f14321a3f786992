// What CachingHostAllocatorImpl::free() does when recording an event fails.
//
// free() records one event on every stream a block was used on (record_event
// added them).  Here the backend's record_stream throws, as a CUDA backend's
// does when cudaEventRecord fails.  The program frees such a block, then
// allocates the same size again, and prints one JSON line: whether free()
// threw (and what), which warnings c10 emitted, and whether the second
// allocation got the first block back.  The header is the installed torch's.

#include <ATen/core/CachingHostAllocator.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
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

struct FailingEventAllocator final : Base {
  bool pinned_use_background_threads() override { return false; }

 private:
  void allocate_host_memory(size_t size, void** ptr) override { *ptr = std::malloc(size); }
  void free_block(at::HostBlock<FakeStream>* block) override { std::free(block->ptr_); }
  void record_stream(std::optional<std::vector<FakeEvent>>&, FakeStream) override {
    throw std::runtime_error("event record failed");
  }
  bool query_event(FakeEvent&) override { return true; }
  FakeStream get_current_stream() const override { return FakeStream(); }
  bool stream_is_capturing(FakeStream) const override { return false; }
  size_t pinned_max_round_threshold() const override { return size_t(1) << 20; }
  size_t pinned_max_cached_size() const override { return size_t(1) << 30; }
};

// Collects c10 warnings instead of printing them.
struct Collect : c10::WarningHandler {
  std::vector<std::string> messages;
  void process(const c10::Warning& w) override { messages.push_back(w.msg()); }
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

int main() {
  Collect warnings;
  c10::WarningUtils::set_warning_handler(&warnings);
  auto* allocator = new FailingEventAllocator();  // leaked, like torch's own

  auto [first, ctx] = allocator->allocate(256);
  allocator->record_event(first, ctx, FakeStream(1));  // used on a second stream
  std::string threw;
  try {
    allocator->free(ctx);
  } catch (const std::exception& e) {
    threw = e.what();
  }
  auto [second, ctx2] = allocator->allocate(256);
  allocator->free(ctx2);  // this block was never used on another stream

  std::string list = "[";
  for (size_t i = 0; i < warnings.messages.size(); ++i) {
    list += (i ? ", " : "") + json_string(warnings.messages[i]);
  }
  list += "]";
  std::printf("{\"free_threw\": %s, \"exception\": %s, \"warnings\": %s, \"block_reused\": %s}\n",
              threw.empty() ? "false" : "true", json_string(threw).c_str(), list.c_str(),
              first == second ? "true" : "false");
  return 0;
}
