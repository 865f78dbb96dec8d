#pragma once
// Rank-tagged logging. Progress (info) is printed by rank 0 only; warnings and errors by whichever rank has
// them, tagged with that rank and "conductor: error: " or "conductor: warning: " (as the job scripts tag theirs:
// "conductor-job: error: "). The level comes from CONDUCTOR_LOG (error|warn|info|debug), default info.
#include <cstdio>
#include <string>

namespace conductor::log {

enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// The level a CONDUCTOR_LOG value names ("error", "warn", "info", "debug"), or false for anything else.
bool parse_level(const char* text, Level& level);

void set_rank(int rank, int world_size);
int rank();
Level level();
void set_level(Level level);

void error(const std::string& message);
void warn(const std::string& message);
void info(const std::string& message);   // rank 0 only
void debug(const std::string& message);  // every rank, tagged

}  // namespace conductor::log
