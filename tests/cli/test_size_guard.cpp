// The size guard's limits from the system: a memory cgroup's limit less its use (Slurm's --mem, a container's
// limit), v1 and v2 layouts as the kernel lays them out, read from a folder standing in for /sys/fs/cgroup.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "conductor/cli/size_guard.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using conductor::cli::cgroup_memory_left;

namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST(SizeGuard, CgroupMemoryLeftReadsV1AndV2) {
  static const conductor::test_support::ScratchDir scratch("conductor-cgroup");
  const fs::path root = scratch / "sys", self = scratch / "self";
  // v2: the unified hierarchy's one line, the job's folder holding memory.max and memory.current.
  write(self, "0::/slurm/uid_0/job_7/step_0\n");
  write(root / "slurm/uid_0/job_7/step_0/memory.max", "8000000000\n");
  write(root / "slurm/uid_0/job_7/step_0/memory.current", "3000000000\n");
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 5000000000u);
  write(root / "slurm/uid_0/job_7/step_0/memory.max", "max\n");  // no limit
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 0u);
  // v1: the memory controller's line among the others; its limit near 2^63 is none.
  write(self, "9:name=systemd:/\n4:cpuacct,memory:/slurm/job_9\n0::/\n");
  write(root / "memory/slurm/job_9/memory.limit_in_bytes", "4000000000\n");
  write(root / "memory/slurm/job_9/memory.usage_in_bytes", "1000000000\n");
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 3000000000u);
  write(root / "memory/slurm/job_9/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 0u);
  // Used past its limit: 1 byte left, never 0 (none).
  write(root / "memory/slurm/job_9/memory.limit_in_bytes", "1000\n");
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 1u);
  // No memory controller, or no file: no limit.
  write(self, "3:cpuset:/\n");
  EXPECT_EQ(cgroup_memory_left(self.string(), root.string()), 0u);
  EXPECT_EQ(cgroup_memory_left((scratch / "none").string(), root.string()), 0u);
}
