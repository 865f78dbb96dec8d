#include "conductor/trace/event.hpp"

namespace conductor::trace {

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::F: return "F";
    case EventKind::B: return "B";
    case EventKind::W: return "W";
    case EventKind::BW: return "BW";
    case EventKind::SEND: return "SEND";
    case EventKind::RECV: return "RECV";
    case EventKind::ANNOUNCE: return "ANNOUNCE";
    case EventKind::HELP_F: return "HELP_F";
    case EventKind::HELP_B: return "HELP_B";
    case EventKind::HELP_W: return "HELP_W";
    case EventKind::HELP_BW: return "HELP_BW";
  }
  return "?";
}

}  // namespace conductor::trace
