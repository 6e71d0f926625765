#include "sim/simulator.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/json_line.h"
#include "server/server_options.h"
#include "sim/in_process_ps_client.h"
#include "worker/models/net.h"

namespace gradpress::sim {

Simulator::Simulator(SimOptions options) : opt_(std::move(options)) {
  Config& c = opt_.config;
  GP_ENFORCE(opt_.workers >= 1, "the simulator needs at least one worker, got ", opt_.workers);
  c.cluster.workers = opt_.workers;
  data_ = worker::data::LoadDataset(c.dataset.name, c.dataset.path, c.dataset.subset,
                                    c.dataset.test_subset, static_cast<uint64_t>(c.train.seed));
  // The server: the same store and options as a gradpress-server job (no checkpoints).
  server::StoreOptions so = server::StoreOptionsFromConfig(c);
  so.workers = opt_.workers;
  so.checkpoint_dir.clear();
  store_ = std::make_unique<server::ParameterStore>(so);
  server::ParameterStore* store = store_.get();
  for (int r = 0; r < opt_.workers; ++r) {
    worker::TrainerOptions o;
    o.config = c;
    o.rank = r;
    o.workers = opt_.workers;
    o.run_dir = opt_.run_dir;
    o.max_steps = opt_.max_steps;
    o.data = &data_;
    o.make_client = [store](const worker::ClientOptions& co, worker::KeyCodecs* codecs) {
      return std::make_unique<InProcessPsClient>(co, codecs, store);
    };
    o.summary_extra = [](JsonLine& line) { line.Str("runner", "sim"); };
    trainers_.push_back(std::make_unique<worker::Trainer>(o));
  }
}

Simulator::~Simulator() = default;

worker::TrainSummary Simulator::Run() {
  if (!opt_.run_dir.empty()) std::filesystem::create_directories(opt_.run_dir);
  std::vector<worker::TrainSummary> summaries(trainers_.size());
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < trainers_.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        summaries[r] = trainers_[r]->Run();
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        store_->Shutdown();  // the others would wait for this worker's pushes
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return summaries[0];
}

std::vector<torch::Tensor> Simulator::Parameters(int rank) const {
  return trainers_.at(rank)->Parameters();
}

std::vector<torch::Tensor> Simulator::Buffers(int rank) {
  return worker::models::BufferTensors(trainers_.at(rank)->model());
}

}  // namespace gradpress::sim
