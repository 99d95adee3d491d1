// Unit tests of the PMI-1 wire helpers shared by libpmi and nicemu-run: line parsing and
// framing, the value escape, hex encoding, and the PMI_process_mapping vector format.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "pmi/src/process_mapping.h"
#include "pmi/src/wire.h"

using namespace nicemu::pmi::wire;

TEST_CASE("parse: simple PMI lines (pmi-api.md §8)") {
  auto m = parse("cmd=put kvsname=kvs_1_0 key=k value=v");
  REQUIRE(m);
  CHECK(m->cmd() == "put");
  CHECK(m->get("kvsname") == "kvs_1_0");
  CHECK(m->get("key") == "k");
  CHECK(m->get("value") == "v");
  CHECK_FALSE(m->get("missing"));

  // Runs of spaces, a trailing '\r', values holding '=' and empty values.
  m = parse("cmd=get_result  rc=0 value=a=b=c msg=\r");
  REQUIRE(m);
  CHECK(m->get("value") == "a=b=c");
  CHECK(m->get("msg") == "");
  CHECK(m->get_int("rc") == 0);

  m = parse("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024");
  REQUIRE(m);
  CHECK(m->get_int("vallen_max") == 1024);
  CHECK(m->get_int("keylen_max") == 64);

  m = parse("mcmd=spawn");
  REQUIRE(m);
  CHECK(m->cmd() == "spawn");
}

TEST_CASE("parse: malformed lines") {
  CHECK_FALSE(parse(""));
  CHECK_FALSE(parse("   "));
  CHECK_FALSE(parse("cmd=init oops"));
  CHECK_FALSE(parse("=value"));
  auto m = parse("key=1 cmd=init");  // parses, but has no command
  REQUIRE(m);
  CHECK(m->cmd() == "");
  m = parse("cmd=x n=12abc");
  REQUIRE(m);
  CHECK_FALSE(m->get_int("n"));
}

TEST_CASE("Message: serialize round-trips through parse") {
  Message out("response_to_init");
  out.add("pmi_version", 1).add("pmi_subversion", 1).add("rc", 0);
  std::string line = out.serialize();
  CHECK(line == "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
  line.pop_back();
  auto in = parse(line);
  REQUIRE(in);
  REQUIRE(in->fields().size() == 4);
  CHECK(in->fields()[1].key == "pmi_version");
  CHECK(in->get_int("rc") == 0);
}

TEST_CASE("LineReader: framing across arbitrary chunk boundaries") {
  const std::string stream = "cmd=barrier_in\ncmd=get kvsname=a key=b\n\ncmd=finalize\n";
  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    LineReader r;
    std::vector<std::string> lines;
    std::string line;
    for (size_t off = 0; off < stream.size(); off += chunk) {
      r.append(stream.data() + off, std::min(chunk, stream.size() - off));
      while (r.next(line) == LineReader::Status::kLine) lines.push_back(line);
    }
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "cmd=barrier_in");
    CHECK(lines[1] == "cmd=get kvsname=a key=b");
    CHECK(lines[2] == "");
    CHECK(lines[3] == "cmd=finalize");
    CHECK(r.buffered() == 0);
  }
}

TEST_CASE("LineReader: partial and over-long lines") {
  LineReader r(8);
  std::string line;
  r.append("cmd=", 4);
  CHECK(r.next(line) == LineReader::Status::kNeedMore);
  r.append("x\n", 2);
  CHECK(r.next(line) == LineReader::Status::kLine);
  CHECK(line == "cmd=x");
  r.append("0123456789", 10);
  CHECK(r.next(line) == LineReader::Status::kTooLong);
}

TEST_CASE("escape_value: wire-unsafe bytes are escaped, the rest left alone") {
  CHECK(escape_value("plain-(vector,(0,2,2))/;=") == "plain-(vector,(0,2,2))/;=");
  CHECK(escape_value("a b") == "a%20b");
  CHECK(escape_value("line\nnext") == "line%0Anext");
  CHECK(escape_value("100%") == "100%25");
  CHECK(escape_value("\t\r\x7f") == "%09%0D%7F");
  for (char c : escape_value(" \n\t%x")) CHECK_FALSE((c == ' ' || c == '\n' || c == '\t'));
}

TEST_CASE("escape_value / unescape_value round-trip every byte") {
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  std::string wire = escape_value(all);
  CHECK(wire.find(' ') == std::string::npos);
  CHECK(wire.find('\n') == std::string::npos);
  CHECK(unescape_value(wire) == all);
  for (const char* v : {"", "%", "%%", "%2", "%zz", "50%25off", "a=b", "~!@#$^&*()"})
    CHECK(unescape_value(escape_value(v)) == v);
}

TEST_CASE("unescape_value: foreign values without escapes read back unchanged") {
  CHECK(unescape_value("(vector,(0,4,8))") == "(vector,(0,4,8))");
  CHECK(unescape_value("100%") == "100%");
  CHECK(unescape_value("%g1") == "%g1");
  CHECK(unescape_value("%41") == "A");
}

TEST_CASE("valid_key") {
  CHECK(valid_key("PMI_process_mapping"));
  CHECK(valid_key("gasnet/1%2"));
  CHECK_FALSE(valid_key(""));
  CHECK_FALSE(valid_key("a b"));
  CHECK_FALSE(valid_key("a=b"));
  CHECK_FALSE(valid_key("a\n"));
}

TEST_CASE("hex_encode / hex_decode") {
  const unsigned char bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 'A'};
  std::string hex = hex_encode(bytes, sizeof bytes);
  CHECK(hex == "00017F80FF41");
  unsigned char back[sizeof bytes] = {};
  REQUIRE(hex_decode(hex, back, sizeof back));
  CHECK(std::equal(std::begin(bytes), std::end(bytes), back));
  CHECK(hex_decode("00017f80ff41", back, sizeof back));  // lower case accepted
  CHECK_FALSE(hex_decode(hex, back, sizeof back - 1));   // wrong length
  CHECK_FALSE(hex_decode("0G", back, 1));
  CHECK(hex_encode(nullptr, 0).empty());
}

TEST_CASE("parse_process_mapping: MPICH vector format (pmi-api.md §4.2)") {
  auto b = parse_process_mapping("(vector,(0,4,8))");
  REQUIRE(b);
  REQUIRE(b->size() == 1);
  CHECK((*b)[0] == MappingBlock{0, 4, 8});

  b = parse_process_mapping(" ( vector , (0,1,3) ,(1, 1, 2) ) ");
  REQUIRE(b);
  REQUIRE(b->size() == 2);
  CHECK((*b)[1] == MappingBlock{1, 1, 2});

  b = parse_process_mapping("(vector)");
  REQUIRE(b);
  CHECK(b->empty());

  for (const char* bad : {"", "vector,(0,1,1)", "(vector,(0,1))", "(vector,(0,1,1)",
                          "(vector,(0,1,1)) x", "(vectorx,(0,1,1))", "(vector,(0,-1,1))",
                          "(vector,(a,1,1))", "(vector;(0,1,1))"})
    CHECK_MESSAGE(!parse_process_mapping(bad), bad);
}

TEST_CASE("map_ranks_to_nodes: blocks, gaps and cyclic reuse") {
  auto nodes = map_ranks_to_nodes({{0, 2, 2}}, 4);
  REQUIRE(nodes);
  CHECK(*nodes == std::vector<int>{0, 0, 1, 1});

  nodes = map_ranks_to_nodes({{0, 1, 3}, {1, 1, 2}}, 5);
  REQUIRE(nodes);
  CHECK(*nodes == std::vector<int>{0, 0, 0, 1, 1});

  nodes = map_ranks_to_nodes({{0, 1, 1}, {2, 1, 1}}, 2);  // node 1 holds no rank
  REQUIRE(nodes);
  CHECK(*nodes == std::vector<int>{0, 2});

  // Fewer ranks described than the job has: the list applies again (cyclic layouts).
  nodes = map_ranks_to_nodes({{0, 2, 1}}, 5);
  REQUIRE(nodes);
  CHECK(*nodes == std::vector<int>{0, 1, 0, 1, 0});

  // More described than needed: truncated.
  nodes = map_ranks_to_nodes({{0, 4, 8}}, 3);
  REQUIRE(nodes);
  CHECK(*nodes == std::vector<int>{0, 0, 0});

  CHECK_FALSE(map_ranks_to_nodes({}, 2));
  CHECK_FALSE(map_ranks_to_nodes({{0, 1000000, 0}}, 2));
  CHECK(map_ranks_to_nodes({}, 0)->empty());
}

TEST_CASE("format_process_mapping: shortest text, round-trips") {
  CHECK(format_process_mapping({0, 0, 1, 1}) == "(vector,(0,2,2))");
  CHECK(format_process_mapping({0, 0, 0, 1, 1}) == "(vector,(0,1,3),(1,1,2))");
  CHECK(format_process_mapping({0}) == "(vector,(0,1,1))");
  CHECK(format_process_mapping({0, 2}) == "(vector,(0,1,1),(2,1,1))");
  CHECK(format_process_mapping({}) == "(vector)");

  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 0, 0, 1, 1}, {0, 1, 0, 1}, {3, 3, 1, 2, 2, 2, 0}, {5}};
  for (const auto& layout : layouts) {
    auto blocks = parse_process_mapping(format_process_mapping(layout));
    REQUIRE(blocks);
    auto back = map_ranks_to_nodes(*blocks, static_cast<int>(layout.size()));
    REQUIRE(back);
    CHECK(*back == layout);
  }
}
