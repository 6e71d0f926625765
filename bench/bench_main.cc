// gradpress-bench: the project's benchmarks, one subcommand each.
//
//   gradpress-bench codecs --numel 25000000 --json
//   gradpress-bench transport --numel 25000000 --steps 20 --json
//   gradpress-bench train --config configs/lenet_fmnist_m1.yaml --steps 200
//   gradpress-bench placement --shards 2,4,8 --json
//   gradpress-bench lock --baseline-server /tmp/gradpress-server-before-lock
//
// Exit status: 0 on success, 2 on bad command-line input (CLI11 parse errors and
// gradpress::Error, which subcommands throw while validating), 1 on any other failure.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "bench/bench.h"
#include "common/error.h"
#include "common/huge_pages.h"

int main(int argc, char** argv) {
  // The transport bench runs the daemons' configuration (huge pages for 100 MB buffers, as
  // gradpress-server does). The codec bench keeps the default allocator: there huge pages
  // mostly speed up torch::topk's own allocations (0.18 -> 0.26 GB/s), not the codecs.
  if (argc > 1 && std::string(argv[1]).rfind("transport", 0) == 0) {
    gradpress::UseHugePagesForLargeBuffers(argv);
  }
  namespace bench = gradpress::bench;
  CLI::App app{
      "gradpress benchmarks: codec throughput and ratio (codecs), server transport (transport), "
      "step time through the server (train)"};
  app.name("gradpress-bench");
  app.require_subcommand(1);
  bench::AddCodecsCommand(app);
  bench::AddTransportCommand(app);
  bench::AddTrainCommand(app);
  bench::AddPlacementCommand(app);
  bench::AddScaleCommand(app);
  bench::AddLockCommand(app);

  try {
    app.parse(argc, argv);  // runs the chosen subcommand
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the parse error
    return rc == 0 ? 0 : bench::kUsageExitCode;
  } catch (const gradpress::Error& e) {
    std::cerr << "gradpress-bench: error: " << e.what() << "\n";
    return bench::kUsageExitCode;
  } catch (const std::exception& e) {
    std::cerr << "gradpress-bench: failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
