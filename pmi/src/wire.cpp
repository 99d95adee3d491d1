// PMI-1 wire protocol helpers; see wire.h.
#include "wire.h"

#include <charconv>

namespace nicemu::pmi::wire {

namespace {

constexpr char kHex[] = "0123456789ABCDEF";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Message& Message::add(std::string_view key, std::string_view value) {
  fields_.push_back(Field{std::string(key), std::string(value)});
  return *this;
}

Message& Message::add(std::string_view key, long long value) {
  return add(key, std::to_string(value));
}

std::string_view Message::cmd() const {
  if (fields_.empty()) return {};
  const Field& f = fields_.front();
  return (f.key == "cmd" || f.key == "mcmd") ? std::string_view(f.value) : std::string_view();
}

std::optional<std::string_view> Message::get(std::string_view key) const {
  for (const Field& f : fields_)
    if (f.key == key) return std::string_view(f.value);
  return std::nullopt;
}

std::optional<long long> Message::get_int(std::string_view key) const {
  auto v = get(key);
  if (!v || v->empty()) return std::nullopt;
  long long out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size()) return std::nullopt;
  return out;
}

std::string Message::serialize() const {
  std::string s;
  for (const Field& f : fields_) {
    if (!s.empty()) s += ' ';
    s += f.key;
    s += '=';
    s += f.value;
  }
  s += '\n';
  return s;
}

std::optional<Message> parse(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  Message m;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    size_t end = line.find(' ', i);
    if (end == std::string_view::npos) end = line.size();
    std::string_view tok = line.substr(i, end - i);
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    m.add(tok.substr(0, eq), tok.substr(eq + 1));
    i = end;
  }
  if (m.fields().empty()) return std::nullopt;
  return m;
}

LineReader::Status LineReader::next(std::string& line) {
  size_t nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) {
    if (buf_.size() - pos_ > max_line_) return Status::kTooLong;
    // Compact once the consumed prefix dominates, so the buffer does not grow forever.
    if (pos_ > 0 && pos_ >= buf_.size() / 2) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return Status::kNeedMore;
  }
  if (nl - pos_ > max_line_) return Status::kTooLong;
  line.assign(buf_, pos_, nl - pos_);
  pos_ = nl + 1;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return Status::kLine;
}

bool needs_escape(unsigned char c) { return c <= 0x20 || c == 0x7F || c == '%'; }

std::string escape_value(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    auto c = static_cast<unsigned char>(ch);
    if (needs_escape(c)) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += ch;
    }
  }
  return out;
}

std::string unescape_value(std::string_view wire) {
  std::string out;
  out.reserve(wire.size());
  for (size_t i = 0; i < wire.size(); ++i) {
    if (wire[i] == '%' && i + 2 < wire.size() && hex_digit(wire[i + 1]) >= 0 &&
        hex_digit(wire[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(wire[i + 1]) << 4 | hex_digit(wire[i + 2]));
      i += 2;
    } else {
      out += wire[i];
    }
  }
  return out;
}

bool valid_key(std::string_view key) {
  if (key.empty()) return false;
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '=' || c <= 0x20 || c == 0x7F) return false;
  }
  return true;
}

std::string hex_encode(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out(len * 2, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 0xF];
  }
  return out;
}

bool hex_decode(std::string_view hex, void* out, size_t out_len) {
  if (hex.size() != out_len * 2) return false;
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < out_len; ++i) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

}  // namespace nicemu::pmi::wire
