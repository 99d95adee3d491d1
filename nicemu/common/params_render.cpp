#include "nicemu/common/params_render.h"

#include <fmt/core.h>

#include "nicemu/common/params.h"

namespace nicemu::params {

namespace {

std::string users_text(uint8_t u) {
  std::string out;
  auto add = [&](uint8_t bit, const char* name) {
    if (!(u & bit)) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(kDaemon, "nicemu");
  add(kLibrary, "libugni");
  add(kLauncher, "nicemu-run");
  add(kCtl, "nicemuctl");
  return out;
}

std::string choices_text(std::string_view c, std::string_view sep) {
  std::string out;
  size_t start = 0;
  while (start <= c.size()) {
    size_t bar = c.find('|', start);
    if (bar == std::string_view::npos) bar = c.size();
    if (!out.empty()) out += sep;
    out += c.substr(start, bar - start);
    start = bar + 1;
  }
  return out;
}

// The allowed values, as prose ("" when any value of the type goes).
std::string range_text(const Param& p) {
  switch (p.type) {
    case Type::kUint:
      return fmt::format("{}..{}", p.min, p.max);
    case Type::kChoice:
      return choices_text(p.choices, ", ");
    case Type::kBool:
      return "true, false";
    default:
      return "";
  }
}

// Whether the default is a literal value (as opposed to a description of how it is derived).
bool literal_default(const Param& p) {
  switch (p.type) {
    case Type::kUint:
      return parse_uint_text(p.default_text).has_value();
    case Type::kBool:
    case Type::kChoice:
      return true;
    default:
      return false;
  }
}

std::string toml_value(const Param& p) {
  if (p.type == Type::kUint || p.type == Type::kBool) return std::string(p.default_text);
  return fmt::format("\"{}\"", p.default_text);
}

constexpr std::string_view kPrecedence =
    "A setting given on the daemon's command line wins over its environment variable, which wins over the "
    "config file (--config; the packaged unit reads /etc/nicemu/nicemu.toml), which wins over the default. "
    "Settings marked live are re-read from the config file when the daemon gets SIGHUP "
    "(systemctl reload nicemu@N); the others need a restart, and the daemon says so in its log when they "
    "changed. Unknown keys in the config file are an error.";

std::string md_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string scd_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '_' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::optional<Format> format_from_name(std::string_view name) {
  if (name == "text") return Format::kText;
  if (name == "toml") return Format::kToml;
  if (name == "markdown") return Format::kMarkdown;
  if (name == "scdoc") return Format::kScdoc;
  return std::nullopt;
}

std::string render_text() {
  std::string out = "nicemu settings (from the parameter table; also in nicemu(8) and docs/configuration.md)\n\n";
  for (const Param& p : kTable) {
    out += fmt::format("{}\n    {}\n", p.name, p.doc);
    std::string where = fmt::format("    default: {}", p.default_text.empty() ? "none" : p.default_text);
    if (auto r = range_text(p); !r.empty()) where += fmt::format("; values: {}", r);
    out += where + "\n    ";
    std::string how;
    if (!p.config_key.empty()) how += fmt::format("config key {}; ", p.config_key);
    if (!p.flag.empty()) how += fmt::format("flag {}; ", p.flag);
    if (!p.env.empty()) how += fmt::format("environment {}; ", p.env);
    how += "read by " + users_text(p.users);
    if (p.live) how += "; live (SIGHUP)";
    out += how + "\n\n";
  }
  out += std::string(kPrecedence) + "\n";
  return out;
}

std::string render_toml() {
  std::string out =
      "# nicemu.toml: settings of the nicemu daemons of this host; see nicemu(8).\n"
      "# Generated from nicemu's parameter table (nicemu --help-config=toml). Every setting is\n"
      "# shown commented out at its default: uncomment a line to change it.\n"
      "#\n"
      "# The command line wins over the environment, which wins over this file. Settings\n"
      "# marked \"live\" are re-read on SIGHUP (systemctl reload 'nicemu@*'); the others need a\n"
      "# restart. Unknown keys are an error.\n";
  for (const Param& p : kTable) {
    if (p.config_key.empty()) continue;
    out += fmt::format("\n# {}\n", p.doc);
    std::string notes;
    if (auto r = range_text(p); !r.empty()) notes += fmt::format("Values: {}. ", r);
    if (!literal_default(p)) notes += fmt::format("Default: {}. ", p.default_text);
    if (!p.flag.empty()) notes += fmt::format("Flag {}. ", p.flag);
    if (!p.env.empty()) notes += fmt::format("Environment {}. ", p.env);
    if (p.live) notes += "Live. ";
    if (!notes.empty()) {
      notes.pop_back();
      out += "# " + notes + "\n";
    }
    out += fmt::format("#{} = {}\n", p.config_key, literal_default(p) ? toml_value(p) : "\"\"");
  }
  return out;
}

std::string render_markdown() {
  std::string out =
      "# Configuration\n\n"
      "<!-- Generated from the parameter table nicemu/common/params.h by `tools/gen-docs`\n"
      "     (nicemu --help-config=markdown). Do not edit: the configuration-doc test fails\n"
      "     when this file differs from the table. -->\n\n"
      "Every setting of the daemon (`nicemu`), the libraries and the launcher, from one table.\n"
      "The same table renders `nicemu --help-config`, the default `/etc/nicemu/nicemu.toml` and\n"
      "the SETTINGS section of nicemu(8).\n\n";
  out += std::string(kPrecedence) + "\n\n";
  out += "| Setting | Default | Values | Config key | Flag | Environment | Read by | Live | Description |\n";
  out += "|---|---|---|---|---|---|---|---|---|\n";
  auto code = [](std::string_view s) { return s.empty() ? std::string("—") : fmt::format("`{}`", s); };
  for (const Param& p : kTable) {
    std::string def = p.default_text.empty() ? "—" : (literal_default(p) ? code(p.default_text) : md_escape(p.default_text));
    std::string r = range_text(p);
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n", p.name, def, r.empty() ? "—" : md_escape(r),
                       code(p.config_key), code(p.flag), code(p.env), users_text(p.users), p.live ? "yes" : "no",
                       md_escape(p.doc));
  }
  return out;
}

std::string render_scdoc() {
  std::string out = "# SETTINGS\n\n" + scd_escape(kPrecedence) + "\n\n";
  for (const Param& p : kTable) {
    out += fmt::format("*{}*\n", scd_escape(p.name));
    out += fmt::format("\t{}\n\n", scd_escape(p.doc));
    std::string facts = fmt::format("Default: {}.", p.default_text.empty() ? "none" : scd_escape(p.default_text));
    if (auto r = range_text(p); !r.empty()) facts += fmt::format(" Values: {}.", scd_escape(r));
    if (!p.config_key.empty()) facts += fmt::format(" Config key *{}*.", scd_escape(p.config_key));
    if (!p.flag.empty()) facts += fmt::format(" Flag *{}*.", scd_escape(p.flag));
    if (!p.env.empty()) facts += fmt::format(" Environment *{}*.", scd_escape(p.env));
    facts += fmt::format(" Read by {}.", users_text(p.users));
    if (p.live) facts += " Live: re-read on SIGHUP.";
    out += "\t" + facts + "\n\n";
  }
  return out;
}

std::string render(Format f) {
  switch (f) {
    case Format::kText:
      return render_text();
    case Format::kToml:
      return render_toml();
    case Format::kMarkdown:
      return render_markdown();
    case Format::kScdoc:
      return render_scdoc();
  }
  return {};
}

}  // namespace nicemu::params
