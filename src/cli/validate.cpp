#include <cstdio>
#include <string>

#include "conductor/cli/cli.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/format.hpp"

namespace conductor::cli {

namespace {

std::string escape_cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

// The schema as a Markdown table; docs/deck.md embeds this output (a test checks it lists every key). The
// defaults are the code's, before any derivation: a key whose default means "derived" (schedule.memory_limit 0,
// cost.memory_after_b -1) shows that value, and its meaning says what it derives from.
void print_keys() {
  const config::Deck defaults{};
  std::string section = "\x01";
  for (const auto& f : config::schema()) {
    const auto dot = f.path.find('.');
    const std::string this_section = dot == std::string::npos ? "" : f.path.substr(0, dot);
    if (this_section != section) {
      section = this_section;
      std::printf("\n### %s\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n",
                  section.empty() ? "top level" : ("`" + section + "`").c_str());
    }
    YAML::Emitter e;
    e << YAML::Flow << f.get(defaults);
    std::string allowed;
    for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + ("`" + c + "`");
    for (const auto& p : f.prefixes) allowed += (allowed.empty() ? "" : ", ") + ("`" + p + "...`");
    if (f.min || f.max) {
      // Shortest round-trip text, as resolved decks print numbers (to_string would show 1e-7 as 0.000000).
      const auto num = [](double v) { return format_double(v); };
      allowed = (f.min ? num(*f.min) : std::string("-inf")) + " .. " + (f.max ? num(*f.max) : std::string("inf"));
    }
    std::printf("| `%s` | %s | `%s` | %s | %s |\n", f.path.c_str(), f.type_name.c_str(), e.c_str(),
                escape_cell(allowed).c_str(), escape_cell(f.doc).c_str());
  }
}

}  // namespace

int cmd_validate(const Invocation& inv) {
  if (inv.has_flag("--keys")) {
    print_keys();
    return 0;
  }
  const config::Deck deck = load_deck(inv, config::Command::Validate);
  std::fputs(config::to_yaml(deck).c_str(), stdout);
  return 0;
}

}  // namespace conductor::cli
