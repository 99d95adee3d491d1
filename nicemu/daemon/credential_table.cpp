#include "nicemu/daemon/credential_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "nicemu/abi/ctl_protocol.h"

namespace nicemu::daemon::credential_file {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "nicemu credentials";

// `o[key]` as an unsigned 32-bit number; false if absent or anything else.
bool u32(const json& o, const char* key, uint32_t& out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) return false;
  out = static_cast<uint32_t>(it->get<uint64_t>());
  return true;
}
bool boolean(const json& o, const char* key, bool& out) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_boolean()) return false;
  out = it->get<bool>();
  return true;
}

std::string errno_text(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

}  // namespace

std::string encode(uint32_t nic_addr, const CredentialMap& creds, const DrcMap& drc, const DrcReleased& released) {
  json c = json::array(), d = json::array();
  for (const auto& [cred, o] : creds)
    c.push_back({{"ptag", cred.ptag},
                 {"cookie", cred.cookie},
                 {"uid", static_cast<uint32_t>(o.uid)},
                 {"gid", static_cast<uint32_t>(o.gid)},
                 {"has_gid", o.has_gid},
                 {"drc_id", o.drc_id}});
  for (const auto& [id, dc] : drc) {
    json g = json::array();
    for (const auto& [kind, value] : dc.grants) g.push_back({kind, value});
    d.push_back({{"id", id},
                 {"ptag", dc.cred.ptag},
                 {"cookie", dc.cred.cookie},
                 {"flex", dc.flex},
                 {"rev", dc.rev},
                 {"grants", g}});
  }
  json r = json::array();
  for (const auto& [id, rev] : released) r.push_back({id, rev});
  json doc = {{"format", kFormat}, {"version", kVersion}, {"nic_addr", nic_addr},
              {"credentials", c}, {"drc", d},          {"drc_released", r}};
  return doc.dump(1) + "\n";
}

std::string decode(const std::string& text, uint32_t nic_addr, CredentialMap& creds, DrcMap& drc,
                   DrcReleased& released) {
  creds.clear();
  drc.clear();
  released.clear();
  CredentialMap c;
  DrcMap d;
  DrcReleased rel;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return "not a JSON object";
  if (auto f = doc.find("format"); f == doc.end() || !f->is_string() || f->get<std::string>() != kFormat)
    return "not a credential file (\"format\")";
  uint32_t version = 0, nic = 0;
  if (!u32(doc, "version", version) || (version != kVersion && version != 1))
    return "version " + (doc.contains("version") ? doc["version"].dump() : std::string("missing")) +
           ", this daemon reads version " + std::to_string(kVersion);
  if (!u32(doc, "nic_addr", nic) || nic != nic_addr)
    return "written for another NIC address (" + (doc.contains("nic_addr") ? doc["nic_addr"].dump() : "none") + ")";
  auto cl = doc.find("credentials");
  auto dl = doc.find("drc");
  if (cl == doc.end() || !cl->is_array() || dl == doc.end() || !dl->is_array())
    return "\"credentials\" and \"drc\" must be arrays";
  for (const json& e : *cl) {
    Credential cr;
    uint32_t uid = 0, gid = 0;
    CredOwner o;
    if (!e.is_object() || !u32(e, "ptag", cr.ptag) || !u32(e, "cookie", cr.cookie) || !u32(e, "uid", uid) ||
        !u32(e, "gid", gid) || !boolean(e, "has_gid", o.has_gid) || !u32(e, "drc_id", o.drc_id))
      return "a credential entry lacks a field or has one of the wrong type: " + e.dump();
    if (cr.ptag == 0 || cr.ptag > 255) return "ptag " + std::to_string(cr.ptag) + " out of range";
    o.uid = static_cast<uid_t>(uid);
    o.gid = static_cast<gid_t>(gid);
    if (!c.emplace(cr, o).second) return "ptag " + std::to_string(cr.ptag) + " cookie listed twice";
  }
  for (const json& e : *dl) {
    uint32_t id = 0;
    DrcCredential dc;
    auto gl = e.is_object() ? e.find("grants") : e.end();
    if (!e.is_object() || !u32(e, "id", id) || !u32(e, "ptag", dc.cred.ptag) || !u32(e, "cookie", dc.cred.cookie) ||
        !boolean(e, "flex", dc.flex) || gl == e.end() || !gl->is_array())
      return "a DRC entry lacks a field or has one of the wrong type: " + e.dump();
    if (version >= 2) {
      auto rv = e.find("rev");
      if (rv == e.end() || !rv->is_number_unsigned() || rv->get<uint64_t>() == 0)
        return "DRC credential " + std::to_string(id) + ": no revision";
      dc.rev = rv->get<uint64_t>();
    }
    for (const json& g : *gl) {
      if (!g.is_array() || g.size() != 2 || !g[0].is_number_unsigned() || !g[1].is_number_unsigned() ||
          g[1].get<uint64_t>() > UINT32_MAX)
        return "DRC credential " + std::to_string(id) + ": a grant is not [kind, value]";
      const uint64_t kind = g[0].get<uint64_t>();
      if (kind < static_cast<uint32_t>(abi::ctl::DrcGrant::kUid) || kind > static_cast<uint32_t>(abi::ctl::DrcGrant::kWlm))
        return "DRC credential " + std::to_string(id) + ": grant kind " + std::to_string(kind) + " unknown";
      dc.grants.emplace_back(static_cast<uint32_t>(kind), static_cast<uint32_t>(g[1].get<uint64_t>()));
    }
    // Each DRC credential and its job credential name each other (credential_table.h).
    auto owner = c.find(dc.cred);
    if (id == 0 || owner == c.end() || owner->second.drc_id != id)
      return "DRC credential " + std::to_string(id) + " does not match a job credential that names it";
    if (!d.emplace(id, std::move(dc)).second) return "DRC credential " + std::to_string(id) + " listed twice";
  }
  for (const auto& [cr, o] : c)
    if (o.drc_id != 0 && !d.contains(o.drc_id))
      return "ptag " + std::to_string(cr.ptag) + " names DRC credential " + std::to_string(o.drc_id) +
             ", which is not listed";
  if (version >= 2) {
    auto rl = doc.find("drc_released");
    if (rl == doc.end() || !rl->is_array()) return "\"drc_released\" must be an array";
    for (const json& e : *rl) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() || !e[1].is_number_unsigned() ||
          e[0].get<uint64_t>() == 0 || e[0].get<uint64_t>() > UINT32_MAX)
        return "a released DRC entry is not [id, rev]: " + e.dump();
      const auto id = static_cast<uint32_t>(e[0].get<uint64_t>());
      if (d.contains(id)) return "DRC credential " + std::to_string(id) + " is both held and released";
      rel[id] = e[1].get<uint64_t>();
    }
  }
  creds = std::move(c);
  drc = std::move(d);
  released = std::move(rel);
  return "";
}

ReadResult read(const std::string& path, std::string& text, std::string& why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return ReadResult::kAbsent;
    why = errno_text("cannot open", path);
    return ReadResult::kRejected;
  }
  struct stat st {};
  ReadResult res = ReadResult::kRejected;
  // It grants access to the NIC: only a file this daemon's user wrote, and no one else
  // could have, counts.
  if (::fstat(fd, &st) != 0) {
    why = errno_text("cannot stat", path);
  } else if (!S_ISREG(st.st_mode)) {
    why = path + " is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = path + " is owned by uid " + std::to_string(st.st_uid) + ", not the daemon's " + std::to_string(::geteuid());
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = path + " is open to other users (mode " + mode + ")";
  } else if (static_cast<uint64_t>(st.st_size) > kMaxBytes) {
    why = path + " is larger than " + std::to_string(kMaxBytes) + " bytes";
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == text.size()) {
      res = ReadResult::kOk;
    } else {
      why = errno_text("short read of", path);
    }
  }
  ::close(fd);
  return res;
}

bool write(const std::string& path, const std::string& text, std::string& why) {
  const std::string tmp = path + ".tmp";
  // A leftover (a daemon killed while writing) or anything planted there goes first: the
  // new file is created, never opened.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = errno_text("cannot create", tmp);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  // No fsync: the file is to survive the daemon's restart, not the host's (the run
  // directory is a tmpfs, and a rebooted host has no jobs to admit).
  const bool ok = done == text.size() && ::close(fd) == 0;
  if (!ok) {
    if (done != text.size()) ::close(fd);
    why = errno_text("cannot write", tmp);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    why = errno_text("cannot rename onto", path);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace nicemu::daemon::credential_file
