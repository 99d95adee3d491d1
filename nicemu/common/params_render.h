// Renderings of the parameter table (params.h): the only places settings are documented.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace nicemu::params {

enum class Format { kText, kToml, kMarkdown, kScdoc };

// "text", "toml", "markdown", "scdoc"; nullopt for anything else.
std::optional<Format> format_from_name(std::string_view name);

// `nicemu --help-config`.
std::string render_text();
// The default config file (every setting commented out at its default).
std::string render_toml();
// docs/configuration.md.
std::string render_markdown();
// The SETTINGS section of nicemu(8), in scdoc syntax.
std::string render_scdoc();

std::string render(Format f);

}  // namespace nicemu::params
