#pragma once
// main() of a benchmark: an error (a missing policy file, a global-tier module from another build) is one line
// naming the benchmark and exit 1, not an uncaught exception's abort.
#include <cstdio>
#include <exception>

namespace conductor::bench {

inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace conductor::bench
