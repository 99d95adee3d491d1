// The daemon's settings, resolved from the parameter table (nicemu/common/params.h):
// command line > environment > config file > default. Every value is validated against the
// table (type, range, choices); errors name the setting and where its value came from.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "nicemu/common/params.h"

namespace CLI {
class App;
}

namespace nicemu::daemon {

struct SettingsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Settings {
 public:
  // One command-line option per daemon row of the table that has a flag.
  void add_options(CLI::App& app);

  // After parsing: takes the command line, the environment and the config file (the
  // `config` setting) into account. Throws SettingsError.
  void resolve();

  // SIGHUP: re-reads the config file. Live settings that are not pinned by the command line
  // or the environment take their new value; returns the names of those that changed. A
  // changed setting that is not live is left as it is and listed in `needs_restart`.
  // Throws SettingsError (and changes nothing) if the file cannot be read or is invalid.
  std::vector<std::string> reload(std::vector<std::string>& needs_restart);

  bool is_set(std::string_view name) const;        // not the default
  std::string source(std::string_view name) const;  // "default", "command line", ...
  uint64_t uint(std::string_view name) const;
  bool flag(std::string_view name) const;
  std::string str(std::string_view name) const;    // "" for unset paths with a derived default

  // For tests: a config file's settings as text values, validated. Throws SettingsError.
  static std::map<std::string, std::string> read_config(const std::string& path);
  // Checks `text` against row `p`; returns the normalised value or throws (`where` names
  // the origin in the message).
  static std::string validate(const params::Param& p, const std::string& text, const std::string& where);

 private:
  struct Value {
    std::string text;
    std::string source;  // "default", "command line", "environment NICEMU_X", "config file F"
    bool pinned = false; // given on the command line or in the environment
  };
  const Value& at(std::string_view name) const;
  void apply_config(const std::map<std::string, std::string>& file, const std::string& path);

  std::map<std::string, std::string, std::less<>> cli_text_;  // options with a value, by row name
  std::map<std::string, bool, std::less<>> cli_flags_;        // boolean flags, by row name
  std::map<std::string, const void*, std::less<>> cli_opts_;  // CLI::Option*, to ask if given
  std::map<std::string, Value, std::less<>> values_;
};

}  // namespace nicemu::daemon
