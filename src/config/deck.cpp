// Deck loading: the deck's YAML, its fragments and overrides -> typed Deck, with every problem collected and located
// at the file (or command-line override) it came from.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include <yaml-cpp/depthguard.h>

#include "conductor/config/deck.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/config/suggest.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream ss(path);
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

// Children of a section prefix ("" = top level) that the schema knows: leaf names and subsection names.
std::vector<std::string> children_of(const std::string& prefix) {
  std::set<std::string> names;
  for (const auto& f : schema()) {
    if (!prefix.empty() && f.path.rfind(prefix + ".", 0) != 0) continue;
    std::string rest = prefix.empty() ? f.path : f.path.substr(prefix.size() + 1);
    names.insert(rest.substr(0, rest.find('.')));
  }
  return {names.begin(), names.end()};
}

bool is_section(const std::string& path) {
  for (const auto& f : schema()) {
    if (f.path.rfind(path + ".", 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> all_paths() {
  std::vector<std::string> paths;
  for (const auto& f : schema()) paths.push_back(f.path);
  return paths;
}

class Loader {
 public:
  explicit Loader(const LoadOptions& options) : options_(options) {}

  // Where the value at `path` was written: the command-line override that set it, else the file (deck or
  // fragment) it came from, at the node's line and column.
  std::string where(const std::string& path, const YAML::Node& node) const {
    if (auto it = override_of_.find(path); it != override_of_.end()) return "command line '" + shown(it->second) + "'";
    return location(source_of(path), node.Mark());
  }

  // The cross-field checks name the deck file and the key they are about ("DECK: migration.slices = 3 ..."):
  // where an override or a fragment set that key, the problem names that instead, as the per-key checks do.
  // Where the deck set it but an override or a fragment set another key the problem names, both are named
  // ("DECK, command line 'parallel.virtual=2': schedule.kind = zb-h1 uses one chunk per rank, but ...").
  void relocate(std::string& problem) const {
    const std::string head = options_.source_name + ": ";
    if (problem.rfind(head, 0) != 0) return;
    const std::string text = problem.substr(head.size());
    static const std::string kKeyChars = "abcdefghijklmnopqrstuvwxyz0123456789_.";
    std::string key = text.substr(0, text.find(' '));  // "noise.level", "model.layers_per_stage:"
    if (!key.empty() && key.back() == ':') key.pop_back();
    if (key.find('.') != std::string::npos && key.find_first_not_of(kKeyChars) == std::string::npos) {
      if (auto it = override_of_.find(key); it != override_of_.end()) {
        problem = "command line '" + shown(it->second) + "': " + text;
        return;
      }
      if (const std::string source = source_of(key); source != options_.source_name) {
        problem = source + ": " + text;
        return;
      }
    }
    // The other keys the problem names, each place once, in the order they appear.
    static const std::set<std::string> kPaths = [] {
      const std::vector<std::string> v = all_paths();
      return std::set<std::string>(v.begin(), v.end());
    }();
    std::vector<std::string> places;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t from = text.find_first_of(kKeyChars, at);
      if (from == std::string::npos) break;
      const std::size_t to = std::min(text.find_first_not_of(kKeyChars, from), text.size());
      std::string word = text.substr(from, to - from);
      while (!word.empty() && word.back() == '.') word.pop_back();  // a sentence's full stop
      at = to;
      if (word == key || !kPaths.contains(word)) continue;
      std::string place;
      if (auto it = override_of_.find(word); it != override_of_.end()) {
        place = "command line '" + shown(it->second) + "'";
      } else if (const std::string source = source_of(word); source != options_.source_name) {
        place = source;
      }
      if (!place.empty() && std::find(places.begin(), places.end(), place) == places.end()) places.push_back(place);
    }
    if (places.empty()) return;
    std::string where = options_.source_name;
    for (const std::string& place : places) where += ", " + place;
    problem = where + ": " + text;
  }

  static std::string location(const std::string& source, const YAML::Mark& m) {
    if (m.is_null()) return source;
    return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }

  // The fragment that last replaced `path` or a section above it; the deck when none did.
  std::string source_of(std::string path) const {
    while (!path.empty()) {
      if (auto it = origin_.find(path); it != origin_.end()) return it->second;
      const auto dot = path.rfind('.');
      path = dot == std::string::npos ? std::string() : path.substr(0, dot);
    }
    return options_.source_name;
  }

  // An unknown key, with the key it may mean; past kMaxListed problems only counted (a file of thousands of
  // unknown keys gets a screenful, not a line each).
  void unknown_key(const std::string& path, const std::string& prefix, const std::string& key, const std::string& at) {
    if (problems_.size() >= kMaxListed) {
      ++unlisted_;
      return;
    }
    const std::string hint = key == "<<" ? "; YAML merge keys (<<) are not read: write the keys out, or put the "
                                           "shared ones in a fragment (docs/deck.md)"
                                         : suggestion(prefix, key);
    problems_.push_back(at + ": unknown key '" + shown(path) + "'" + hint);
  }

  std::string suggestion(const std::string& prefix, const std::string& key) const {
    std::string near = closest(key, children_of(prefix));
    if (!near.empty()) return "; did you mean '" + (prefix.empty() ? near : prefix + "." + near) + "'?";
    // The key may belong to another section: `pipeline` at the top level means `parallel.pipeline`.
    for (const auto& path : all_paths()) {
      const auto last = path.substr(path.rfind('.') + 1);
      if (last == key) return "; did you mean '" + path + "'?";
    }
    std::string full = prefix.empty() ? key : prefix + "." + key;
    std::string near_full = closest(full, all_paths());
    if (!near_full.empty()) return "; did you mean '" + near_full + "'?";
    return "";
  }

  void walk(const YAML::Node& map, const std::string& prefix, Deck& deck) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      if (!key_node.IsScalar()) {
        problems_.push_back(where(prefix, key_node) + ": keys must be plain names");
        continue;
      }
      const std::string key = key_node.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (key.find('.') != std::string::npos && (find_field(path) != nullptr || is_section(path)))
        continue;  // a key written with a dot: reported by find_repeated_keys, in its own source
      if (!seen_.insert(path).second) continue;  // a repeated key: reported by find_repeated_keys

      if (const Field* f = find_field(path)) {
        std::string problem = f->set(deck, value, *f);
        if (!problem.empty()) problems_.push_back(where(path, value) + ": " + path + ": " + problem);
      } else if (is_section(path)) {
        if (value.IsNull()) continue;  // an empty section keeps its defaults
        if (!value.IsMap()) {
          problems_.push_back(where(path, value) + ": '" + path + "' is a section; expected a mapping of its keys (" +
                              join(children_of(path)) + ")");
          continue;
        }
        walk(value, path, deck);
      } else {
        unknown_key(path, prefix, key, where(path, key_node));
      }
    }
  }

  // A key written twice in one mapping of a source (the deck or a fragment), at that source's file:line:col of
  // the second one (checked on each source's own tree, before merging and overrides, so a repeated key is never
  // blamed on another file or the command line).
  // Also refuses mappings nested deeper than any deck key could be: an alias inside the mapping it names
  // (`x: &x {a: *x}`) is a cycle that every walk over the tree would follow without end.
  void find_repeated_keys(const YAML::Node& map, const std::string& prefix, const std::string& source, int depth = 0) {
    if (depth > kMaxDepth) {
      problems_.push_back(location(source, map.Mark()) + ": '" + shown(prefix) + "' nests mappings " +
                          std::to_string(depth) + " deep; no deck key is deeper than " + std::to_string(kMaxDepth) +
                          " (a YAML alias inside the mapping it names, like `x: &x {a: *x}`, nests without end)");
      return;
    }
    std::map<std::string, YAML::Mark> first;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      const std::string path = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
      const auto [at, fresh] = first.emplace(path, it->first.Mark());
      if (it->first.Scalar().find('.') != std::string::npos) {
        // `run.steps: 3` read as run's steps escaped this check (one mapping at a time) and the merge of fragments
        // and overrides (by section): a later source's run.steps was dropped without a word.
        // Only where the dotted path names a key: any other is an unknown key, with its "did you mean".
        const std::string& key = it->first.Scalar();
        if (find_field(path) != nullptr || is_section(path)) {
          problems_.push_back(location(source, it->first.Mark()) + ": key '" + shown(key) +
                              "' holds a '.'; a deck nests its keys by section ('" +
                              shown(key.substr(0, key.find('.'))) +
                              ":' with the rest indented below it); key.path=value is the command line's form");
        }
      } else if (!fresh) {
        problems_.push_back(location(source, it->first.Mark()) + ": key '" + shown(path) +
                            "' appears twice (first at line " + std::to_string(at->second.line + 1) + ")");
      } else if (it->second.IsMap()) {
        find_repeated_keys(it->second, path, source, depth + 1);
      }
    }
  }

  // Merges a fragment's mapping `from` into the section `into` of the composed tree: a mapping onto a mapping
  // merges key by key; anything else (a value, a list, a mapping onto a value) replaces the entry whole; an empty
  // section changes nothing. The fragment's own key and value nodes are inserted, so their marks locate later
  // problems, and origin_ records which file each replaced entry came from.
  void merge(YAML::Node& into, const YAML::Node& from, const std::string& prefix, const std::string& source) {
    if (split_path(prefix).size() > kMaxDepth) return;  // reported by find_repeated_keys
    for (auto it = from.begin(); it != from.end(); ++it) {
      if (!it->first.IsScalar()) {
        problems_.push_back(location(source, it->first.Mark()) + ": keys must be plain names");
        continue;
      }
      const std::string key = it->first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      // A key the schema does not know is reported here, at the fragment's line, and not merged: looking a key
      // up in a YAML mapping and removing it are linear, so merging thousands of them took quadratic time.
      if (!find_field(path) && !is_section(path)) {
        unknown_key(path, prefix, key, location(source, it->first.Mark()));
        continue;
      }
      const YAML::Node value = it->second;
      const YAML::Node current = static_cast<const YAML::Node&>(into)[key];
      if (current.IsDefined() && current.IsMap() && (value.IsMap() || value.IsNull())) {
        if (value.IsNull()) continue;
        YAML::Node section = own_copy(into, key, current);
        merge(section, value, path, source);
        continue;
      }
      into.remove(key);
      into.force_insert(it->first, value);
      const std::string below = path + ".";
      for (auto o = origin_.lower_bound(below); o != origin_.end() && o->first.rfind(below, 0) == 0;) {
        o = origin_.erase(o);
      }
      origin_[path] = source;
    }
  }

  // Writes each override into the tree, creating sections as needed; unknown paths are reported here.
  void apply_override(YAML::Node& root, const std::string& text) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      problems_.push_back("command line '" + shown(text) + "': expected key.path=value");
      return;
    }
    const std::string path = text.substr(0, eq);
    const std::string value_text = text.substr(eq + 1);
    if (!find_field(path) && is_section(path)) {  // `run=3`: a section, whose keys are set one by one
      problems_.push_back("command line '" + shown(text) + "': '" + path + "' is a section; set one of its keys (" +
                          join(children_of(path)) + "), e.g. " + path + "." + children_of(path).front() + "=...");
      return;
    }
    if (!find_field(path)) {
      std::string hint;
      std::string near = closest(path, all_paths());
      if (!near.empty()) {
        hint = "; did you mean '" + near + "'?";
      } else {
        const auto last = path.substr(path.rfind('.') + 1);
        for (const auto& p : all_paths()) {
          if (p.substr(p.rfind('.') + 1) == last) hint = "; did you mean '" + p + "'?";
        }
      }
      problems_.push_back("command line '" + shown(text) + "': unknown key '" + shown(path) + "'" + hint);
      return;
    }
    // YAML would fold a line break into a space (`a\nb` reads 'a b') or end the value at a `---` line: an
    // override is one line. Bytes that are not UTF-8 it reads as an empty string.
    if (value_text.find_first_of("\r\n") != std::string::npos) {
      problems_.push_back("command line '" + shown(text) + "': " + path +
                          ": the value holds a line break; an override's value is one line (a list: [1, 2])");
      return;
    }
    if (const std::size_t at = utf8_error_at(value_text); at != std::string::npos) {
      problems_.push_back("command line '" + shown(text) + "': " + path + ": the value is not UTF-8 text (at byte " +
                          std::to_string(at) + ")");
      return;
    }
    if (const std::string syntax = yaml_syntax_start(value_text); !syntax.empty()) {
      // YAML reads these as syntax, not text: `run.output=%j_out` (a directive), `checkpoint.resume=!ck` (a tag)
      // and `#ck` (a comment) read as empty, so the default folder was used and the resume dropped; `&a x` is x;
      // `*.bin` an alias. Blanks before them change nothing.
      problems_.push_back("command line '" + shown(text) + "': " + path + ": the value '" + shown(value_text) +
                          "' starts with " + syntax +
                          ", which YAML reads as syntax (a directive, tag, anchor, alias, block, comment or document "
                          "marker), not as text; quote it: " +
                          quoted_override(path, value_text));
      return;
    }
    YAML::Node value;
    try {
      value = value_text.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Load(value_text);
    } catch (const YAML::DeepRecursion&) {
      problems_.push_back("command line '" + shown(text) +
                          "': the value nests lists or mappings too deep to read; "
                          "no deck key is deeper than " +
                          std::to_string(kMaxDepth));
      return;
    } catch (const YAML::Exception& e) {
      problems_.push_back("command line '" + shown(text) + "': cannot parse the value: " + e.msg);
      return;
    }
    if (const std::size_t end = first_node_end(value_text); end != std::string::npos) {
      // YAML reads the first flow list, mapping or quoted text and drops what follows it (`[gaussian] straggler`
      // read [gaussian]); a comment after it is said below.
      const std::size_t more = value_text.find_first_not_of(" \t", end);
      if (more != std::string::npos && value_text[more] != '#') {
        problems_.push_back("command line '" + shown(text) + "': " + path + ": the value '" + shown(value_text) +
                            "' goes on after its closing " + value_text.substr(end - 1, 1) + " ('" +
                            shown(value_text.substr(more)) + "'), which YAML drops (it reads '" +
                            shown(value_text.substr(0, end)) +
                            "'); write one value: a list as [a, b], a text with its spaces inside the quotes");
        return;
      }
    }
    if (const std::size_t hash = comment_start(value_text); hash != std::string::npos) {
      // YAML drops a ' #' and what follows as a comment: on a command line that is part of a value (a path).
      problems_.push_back("command line '" + shown(text) + "': " + path + ": the value '" + shown(value_text) +
                          "' holds ' #', " + "where YAML starts a comment (the value would be '" +
                          shown(value_text.substr(0, value_text.find_last_not_of(" \t", hash - 1) + 1)) +
                          "'); quote it: " + quoted_override(path, value_text));
      return;
    }
    if (!value.IsNull() && !value.IsScalar() && !value.IsSequence()) {
      // YAML reads `file:` or `a: b` as a mapping: the colon, not the key, is what went wrong.
      problems_.push_back("command line '" + shown(text) + "': " + path + ": the value '" + shown(value_text) +
                          "' reads as a YAML mapping (a ':' at its end or before a space); expected a scalar or a "
                          "flow list like [1, 2] (quote a value with a colon: " +
                          quoted_override(path, value_text) + ")");
      return;
    }
    if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
    const auto parts = split_path(path);
    YAML::Node node = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child = node[parts[i]];
      if (!child.IsDefined() || child.IsNull()) {
        node[parts[i]] = YAML::Node(YAML::NodeType::Map);
        child = node[parts[i]];
      } else if (!child.IsMap()) {
        // Reported when the deck's value for the section is walked.
        return;
      }
      child = own_copy(node, parts[i], child);
      node.reset(child);
    }
    // Assigning through node[key] would write into the node itself, which a YAML alias (`seed: *n`) shares
    // with its anchor: the entry is replaced instead, so the override changes exactly this key.
    node.remove(parts.back());
    node[parts.back()] = value;
    override_of_[path] = text;
  }

  // What YAML would read as syntax at the start of an override's value, after any blanks, quoted for a message
  // ("'%'", "'---'"), or "" where it starts as text.
  static std::string yaml_syntax_start(const std::string& value_text) {
    const std::size_t at = value_text.find_first_not_of(" \t");
    if (at == std::string::npos) return {};
    if (std::string_view("%!&*|>@`#").find(value_text[at]) != std::string_view::npos)
      return std::string("'") + value_text[at] + "'";
    for (const char* marker : {"---", "..."}) {  // a document's start or end, when alone or before a blank
      if (value_text.compare(at, 3, marker) == 0 &&
          (value_text.size() == at + 3 || value_text[at + 3] == ' ' || value_text[at + 3] == '\t'))
        return std::string("'") + marker + "'";
    }
    return {};
  }

  // Where the flow list or mapping, or the quoted text, that an override's value starts with ends (one past its
  // closing bracket or quote), or npos where the value starts as plain text or does not close (YAML reads a plain
  // value whole, and names an unclosed one). A quote opens a quoted text only where a value starts (at the start,
  // or after a bracket, a comma, a colon or a blank): `[it's]` holds the plain text it's.
  static std::size_t first_node_end(const std::string& v) {
    const std::size_t start = v.find_first_not_of(" \t");
    if (start == std::string::npos || std::string_view("[{\"'").find(v[start]) == std::string_view::npos)
      return std::string::npos;
    int depth = 0;
    for (std::size_t i = start; i < v.size(); ++i) {
      const char c = v[i];
      const bool value_start = i == start || std::string_view("[{,: \t").find(v[i - 1]) != std::string_view::npos;
      if (c == '"' && value_start) {
        for (++i; i < v.size() && v[i] != '"'; ++i) i += v[i] == '\\' ? 1 : 0;
      } else if (c == '\'' && value_start) {
        for (++i; i < v.size() && !(v[i] == '\'' && (i + 1 >= v.size() || v[i + 1] != '\'')); ++i)
          i += v[i] == '\'' ? 1 : 0;  // '' is a quote inside
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        --depth;
      }
      if (i >= v.size()) return std::string::npos;
      if (depth <= 0) return i + 1;
    }
    return std::string::npos;
  }

  // key='"value"' as a shell line sets the override to `value` as text: YAML's double quotes around it (a '\' and
  // a '"' in it escaped), the whole in the shell's single quotes (a ' in it written '\''), shown() past that.
  static std::string quoted_override(const std::string& path, const std::string& value_text) {
    std::string yaml = "\"";
    for (const char c : value_text) {
      if (c == '\\' || c == '"') yaml += '\\';
      yaml += c;
    }
    yaml += '"';
    std::string shell = "'";
    for (const char c : yaml) shell += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return path + "=" + shown(shell + "'");
  }

  // Where YAML starts a comment in an override's value text ('#' after a space or a tab, outside quotes: the
  // value parsed from the text before it is the value parsed from all of it), or npos.
  static std::size_t comment_start(const std::string& value_text) {
    for (std::size_t i = 1; i < value_text.size(); ++i) {
      if (value_text[i] != '#' || (value_text[i - 1] != ' ' && value_text[i - 1] != '\t')) continue;
      try {
        const YAML::Node all = YAML::Load(value_text), before = YAML::Load(value_text.substr(0, i));
        YAML::Emitter a, b;
        a << YAML::Flow << all;
        b << YAML::Flow << before;
        if (std::string(a.c_str()) == b.c_str()) return i;
      } catch (const YAML::Exception&) {
        // The text before it is not a value of its own (an open quote or bracket): not a comment's start.
      }
    }
    return std::string::npos;
  }

  // Replaces map[key] (a section) by a shallow copy of itself, so that writing into it cannot reach a section
  // that aliases it; its entries (and their marks) are the same nodes.
  static YAML::Node own_copy(YAML::Node& map, const std::string& key, const YAML::Node& section) {
    YAML::Node copy(YAML::NodeType::Map);
    for (auto it = section.begin(); it != section.end(); ++it) copy.force_insert(it->first, it->second);
    map.remove(key);
    map[key] = copy;
    return map[key];
  }

  // A syntax error near a line indented with a tab says so: yaml-cpp's own words ("illegal map value") do not,
  // and a tab looks like spaces in most editors. Checks the error's line (0-based `line`) and the one before.
  static std::string tab_hint(const std::string& text, int line) {
    std::istringstream in(text);
    std::string row;
    for (int i = 0; std::getline(in, row) && i <= line; ++i) {
      if (i < line - 1) continue;
      const std::size_t indent = row.find_first_not_of(" \t");
      if (row.substr(0, indent).find('\t') != std::string::npos) {
        return "; line " + std::to_string(i + 1) +
               " is indented with a tab, which YAML does not allow (indent with "
               "spaces)";
      }
    }
    return "";
  }

  // One source's tree; a syntax error, an empty file or anything but a mapping is an error naming the file.
  // An empty text is the empty deck only where the deck is not a file the user named.
  static YAML::Node parse_source(const std::string& source, const std::string& text, bool is_deck, bool empty_ok) {
    YAML::Node root;
    if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
      // yaml-cpp reads a NUL as an escape and echoes the raw bytes after it.
      const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n') + 1;
      throw DeckError({source + ":" + std::to_string(line) + ": holds a NUL byte; a " +
                       (is_deck ? "deck" : "fragment") + " is a YAML text file (is it a binary file?)"});
    }
    if (const std::size_t at = utf8_error_at(text); at != std::string::npos) {
      // yaml-cpp reads such bytes into the values (a run.output of raw bytes went into resolved.yaml and the
      // trace, whose readers then refused them); the command line's values are refused alike.
      const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1;
      throw DeckError({source + ":" + std::to_string(line) + ": holds bytes that are not UTF-8 text (byte " +
                       std::to_string(at) + " of the file); a " + (is_deck ? "deck" : "fragment") +
                       " is a YAML text file in UTF-8 (save it as UTF-8)"});
    }
    try {
      // Every document, so a second one (after a `---`) is refused rather than silently ignored.
      const std::vector<YAML::Node> documents = YAML::LoadAll(text);
      if (documents.size() > 1) {
        throw DeckError({source + ": holds " + std::to_string(documents.size()) + " YAML documents (separated by " +
                         "`---`); a " + (is_deck ? "deck" : "fragment") + " is one document (merge them, or pass " +
                         "the others as fragments)"});
      }
      if (!documents.empty()) root = documents.front();
    } catch (const YAML::DeepRecursion& e) {
      throw DeckError({location(source, e.mark) + ": YAML nested too deep to read (lists or mappings " +
                       "inside each other hundreds of times); no deck key is deeper than " +
                       std::to_string(kMaxDepth)});
    } catch (const YAML::ParserException& e) {
      throw DeckError({location(source, e.mark) + ": YAML syntax error: " + e.msg + tab_hint(text, e.mark.line)});
    }
    if (root.IsNull() || !root.IsDefined()) {
      // A file with no keys would run every default (or change nothing) and look like success.
      if (!empty_ok && is_deck) {
        throw DeckError({source + ": the deck is empty (no keys); a deck names at least what it changes, e.g. "
                                  "`run: {name: mine}` (every other key keeps its default, see docs/deck.md)"});
      }
      if (!empty_ok) {
        throw DeckError({source + ": the fragment is empty (no keys); a fragment names the keys it changes, e.g. "
                                  "`noise: {level: 0.1}`"});
      }
      root = YAML::Node(YAML::NodeType::Map);
    }
    if (!root.IsMap()) {
      throw DeckError({source + ": a " + (is_deck ? "deck" : "fragment") +
                       " is a mapping of sections (run, model, parallel, ...)"});
    }
    return root;
  }

  Deck load(const std::string& text) {
    Deck deck;
    YAML::Node root = parse_source(options_.source_name, text, true, !options_.from_file);
    find_repeated_keys(root, "", options_.source_name);
    deck.sources.push_back("deck " + options_.source_name);
    for (const auto& fragment : options_.fragments) {
      // A fragment that cannot be read is reported with the other sources' problems (all found together).
      YAML::Node tree;
      try {
        tree = parse_source(fragment.name, fragment.text, false, false);
      } catch (const DeckError& e) {
        problems_.insert(problems_.end(), e.problems().begin(), e.problems().end());
        continue;
      }
      find_repeated_keys(tree, "", fragment.name);
      merge(root, tree, "", fragment.name);
      deck.sources.push_back("fragment " + fragment.name);
    }
    for (const auto& o : options_.overrides) {
      apply_override(root, o);
      deck.sources.push_back("override " + o);
    }
    walk(root, "", deck);
    if (problems_.empty()) {
      finalize_core(deck, options_, problems_);
      finalize_model(deck, options_, problems_);
      finalize_sched(deck, options_, problems_);
      finalize_policy(deck, options_, problems_);
      finalize_migration(deck, options_, problems_);
      for (std::string& problem : problems_) relocate(problem);
    }
    if (unlisted_ > 0) {
      problems_.push_back("... and " + std::to_string(unlisted_) + " more unknown keys, not listed");
    }
    if (!problems_.empty()) throw DeckError(problems_);
    return deck;
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + e;
    return s;
  }

 private:
  const LoadOptions& options_;
  // Deeper than any deck key (section.key, section.subsection.key) with room to spare.
  static constexpr int kMaxDepth = 8;
  static constexpr std::size_t kMaxListed = 20;
  std::vector<std::string> problems_;
  std::size_t unlisted_ = 0;  // unknown keys past kMaxListed problems
  std::set<std::string> seen_;
  std::map<std::string, std::string> override_of_;
  std::map<std::string, std::string> origin_;  // key path -> the fragment that replaced it (absent: the deck)
};

}  // namespace

Deck parse_deck(const std::string& text, const LoadOptions& options) { return Loader(options).load(text); }

std::string to_yaml(const Deck& deck) {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& f : schema()) {
    const auto parts = split_path(f.path);
    YAML::Node node = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!node[parts[i]].IsDefined()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      YAML::Node child = node[parts[i]];
      node.reset(child);
    }
    node[parts.back()] = f.get(deck);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string resolved_yaml(const Deck& deck) {
  if (deck.sources.empty()) return to_yaml(deck);
  std::string header = "# conductor resolved deck (every key, defaults included), composed in this order:\n";
  for (std::string source : deck.sources) {
    // One comment line each, whatever an override's value holds.
    for (size_t i = 0; (i = source.find('\n', i)) != std::string::npos;) source.replace(i, 1, "\\n");
    header += "#   " + source + "\n";
  }
  return header + to_yaml(deck);
}

std::string without_header(const std::string& resolved) {
  size_t at = 0;
  while (at < resolved.size() && resolved[at] == '#') {
    const auto end = resolved.find('\n', at);
    if (end == std::string::npos) return {};
    at = end + 1;
  }
  return resolved.substr(at);
}

}  // namespace conductor::config
