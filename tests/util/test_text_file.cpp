// write_text_file (util/text_file.hpp): a write that fails leaves the file as it was, never empty or cut short.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "conductor/util/error.hpp"
#include "conductor/util/text_file.hpp"

namespace fs = std::filesystem;
using namespace conductor;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(TextFile, WritesAndReplacesWhole) {
  const fs::path dir = fs::temp_directory_path() / ("conductor_text_file_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_text_file(dir / "summary.json", "{\"a\": 1}\n");
  write_text_file(dir / "summary.json", "{\"b\": 2}\n");
  EXPECT_EQ(read_all(dir / "summary.json"), "{\"b\": 2}\n");
  EXPECT_FALSE(fs::exists(dir / "summary.json.tmp"));
  fs::remove_all(dir);
}

// A full disk (here a file-size limit: the same refusal, EFBIG) left summary.json empty: a resumed run lost the
// previous attempt's. Now the earlier content stays, the message names the file, and no temporary is left.
TEST(TextFile, FailedWriteKeepsTheEarlierFile) {
  const fs::path dir = fs::temp_directory_path() / ("conductor_text_file_full_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "summary.json";
  write_text_file(file, "earlier\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_text_file(file, std::string(100000, 'x'));
    } catch (const Error& e) {
      const std::string msg = e.what();
      _exit(msg.find("cannot write '" + file.string() + "': File too large") == 0 ? 0 : 2);
    }
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error; 2: another message";
  EXPECT_EQ(read_all(file), "earlier\n");
  EXPECT_FALSE(fs::exists(dir / "summary.json.tmp"));
  fs::remove_all(dir);
}
