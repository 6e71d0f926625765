#include "common/byte_io.h"

#include <catch2/catch.hpp>

namespace gradpress {

TEST_CASE("ByteWriter and ByteReader round-trip fixed and varint fields", "[byte_io]") {
  std::string buf;
  ByteWriter w(&buf);
  w.Put<uint8_t>(7);
  w.Put<float>(1.5f);
  const uint64_t values[] = {0, 1, 127, 128, 300, 1ull << 35, ~0ull};
  for (uint64_t v : values) w.PutVarint(v);
  ByteReader r(buf, "test");
  CHECK(r.Get<uint8_t>("a") == 7);
  CHECK(r.Get<float>("b") == 1.5f);
  for (uint64_t v : values) CHECK(r.GetVarint("v") == v);
  CHECK_NOTHROW(r.ExpectEnd());
  CHECK(buf.size() == 1 + 4 + (1 + 1 + 1 + 2 + 2 + 6 + 10));
}

TEST_CASE("ByteReader rejects truncation, trailing bytes and overlong varints", "[byte_io]") {
  std::string buf = "\x01\x02";
  ByteReader r(buf, "ctx");
  CHECK_THROWS_WITH(r.Get<uint32_t>("k"), Catch::Contains("ctx: truncated at k"));
  CHECK(r.Get<uint8_t>("a") == 1);
  CHECK_THROWS_AS(r.ExpectEnd(), InvalidArgument);
  std::string big(11, '\xff');
  ByteReader v(big, "ctx");
  CHECK_THROWS_AS(v.GetVarint("x"), InvalidArgument);
  std::string unterminated = "\x80\x80";
  ByteReader u(unterminated, "ctx");
  CHECK_THROWS_AS(u.GetVarint("x"), InvalidArgument);
}

}  // namespace gradpress
