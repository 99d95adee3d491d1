// The parameter table (nicemu/common/params.h), its renderings, and the daemon's settings
// resolution (nicemu/daemon/settings.h): validation, config files, reload.
#include <doctest/doctest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "nicemu/common/params.h"
#include "nicemu/common/params_render.h"
#include "nicemu/daemon/settings.h"

using nicemu::daemon::Settings;
using nicemu::daemon::SettingsError;
namespace params = nicemu::params;

namespace {

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/nicemu-params-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
    write(text);
  }
  void write(const std::string& text) const { std::ofstream(path) << text; }
  ~TempFile() { std::remove(path.c_str()); }
};

// Parses `args` as the daemon's command line and resolves the settings.
Settings resolved(std::vector<std::string> args) {
  Settings s;
  CLI::App app;
  s.add_options(app);
  args.insert(args.begin(), "nicemu");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  s.resolve();
  return s;
}

}  // namespace

TEST_CASE("the table: lookups, defaults within bounds, unique names") {
  static_assert(params::param("spin_us").env == "NICEMU_SPIN_US");
  static_assert(params::default_uint(params::param("bte_channels")) == 2);
  CHECK(params::find("no_such_setting") == nullptr);
  CHECK(params::find_config_key("stats_interval_ms") == &params::param("stats_interval_ms"));
  CHECK(params::find_config_key("spin_us") == nullptr);  // a library setting: not in the config file
  std::set<std::string_view> names;
  for (const auto& p : params::kTable) CHECK(names.insert(p.name).second);
}

TEST_CASE("env_uint: value in range, else the default") {
  const auto& p = params::param("spin_us");
  setenv("NICEMU_SPIN_US", "250", 1);
  CHECK(params::env_uint(p) == 250);
  setenv("NICEMU_SPIN_US", "1000000", 1);  // above the table's max
  CHECK(params::env_uint(p) == 100);
  setenv("NICEMU_SPIN_US", "12abc", 1);
  CHECK(params::env_uint(p) == 100);
  setenv("NICEMU_SPIN_US", "-5", 1);
  CHECK(params::env_uint(p) == 100);
  unsetenv("NICEMU_SPIN_US");
  CHECK(params::env_uint(p) == 100);
}

TEST_CASE("validate: types, ranges, choices, with the origin in the message") {
  const auto& bte = params::param("bte_channels");
  CHECK(Settings::validate(bte, "64", "x") == "64");
  CHECK_THROWS_WITH_AS(Settings::validate(bte, "65", "command line"), "bte_channels (command line): 65 is outside 1..64",
                       SettingsError);
  CHECK_THROWS_AS(Settings::validate(bte, "0x10", "x"), SettingsError);
  CHECK_THROWS_AS(Settings::validate(bte, "99999999999999999999999", "x"), SettingsError);
  CHECK(Settings::validate(params::param("device"), "gemini", "x") == "gemini");
  CHECK_THROWS_AS(Settings::validate(params::param("device"), "seastar", "x"), SettingsError);
  CHECK(Settings::validate(params::param("allow_any_credential"), "1", "x") == "true");
  CHECK_THROWS_AS(Settings::validate(params::param("allow_any_credential"), "yes", "x"), SettingsError);
}

TEST_CASE("the rendered default config is valid and states every default") {
  std::string toml = params::render_toml();
  // Uncomment every setting that has a literal default: the file must parse, and every value
  // must equal the table's default.
  std::string uncommented;
  size_t count = 0;
  for (size_t pos = 0; pos < toml.size();) {
    size_t nl = toml.find('\n', pos);
    std::string line = toml.substr(pos, nl - pos);
    pos = nl == std::string::npos ? toml.size() : nl + 1;
    if (line.size() > 1 && line[0] == '#' && line.find(" = ") != std::string::npos && line.find("\"\"") == std::string::npos &&
        line[1] != ' ') {
      uncommented += line.substr(1) + "\n";
      ++count;
    }
  }
  TempFile f(uncommented);
  auto values = Settings::read_config(f.path);
  CHECK(values.size() == count);
  for (const auto& [k, v] : values) CHECK(v == params::find_config_key(k)->default_text);
  for (const auto& p : params::kTable)
    if (!p.config_key.empty()) CHECK(toml.find("#" + std::string(p.config_key) + " = ") != std::string::npos);
}

TEST_CASE("every rendering names every setting") {
  for (auto f : {params::Format::kText, params::Format::kMarkdown, params::Format::kScdoc}) {
    std::string out = params::render(f);
    for (const auto& p : params::kTable) {
      std::string name(p.name);
      if (f == params::Format::kScdoc) {
        std::string esc;
        for (char c : name) esc += c == '_' ? std::string("\\_") : std::string(1, c);
        name = esc;
      }
      CHECK_MESSAGE(out.find(name) != std::string::npos, name);
    }
  }
  CHECK(params::format_from_name("toml") == params::Format::kToml);
  CHECK(!params::format_from_name("html"));
}

TEST_CASE("config files: unknown keys, wrong types and syntax errors are refused") {
  TempFile unknown("frobnicate = 1\n");
  CHECK_THROWS_WITH_AS(Settings::read_config(unknown.path),
                       doctest::Contains("unknown setting 'frobnicate'"), SettingsError);
  TempFile wrong_type("bte_channels = \"two\"\n");
  CHECK_THROWS_WITH_AS(Settings::read_config(wrong_type.path), doctest::Contains("expected a whole number"),
                       SettingsError);
  TempFile negative("bte_channels = -1\n");
  CHECK_THROWS_AS(Settings::read_config(negative.path), SettingsError);
  TempFile syntax("bte_channels = = 2\n");
  CHECK_THROWS_WITH_AS(Settings::read_config(syntax.path), doctest::Contains("line 1"), SettingsError);
  TempFile library_only("spin_us = 5\n");
  CHECK_THROWS_AS(Settings::read_config(library_only.path), SettingsError);
  CHECK_THROWS_AS(Settings::read_config("/nonexistent/nicemu.toml"), SettingsError);
}

TEST_CASE("precedence: command line > environment > config file > default") {
  TempFile cfg("bte_channels = 3\nrundir = \"/from/config\"\nlog_level = \"warn\"\n");
  unsetenv("NICEMU_RUNDIR");
  Settings a = resolved({"--config", cfg.path});
  CHECK(a.uint("bte_channels") == 3);
  CHECK(a.str("rundir") == "/from/config");
  CHECK(a.uint("stats_interval_ms") == 250);
  CHECK(a.source("stats_interval_ms") == "default");
  CHECK(a.str("socket").empty());  // derived by the daemon
  setenv("NICEMU_RUNDIR", "/from/env", 1);
  Settings b = resolved({"--config", cfg.path, "--bte-channels", "5"});
  CHECK(b.uint("bte_channels") == 5);
  CHECK(b.source("bte_channels") == "command line");
  CHECK(b.str("rundir") == "/from/env");
  CHECK(b.source("rundir") == "environment NICEMU_RUNDIR");
  Settings c = resolved({"--config", cfg.path, "--rundir", "/from/flag"});
  CHECK(c.str("rundir") == "/from/flag");
  unsetenv("NICEMU_RUNDIR");
  Settings d = resolved({"--allow-any-credential"});
  CHECK(d.flag("allow_any_credential"));
  CHECK_THROWS_AS(resolved({"--bte-channels", "0"}), SettingsError);
}

TEST_CASE("reload: live settings change, restart-only ones are reported, pinned ones stay") {
  TempFile cfg("log_level = \"info\"\nbte_channels = 2\n");
  Settings s = resolved({"--config", cfg.path, "--stats-interval-ms", "100"});
  std::vector<std::string> restart;
  CHECK(s.reload(restart).empty());
  CHECK(restart.empty());

  cfg.write("log_level = \"debug\"\nbte_channels = 4\nstats_interval_ms = 20\n");
  auto changed = s.reload(restart);
  CHECK(changed == std::vector<std::string>{"log_level"});          // stats_interval_ms is pinned
  CHECK(restart == std::vector<std::string>{"bte_channels"});
  CHECK(s.str("log_level") == "debug");
  CHECK(s.uint("bte_channels") == 2);
  CHECK(s.uint("stats_interval_ms") == 100);

  // A key removed from the file returns to its default.
  cfg.write("bte_channels = 2\n");
  restart.clear();
  CHECK(s.reload(restart) == std::vector<std::string>{"log_level"});
  CHECK(s.str("log_level") == "info");

  // A broken file changes nothing.
  cfg.write("log_level = \"trace\"\nnot toml at all\n");
  CHECK_THROWS_AS(s.reload(restart), SettingsError);
  CHECK(s.str("log_level") == "info");
}
