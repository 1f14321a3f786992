// c10::RingBuffer, the host allocator's trace buffer, driven directly over a grid
// of (old max, entries, new max, more entries), built with AddressSanitizer and
// libstdc++'s vector annotations against the installed c10/core/RingBuffer.h.
//
// Usage: ringsweep MAX_OLD
//
// For every old max M in 1..MAX_OLD, entries E in 0..2M+1, new max m in 1..M+1
// and more entries k in 0..M+2, a forked child does what recordHistory does
// without clearHistory: setMaxEntries(M), E inserts, setMaxEntries(m), k inserts,
// then getEntries.  Each child runs in its own process so that one ASan report
// ends only its case.  Insert i stores the value i, so the values getEntries
// returns show their order.  The parent prints one JSON line per case:
// [M, E, m, k, exit status, ASan error kind or "", entries returned or -1,
//  the returned values in the order getEntries gives them (empty if it did not return)].

#include <c10/core/RingBuffer.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// The child: the calls recordHistory makes, then the size getEntries returns.
[[noreturn]] void run_case(int M, int E, int m, int k) {
  c10::RingBuffer<int> ring;
  ring.setMaxEntries(M);
  for (int i = 0; i < E; ++i) ring.insertEntries(i);
  ring.setMaxEntries(m);
  for (int i = 0; i < k; ++i) ring.insertEntries(E + i);
  std::vector<int> out;
  ring.getEntries(out);
  std::printf("ENTRIES %zu [", out.size());
  for (size_t i = 0; i < out.size(); ++i) std::printf(i ? ", %d" : "%d", out[i]);
  std::printf("]\n");
  std::fflush(stdout);
  std::_Exit(0);
}

std::string kind_of(const std::string& text) {
  const std::string tag = "ERROR: AddressSanitizer: ";
  auto at = text.find(tag);
  if (at == std::string::npos) return "";
  auto start = at + tag.size();
  return text.substr(start, text.find_first_of(" \n", start) - start);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ringsweep MAX_OLD\n");
    return 2;
  }
  const int max_old = std::atoi(argv[1]);
  for (int M = 1; M <= max_old; ++M)
    for (int E = 0; E <= 2 * M + 1; ++E)
      for (int m = 1; m <= M + 1; ++m)
        for (int k = 0; k <= M + 2; ++k) {
          int fds[2];
          if (pipe(fds) != 0) return 3;
          std::fflush(stdout);
          pid_t pid = fork();
          if (pid < 0) return 3;
          if (pid == 0) {
            close(fds[0]);
            dup2(fds[1], 1);
            dup2(fds[1], 2);
            run_case(M, E, m, k);
          }
          close(fds[1]);
          std::string text;
          char buf[4096];
          ssize_t n;
          while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, n);
          close(fds[0]);
          int status = 0;
          waitpid(pid, &status, 0);
          int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          long entries = -1;
          std::string values = "[]";
          auto at = text.find("ENTRIES ");
          if (at != std::string::npos) {
            entries = std::strtol(text.c_str() + at + 8, nullptr, 10);
            auto open = text.find('[', at), close = text.find(']', at);
            if (open != std::string::npos && close != std::string::npos) values = text.substr(open, close - open + 1);
          }
          std::printf("[%d, %d, %d, %d, %d, \"%s\", %ld, %s]\n", M, E, m, k, code, kind_of(text).c_str(), entries,
                      values.c_str());
        }
  return 0;
}
