#pragma once
// One writer per run folder: two conductor commands writing the same run.output at the same time (a sweep whose
// tasks share run.name) would mix their files. The one that starts writing second is refused.
#include <filesystem>
#include <string>

namespace conductor {

// The lock's file in a locked folder (empty; it stays, and is no result of a run).
inline constexpr const char* kFolderLockName = ".conductor.lock";

// Locks `dir` (which exists) for writing until this process ends, however it ends: a POSIX record lock on
// dir/.conductor.lock, which also holds over NFS between nodes. InputError naming `key` and `dir` when another
// process holds it. Locking a folder this process already locked succeeds.
void lock_folder(const std::filesystem::path& dir, const std::string& key);

}  // namespace conductor
