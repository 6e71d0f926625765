#pragma once
// gradpress-bench subcommands. Each subcommand lives in its own .cc and registers itself on
// the top-level CLI::App; bench_main.cc only parses and maps errors to exit codes.
//
//   CLI::App app{"gradpress benchmarks"};
//   AddCodecsCommand(app);            // gradpress-bench codecs [--numel N] [--json] ...
//   app.parse(argc, argv);            // runs the chosen subcommand's callback
//
// Contract for a subcommand: validate its input before measuring anything and throw
// gradpress::Error (usually InvalidArgument) for bad input, which main prints and turns into
// exit code kUsageExitCode. Results go to stdout (with --json: one JSON object per line and
// nothing else); progress and notes go to stderr.
// Thread-safety: call from main only.

// CLI11 is header-only and heavy; subcommands include <CLI/CLI.hpp> themselves.
namespace CLI {
class App;
}

namespace gradpress::bench {

// Exit status for bad command-line input (unknown codec, out-of-range number, ...).
constexpr int kUsageExitCode = 2;

// `codecs`: encode/decode throughput and ratio of every registered codec on one thread,
// with torch::topk and memcpy reference rows measured in the same run (codecs_bench.cc).
void AddCodecsCommand(CLI::App& app);

}  // namespace gradpress::bench
