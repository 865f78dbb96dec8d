#pragma once
// Progress of long commands (`conductor simulate` of many steps, `train-policy`) on stderr, rate-limited, and the
// duration text the runtime's step lines share with it. A line is printed at most once per CONDUCTOR_PROGRESS_S
// seconds (default 1; 0 prints every update, which the tests use), only at log level info or above, and a
// command that finishes within the first interval prints none; after any line, the last update prints one too.
#include <chrono>
#include <string>

namespace conductor {

// "0.4 s", "12.3 s", "3 min 05 s", "2 h 07 min": compact and of bounded width.
std::string format_duration(double seconds);

// Seconds left for `total` units after `done` took `elapsed_s` (mean rate so far); negative when unknown.
double eta_seconds(double elapsed_s, long long done, long long total);

// Seconds between progress lines as CONDUCTOR_PROGRESS_S gives them (a number >= 0), or a negative value for
// anything else (unset or empty: the default, 1).
double parse_progress_interval(const char* text);

class Progress {
 public:
  // what: the command ("simulate"); unit: what is counted ("steps").
  Progress(std::string what, std::string unit, long long total);
  void update(long long done);

 private:
  std::string what_, unit_;
  long long total_;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace conductor
