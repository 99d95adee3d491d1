#include "nicemu/daemon/settings.h"

#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <toml++/toml.h>

namespace nicemu::daemon {

using params::Param;
using params::Type;

namespace {

bool in_choices(std::string_view choices, std::string_view v) {
  size_t start = 0;
  while (start <= choices.size()) {
    size_t bar = choices.find('|', start);
    if (bar == std::string_view::npos) bar = choices.size();
    if (choices.substr(start, bar - start) == v) return true;
    start = bar + 1;
  }
  return false;
}

bool daemon_row(const Param& p) { return (p.users & params::kDaemon) != 0; }

}  // namespace

std::string Settings::validate(const Param& p, const std::string& text, const std::string& where) {
  auto fail = [&](const std::string& why) {
    return SettingsError(fmt::format("{} ({}): {}", p.name, where, why));
  };
  switch (p.type) {
    case Type::kUint: {
      auto v = params::parse_uint_text(text);
      if (!v) throw fail(fmt::format("'{}' is not a non-negative whole number", text));
      if (*v < p.min || *v > p.max) throw fail(fmt::format("{} is outside {}..{}", *v, p.min, p.max));
      return std::to_string(*v);
    }
    case Type::kBool:
      if (text == "true" || text == "1") return "true";
      if (text == "false" || text == "0") return "false";
      throw fail(fmt::format("'{}' is not true or false", text));
    case Type::kChoice:
      if (!in_choices(p.choices, text))
        throw fail(fmt::format("'{}' is not one of {}", text, std::string(p.choices)));
      return text;
    case Type::kPath:
    case Type::kString:
      if (text.empty()) throw fail("empty value");
      return text;
  }
  return text;
}

void Settings::add_options(CLI::App& app) {
  for (const Param& p : params::kTable) {
    if (!daemon_row(p) || p.flag.empty()) continue;
    std::string name(p.name);
    CLI::Option* o;
    if (p.type == Type::kBool) {
      o = app.add_flag(std::string(p.flag), cli_flags_[name], std::string(p.doc));
    } else {
      std::string help(p.doc);
      if (!p.default_text.empty()) help += " (default: " + std::string(p.default_text) + ")";
      o = app.add_option(std::string(p.flag), cli_text_[name], help);
      switch (p.type) {
        case Type::kUint:
          o->type_name(fmt::format("{}..{}", p.min, p.max));
          break;
        case Type::kChoice:
          o->type_name(std::string(p.choices));
          break;
        case Type::kPath:
          o->type_name("PATH");
          break;
        default:
          o->type_name("TEXT");
          break;
      }
      if (p.name == "config") o->check(CLI::ExistingFile);
    }
    cli_opts_[name] = o;
  }
}

std::map<std::string, std::string> Settings::read_config(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw SettingsError(fmt::format("config file {}, line {} column {}: {}", path, b.line, b.column,
                                    std::string(e.description())));
  }
  std::map<std::string, std::string> out;
  for (const auto& [k, node] : t) {
    std::string key(k.str());
    std::string where = fmt::format("config file {}", path);
    const Param* p = params::find_config_key(key);
    if (!p || !daemon_row(*p)) throw SettingsError(fmt::format("{}: unknown setting '{}' (see nicemu --help-config)", where, key));
    std::string text;
    switch (p->type) {
      case Type::kUint:
        if (!node.is_integer()) throw SettingsError(fmt::format("{} ({}): expected a whole number", key, where));
        if (node.as_integer()->get() < 0)
          throw SettingsError(fmt::format("{} ({}): must not be negative", key, where));
        text = std::to_string(node.as_integer()->get());
        break;
      case Type::kBool:
        if (!node.is_boolean()) throw SettingsError(fmt::format("{} ({}): expected true or false", key, where));
        text = node.as_boolean()->get() ? "true" : "false";
        break;
      default:
        if (!node.is_string()) throw SettingsError(fmt::format("{} ({}): expected a string", key, where));
        text = node.as_string()->get();
        break;
    }
    out[key] = validate(*p, text, where);
  }
  return out;
}

void Settings::apply_config(const std::map<std::string, std::string>& file, const std::string& path) {
  for (const auto& [k, v] : file) {
    auto& val = values_[k];
    if (val.pinned) continue;
    val.text = v;
    val.source = "config file " + path;
  }
}

void Settings::resolve() {
  values_.clear();
  for (const Param& p : params::kTable) {
    if (!daemon_row(p)) continue;
    std::string name(p.name);
    Value v{std::string(p.default_text), "default", false};
    auto opt = cli_opts_.find(name);
    bool given = opt != cli_opts_.end() && static_cast<const CLI::Option*>(opt->second)->count() > 0;
    if (given) {
      v.text = p.type == Type::kBool ? (cli_flags_[name] ? "true" : "false") : validate(p, cli_text_[name], "command line");
      v.source = "command line";
      v.pinned = true;
    } else if (!p.env.empty()) {
      if (const char* e = std::getenv(p.env.data()); e && *e) {
        v.text = validate(p, e, fmt::format("environment {}", p.env));
        v.source = fmt::format("environment {}", p.env);
        v.pinned = true;
      }
    }
    values_[name] = std::move(v);
  }
  if (is_set("config")) {
    std::string path = str("config");
    apply_config(read_config(path), path);
  }
}

std::vector<std::string> Settings::reload(std::vector<std::string>& needs_restart) {
  std::vector<std::string> changed;
  if (!is_set("config")) return changed;
  std::string path = str("config");
  auto file = read_config(path);  // throws before anything changes
  for (const Param& p : params::kTable) {
    if (!daemon_row(p) || p.config_key.empty()) continue;
    auto& cur = values_.at(std::string(p.name));
    if (cur.pinned) continue;
    auto it = file.find(std::string(p.config_key));
    std::string next = it != file.end() ? it->second : std::string(p.default_text);
    if (next == cur.text) continue;
    if (!p.live) {
      needs_restart.emplace_back(p.name);
      continue;
    }
    cur.text = next;
    cur.source = it != file.end() ? "config file " + path : "default";
    changed.emplace_back(p.name);
  }
  return changed;
}

const Settings::Value& Settings::at(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw SettingsError(fmt::format("internal: setting '{}' is not a daemon setting", name));
  return it->second;
}

bool Settings::is_set(std::string_view name) const { return at(name).source != "default"; }
std::string Settings::source(std::string_view name) const { return at(name).source; }

uint64_t Settings::uint(std::string_view name) const {
  auto v = params::parse_uint_text(at(name).text);
  if (!v) throw SettingsError(fmt::format("internal: setting '{}' has no numeric value", name));
  return *v;
}

bool Settings::flag(std::string_view name) const { return at(name).text == "true"; }

std::string Settings::str(std::string_view name) const {
  const Value& v = at(name);
  const Param* p = params::find(name);
  // Paths whose default is a description ("RUNDIR/nic-NODE.sock") are derived by the caller.
  if (p && p->type == Type::kPath && v.source == "default") return "";
  return v.text;
}

}  // namespace nicemu::daemon
