#include "conductor/util/log.hpp"

#include <cstdlib>
#include <cstring>

namespace conductor::log {

namespace {
int g_rank = 0;
int g_world = 1;
Level g_level = [] {
  const char* env = std::getenv("CONDUCTOR_LOG");
  if (!env) return Level::Info;
  if (!std::strcmp(env, "error")) return Level::Error;
  if (!std::strcmp(env, "warn")) return Level::Warn;
  if (!std::strcmp(env, "debug")) return Level::Debug;
  return Level::Info;
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

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() { return g_rank; }
Level level() { return g_level; }
void set_level(Level level) { g_level = level; }

void error(const std::string& message) { emit(stderr, "error: ", message); }
void warn(const std::string& message) {
  if (g_level >= Level::Warn) emit(stderr, "warning: ", message);
}
void info(const std::string& message) {
  if (g_level >= Level::Info && g_rank == 0) {
    std::fprintf(stdout, "%s\n", message.c_str());
    std::fflush(stdout);
  }
}
void debug(const std::string& message) {
  if (g_level >= Level::Debug) emit(stderr, "debug: ", message);
}

}  // namespace conductor::log
