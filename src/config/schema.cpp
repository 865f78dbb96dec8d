#include "conductor/config/schema.hpp"

namespace conductor::config {

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> f;
    add_core_fields(f);
    add_model_fields(f);
    add_sched_fields(f);
    add_policy_fields(f);
    add_migration_fields(f);
    return f;
  }();
  return fields;
}

const Field* find_field(const std::string& path) {
  for (const auto& f : schema()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

}  // namespace conductor::config
