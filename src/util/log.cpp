#include "conductor/util/log.hpp"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace conductor::log {

namespace {
int g_rank = 0;
int g_world = 1;
Level g_level = [] {
  Level level = Level::Info;
  const char* env = std::getenv("CONDUCTOR_LOG");
  if (env) parse_level(env, level);  // anything else: the command line refuses it (cli::main)
  return level;
}();

void emit(std::FILE* stream, const char* tag, const std::string& message) {
  if (g_world > 1) {
    std::fprintf(stream, "[rank %d] %s%s\n", g_rank, tag, message.c_str());
  } else {
    std::fprintf(stream, "%s%s\n", tag, message.c_str());
  }
  std::fflush(stream);
}
}  // namespace

bool parse_level(const char* text, Level& level) {
  static constexpr std::pair<const char*, Level> kLevels[] = {
      {"error", Level::Error}, {"warn", Level::Warn}, {"info", Level::Info}, {"debug", Level::Debug}};
  for (const auto& [name, value] : kLevels) {
    if (!std::strcmp(text, name)) {
      level = value;
      return true;
    }
  }
  return false;
}

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() { return g_rank; }
Level level() { return g_level; }
void set_level(Level level) { g_level = level; }

void error(const std::string& message) { emit(stderr, "conductor: error: ", message); }
void warn(const std::string& message) {
  if (g_level >= Level::Warn) emit(stderr, "conductor: warning: ", message);
}
void info(const std::string& message) {
  if (g_level >= Level::Info && g_rank == 0) {
    std::fprintf(stdout, "%s\n", message.c_str());
    std::fflush(stdout);
  }
}
void debug(const std::string& message) {
  if (g_level >= Level::Debug) emit(stderr, "conductor: debug: ", message);
}

}  // namespace conductor::log
