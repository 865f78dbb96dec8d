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
  }
  return "?";
}

}  // namespace conductor::trace
