// cluster.servers (a list in YAML, on the command line and in $GRADPRESS_SERVERS) and a
// server's shard (--shard/--shards, the environment, or the length of cluster.servers).
#include <catch2/catch.hpp>

#include "common/config.h"
#include "common/error.h"
#include "tests/common/scoped_env.h"

namespace gradpress {
namespace {

using testing::ScopedEnv;

}  // namespace

TEST_CASE("cluster.servers reads a YAML list, a --set list and $GRADPRESS_SERVERS", "[config]") {
  const Config list = ParseConfig("cluster: {servers: [10.0.0.1:50051, 'h2:50052']}\n");
  CHECK(list.cluster.servers == std::vector<std::string>{"10.0.0.1:50051", "h2:50052"});
  CHECK(list.cluster.partition_mb == 4.0);
  CHECK(ParseConfig("", "x", {"cluster.servers=a:1,b:2"}).cluster.servers ==
        std::vector<std::string>{"a:1", "b:2"});
  CHECK(ParseConfig("", "x", {"cluster.servers=[a:1, b:2]"}).cluster.servers ==
        std::vector<std::string>{"a:1", "b:2"});
  // The resolved config writes the list back in a form that reads back the same.
  CHECK(ParseConfig(ToYaml(list)).cluster.servers == list.cluster.servers);
  CHECK_THROWS_WITH(ParseConfig("cluster: {servers: [a:1, nohost]}\n", "j.yaml"),
                    Catch::Contains("j.yaml:1: cluster.servers"));
  CHECK_THROWS_WITH(ParseConfig("", "x", {"cluster.servers=a:1,,b:2"}),
                    Catch::Contains("an empty item"));
  {
    ScopedEnv env("GRADPRESS_SERVERS", "c:3,d:4");
    CHECK(ResolveServers(list) == std::vector<std::string>{"c:3", "d:4"});
  }
  {
    ScopedEnv env("GRADPRESS_SERVERS", nullptr);
    CHECK(ResolveServers(list) == list.cluster.servers);
  }
}

TEST_CASE("a server's shard comes from --shard/--shards, the environment or the servers",
          "[config]") {
  ScopedEnv a("GRADPRESS_SHARD", nullptr), b("GRADPRESS_SHARDS", nullptr);
  const Config two = ParseConfig("cluster: {servers: [a:1, b:2]}\n");
  int shard = -1, shards = -1;
  ResolveShard(std::nullopt, std::nullopt, Config{}, &shard, &shards);
  CHECK((shard == 0 && shards == 1));
  ResolveShard(1, std::nullopt, two, &shard, &shards);
  CHECK((shard == 1 && shards == 2));
  {
    ScopedEnv s("GRADPRESS_SHARD", "2"), n("GRADPRESS_SHARDS", "3");
    ResolveShard(std::nullopt, std::nullopt, two, &shard, &shards);
    CHECK((shard == 2 && shards == 3));
  }
  CHECK_THROWS_WITH(ResolveShard(2, std::nullopt, two, &shard, &shards),
                    Catch::Contains("shard 2 (from --shard) must be below the number of shards 2 "
                                    "(from cluster.servers)"));
  CHECK_THROWS_AS(ResolveShard(0, 0, two, &shard, &shards), InvalidArgument);
}

}  // namespace gradpress
