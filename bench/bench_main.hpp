#pragma once
// main() of a benchmark: an error (a missing policy file, a global-tier module from another build) is one line
// naming the benchmark and exit 1, not an uncaught exception's abort; a bad argument is one line and exit 2, and
// --help prints the usage.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace conductor::bench {

// A benchmark's bad argument: guarded_main prints it after the benchmark's name and exits 2.
struct BadArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An integer argument `what` in lo .. hi, read from all of `text` (atoi read "--help" or "abc" as 0 and ran).
inline int int_argument(const char* what, const std::string& text, int lo, int hi) {
  const bool digits = !text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == std::string::npos;
  const long long v = digits ? std::stoll(text) : -1;
  if (!digits || v < lo || v > hi) {
    throw BadArgument(std::string(what) + ": expected an integer " + std::to_string(lo) + " .. " + std::to_string(hi) +
                      ", got '" + text + "'");
  }
  return static_cast<int>(v);
}

// Every deck a table reads can be read: a missing one printed a "cannot read" row and the benchmark exited 0.
inline void check_readable(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) throw BadArgument(path + ": cannot read the deck (" + std::strerror(errno) + ")");
  }
}

inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv, const char* usage = nullptr) {
  for (int i = 1; usage && i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return 0;
    }
  }
  try {
    return run(argc, argv);
  } catch (const BadArgument& e) {
    std::fprintf(stderr, "%s: %s\n%s", name, e.what(), usage ? usage : "");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace conductor::bench
