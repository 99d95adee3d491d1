// The PMI-1 wire protocol ("simple PMI", shared/spec/pmi-api.md §8): line framing, parsing
// and formatting of `cmd=... key=value ...` lines, the reversible value escape libpmi uses
// for bytes the wire cannot carry, and hex encoding for binary collectives. Shared by
// libpmi (client) and nicemu-run (server); no I/O here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nicemu::pmi::wire {

// Longest line either side accepts (Hydra's own limits are far below this).
inline constexpr size_t kMaxLine = 64 * 1024;

// Limits the nicemu-run server announces in `cmd=maxes` (Hydra's values; PMI2_MAX_VALLEN).
inline constexpr int kKvsnameMax = 256;
inline constexpr int kKeylenMax = 64;
inline constexpr int kVallenMax = 1024;

struct Field {
  std::string key;
  std::string value;
};

// One protocol line: an ordered list of key=value fields, the first being cmd= (or mcmd=
// for the multi-line spawn command).
class Message {
 public:
  Message() = default;
  explicit Message(std::string_view cmd) { add("cmd", cmd); }

  Message& add(std::string_view key, std::string_view value);
  Message& add(std::string_view key, long long value);

  // Value of the first field (cmd or mcmd); empty if none.
  std::string_view cmd() const;
  std::optional<std::string_view> get(std::string_view key) const;
  std::optional<long long> get_int(std::string_view key) const;
  const std::vector<Field>& fields() const { return fields_; }

  // "k=v k=v\n". Values are written as they are: callers escape them first.
  std::string serialize() const;

 private:
  std::vector<Field> fields_;
};

// Parses one line (without its '\n'; a trailing '\r' is ignored). Fields are separated by
// runs of spaces; each is split at its first '=' (so values may contain '='). Returns
// nullopt for an empty line, a field without '=' or with an empty key.
std::optional<Message> parse(std::string_view line);

// Splits a byte stream into lines.
class LineReader {
 public:
  explicit LineReader(size_t max_line = kMaxLine) : max_line_(max_line) {}
  void append(const char* data, size_t n) { buf_.append(data, n); }

  enum class Status { kLine, kNeedMore, kTooLong };
  // Extracts the next complete line (without '\n') into `line`. kTooLong when more than
  // max_line bytes arrived without a newline; the stream is then unusable.
  Status next(std::string& line);
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  size_t max_line_;
};

// Value escape. The wire cannot carry spaces, newlines or other control bytes in a value,
// so libpmi sends each such byte, and '%' itself, as "%XX" (two upper-case hex digits).
// Every other byte goes as it is, so the values a PMI server preloads (and values from
// other PMI clients) read back unchanged. unescape_value() turns "%XX" back into the byte
// and leaves a '%' not followed by two hex digits alone.
bool needs_escape(unsigned char c);
std::string escape_value(std::string_view raw);
std::string unescape_value(std::string_view wire);

// Key check: keys travel unescaped, so they must be non-empty and contain neither '=' nor
// a byte needs_escape() reports.
bool valid_key(std::string_view key);

std::string hex_encode(const void* data, size_t len);
// Decodes exactly out_len bytes; false if `hex` is not 2*out_len hex digits.
bool hex_decode(std::string_view hex, void* out, size_t out_len);

}  // namespace nicemu::pmi::wire
