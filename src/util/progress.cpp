#include "conductor/util/progress.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "conductor/util/format.hpp"
#include "conductor/util/log.hpp"

namespace conductor {

std::string format_duration(double seconds) {
  char buf[48];
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 3600) {
    const long s = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", s / 60, s % 60);
  } else {
    const long m = std::lround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%ld h %02ld min", m / 60, m % 60);
  }
  return buf;
}

double eta_seconds(double elapsed_s, long long done, long long total) {
  if (done <= 0 || total < done) return -1;
  return elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
}

double parse_progress_interval(const char* text) {
  if (!text || !*text) return 1.0;
  return parse_plain_decimal(text);
}

namespace {

// CONDUCTOR_PROGRESS_S: seconds between progress lines (the command line refuses an unreadable value first).
double progress_interval() {
  const double v = parse_progress_interval(std::getenv("CONDUCTOR_PROGRESS_S"));
  return v >= 0 ? v : 1.0;
}

}  // namespace

Progress::Progress(std::string what, std::string unit, long long total)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      interval_s_(progress_interval()),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::update(long long done) {
  if (log::level() < log::Level::Info || log::rank() != 0) return;
  const auto now = std::chrono::steady_clock::now();
  const bool finished = done >= total_;
  if (std::chrono::duration<double>(now - last_).count() < interval_s_ && !(finished && printed_)) return;
  last_ = now;
  printed_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "%s: %lld/%lld %s (%3.0f%%), elapsed %s, ETA %s\n", what_.c_str(), done, total_, unit_.c_str(),
               total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
               format_duration(elapsed).c_str(), format_duration(eta_seconds(elapsed, done, total_)).c_str());
  std::fflush(stderr);
}

}  // namespace conductor
