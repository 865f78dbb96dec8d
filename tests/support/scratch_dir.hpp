#pragma once
// A folder of one test process: under the temporary folder ($TMPDIR), named from `prefix` and made unique by
// mkdtemp, removed with everything in it when the object goes. Parallel ctest processes never share one and a
// test run leaves nothing behind (a static one goes at exit, an early return or a failed assertion included).
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace conductor::test_support {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a folder like " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;  // a destructor must not throw; a folder left behind is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace conductor::test_support
