// Who a process is in the cluster: a worker's rank, world size and server (flags, the
// environment, the config), cluster.servers (a list in YAML, on the command line and in
// $GRADPRESS_SERVERS) and a server's shard (--shard/--shards, the environment, or the length
// of cluster.servers).
#include <catch2/catch.hpp>

#include "common/config.h"
#include "common/error.h"
#include "tests/common/scoped_env.h"

namespace gradpress {
namespace {

using testing::ScopedEnv;

}  // namespace

TEST_CASE("identity: flags, then environment, then config", "[config]") {
  Config c;
  c.cluster.workers = 4;
  c.cluster.server = "ps:1234";
  {
    ScopedEnv e1("RANK", nullptr), e2("SLURM_PROCID", nullptr), e3("WORLD_SIZE", nullptr),
        e4("SLURM_NTASKS", nullptr), e5("GRADPRESS_SERVER", nullptr), e6("MASTER_PORT", "999");
    Identity id = ResolveIdentity(std::nullopt, std::nullopt, std::nullopt, c);
    CHECK(id.rank == 0);
    CHECK(id.workers == 4);
    CHECK(id.server == "ps:1234");

    ScopedEnv s1("SLURM_PROCID", "2"), s2("SLURM_NTASKS", "3");
    id = ResolveIdentity(std::nullopt, std::nullopt, std::nullopt, c);
    CHECK(id.rank == 2);
    CHECK(id.workers == 3);

    ScopedEnv r1("RANK", "1"), r2("WORLD_SIZE", "5"), r3("GRADPRESS_SERVER", "10.0.0.1:50051");
    id = ResolveIdentity(std::nullopt, std::nullopt, std::nullopt, c);
    CHECK(id.rank == 1);
    CHECK(id.workers == 5);
    CHECK(id.server == "10.0.0.1:50051");

    id = ResolveIdentity(0, 8, std::string("host:1"), c);
    CHECK(id.rank == 0);
    CHECK(id.workers == 8);
    CHECK(id.server == "host:1");

    ScopedEnv empty("RANK", "");  // empty counts as unset
    CHECK(ResolveIdentity(std::nullopt, std::nullopt, std::nullopt, c).rank == 2);
  }
  {
    ScopedEnv bad("RANK", "abc"), ws("WORLD_SIZE", nullptr), nt("SLURM_NTASKS", nullptr);
    CHECK_THROWS_WITH(ResolveIdentity(std::nullopt, std::nullopt, std::nullopt, c),
                      Catch::Contains("$RANK: expected an integer >= 0, got 'abc'"));
    CHECK(ResolveIdentity(3, std::nullopt, std::nullopt, c).rank == 3);  // flag wins
    CHECK_THROWS_WITH(
        ResolveIdentity(4, std::nullopt, std::nullopt, c),
        Catch::Contains("rank 4 (from --rank) must be below the number of workers 4"));
    ScopedEnv bad_ws("WORLD_SIZE", "0");
    CHECK_THROWS_WITH(ResolveIdentity(0, std::nullopt, std::nullopt, c),
                      Catch::Contains("$WORLD_SIZE: expected an integer >= 1, got '0'"));
    ScopedEnv bad_server("GRADPRESS_SERVER", "nohost");
    CHECK_THROWS_WITH(ResolveIdentity(0, 1, std::nullopt, c),
                      Catch::Contains("$GRADPRESS_SERVER: expected host:port"));
  }
}

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
