// Two paths of at::CachingHostAllocatorImpl that the TSAN harness does not take, run
// against the installed torch's header (no sanitizer; the header is the installed one).
//
// Usage: edgecases free | empty-cache | unlock-order
//
// free         A backend whose record_stream throws, as the CUDA backend's does when
//              cudaEventRecord fails.  Two blocks, each used on a second stream, are
//              freed the way PyTorch frees pinned memory: a c10::StorageImpl owns the
//              DataPtr that the allocator's HostAllocator interface returned, and its
//              deleter (DECLARE_HOST_ALLOCATOR's) calls free() when the storage dies.
//              Prints "freed N" after each, then one JSON line: the c10 warnings and
//              whether a third allocation of that size got a freed block back.
// empty-cache  A private pool whose event queue holds an event when empty_cache() runs:
//              a block is allocated to the pool while its stream is not capturing, used
//              on a second stream and freed (so free() queues an event), and the pool is
//              released.  Prints one JSON line: the warnings, what empty_cache() did, and
//              how many segments getSegments() lists afterwards.
// unlock-order The order in which this C++ library's std::scoped_lock unlocks two
//              mutexes, as one JSON line.

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/StorageImpl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "fake_backend.h"

namespace {

// record_stream throws, as the CUDA backend's does when cudaEventRecord fails.
struct FailingBackend final : FakeBackend {
 protected:
  void record_stream(std::optional<std::vector<FakeEvent>>&, FakeStream) override {
    throw std::runtime_error("event record failed");
  }
};

// The allocator as a backend declares it (CUDA's does the same): a HostAllocator whose
// DataPtrs carry failing_deleter, which calls failing_allocator.free(ctx).
DECLARE_HOST_ALLOCATOR(FailingHostAllocator, FailingBackend, failing_deleter, failing_allocator)

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

std::string json_list(const std::vector<std::string>& items) {
  std::string list = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    list += (i ? ", " : "") + json_string(items[i]);
  }
  return list + "]";
}

int free_through_storage(Collect& warnings) {
  std::vector<void*> freed;
  for (int i = 1; i <= 2; ++i) {
    at::DataPtr data = failing_allocator.allocate(256);
    freed.push_back(data.get());
    failing_allocator.record_event(data.get(), data.get_context(), FakeStream(1));
    {
      auto storage = c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), 256, std::move(data), &failing_allocator,
          /*resizable=*/false);
    }  // the last reference goes: ~StorageImpl, the DataPtr's deleter, free()
    std::printf("freed %d\n", i);
    std::fflush(stdout);
  }
  at::DataPtr again = failing_allocator.allocate(256);
  bool reused = again.get() == freed[0] || again.get() == freed[1];
  std::printf("{\"warnings\": %s, \"block_reused\": %s}\n", json_list(warnings.messages).c_str(),
              reused ? "true" : "false");
  return 0;
}

int empty_cache_with_pending_event(Collect& warnings) {
  auto* a = new FakeBackend();  // leaked, like torch's own
  const c10::MempoolId_t id{1, 1};
  a->begin_allocate_to_pool(id, [](c10::Stream) { return true; });
  auto [ptr, ctx] = a->allocate(256);  // to the private pool; the stream is not capturing
  a->record_event(ptr, ctx, FakeStream(1));
  a->free(ctx);  // records an event and queues it in the private pool
  a->end_allocate_to_pool(id);
  a->release_pool(id);
  std::string outcome = "returned", what, code;
  try {
    a->empty_cache();
  } catch (const std::system_error& e) {
    outcome = "threw std::system_error";
    what = e.what();
    code = e.code() == std::errc::resource_deadlock_would_occur ? "resource_deadlock_would_occur"
                                                                : std::to_string(e.code().value());
  } catch (const std::exception& e) {
    outcome = "threw";
    what = e.what();
  }
  std::printf("{\"warnings\": %s, \"empty_cache\": %s, \"exception\": %s, \"code\": %s, "
              "\"segments_after\": %zu}\n",
              json_list(warnings.messages).c_str(), json_string(outcome).c_str(),
              json_string(what).c_str(), json_string(code).c_str(), a->getSegments().size());
  return 0;
}

// A lockable that logs its unlocks.
struct Logged {
  const char* name;
  std::vector<std::string>* log;
  std::mutex m;
  void lock() { m.lock(); }
  bool try_lock() { return m.try_lock(); }
  void unlock() {
    m.unlock();
    log->push_back(name);
  }
};

int unlock_order() {
  std::vector<std::string> log;
  Logged first{"first", &log}, second{"second", &log};
  { std::scoped_lock both(first, second); }
  std::printf("{\"unlocked\": %s}\n", json_list(log).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Collect warnings;
  c10::WarningUtils::set_warning_handler(&warnings);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "free") {
    return free_through_storage(warnings);
  }
  if (mode == "empty-cache") {
    return empty_cache_with_pending_event(warnings);
  }
  if (mode == "unlock-order") {
    return unlock_order();
  }
  std::fprintf(stderr, "usage: %s free | empty-cache | unlock-order\n", argv[0]);
  return 2;
}
