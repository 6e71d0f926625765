#pragma once
// gradpress-bench subcommands. Each subcommand lives in its own .cc and registers itself on
// the top-level CLI::App; bench_main.cc only parses and maps errors to exit codes.
//
//   CLI::App app{"gradpress benchmarks"};
//   AddCodecsCommand(app);            // gradpress-bench codecs [--numel N] [--json] ...
//   AddTransportCommand(app);         // gradpress-bench transport [--numel N] [--json] ...
//   app.parse(argc, argv);            // runs the chosen subcommand's callback
//
// Contract for a subcommand: validate its input before measuring anything and throw
// gradpress::Error (usually InvalidArgument) for bad input, which main prints and turns into
// exit code kUsageExitCode. Results go to stdout (with --json: one JSON object per line and
// nothing else); progress and notes go to stderr.
// Thread-safety: call from main only.

#include <string>
#include <vector>

#include "common/median.h"
#include "compressors/compressor_config.h"

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

// `transport`: push / pull GB/s, step time and peak RSS of a gradpress server running in its
// own process (the hidden `transport-server` subcommand, also added here), with workers as
// threads, against plain TCP loopback measured in the same run (transport_bench.cc).
void AddTransportCommand(CLI::App& app);

// `train`: ms per training step through the server (the config's method, workers as
// threads) vs one process training the same total batch, in the same run (train_bench.cc).
void AddTrainCommand(CLI::App& app);

// `placement`: imbalance of each model's partitions over S server shards, largest-first bin
// packing vs a BytePS-style hash (placement_bench.cc).
void AddPlacementCommand(CLI::App& app);

// `scale-worker`: one synthetic worker of the scaling curve (scale_bench.cc, scripts/scale.sh).
void AddScaleCommand(CLI::App& app);

// `lock`: Heartbeat and Register latency of a gradpress-server (own process) while two
// workers run method-5 steps, beside a baseline server binary in the same run (lock_bench.cc).
void AddLockCommand(CLI::App& app);

// Helpers shared by the subcommands (defined in codecs_bench.cc).

using gradpress::Median;  // common/median.h
// A JSON number (%.6g); null for NaN or infinity.
std::string JsonNumber(double v);
// A quoted, escaped JSON string.
std::string JsonString(const std::string& s);

}  // namespace gradpress::bench
