// gradpress._C: the pybind11 extension under python/gradpress (docs/python.md). Tensors cross
// without a copy (torch/extension.h's casters share the TensorImpl); the GIL is released
// whenever C++ works or waits (Register, InitOrPull, the buckets, PushPull), so backward's
// Python hooks and other threads go on meanwhile. gradpress::Error becomes ValueError
// (InvalidArgument: a bad config, codec, argument) or RuntimeError (the rest), with its message.
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "python/src/worker_session.h"
#include "worker/client/step_metrics.h"

namespace py = pybind11;

namespace gradpress::python {
namespace {

// Every reported field of a step (worker/client/step_metrics.h's names) and its bookkeeping.
py::dict MetricsDict(const StepMetrics& m) {
  py::dict d;
  d["step"] = m.step;
  for (const auto& f : worker::ReportedFields()) {
    const double v = f.get(m);
    if (f.integer)
      d[f.name] = static_cast<int64_t>(v);
    else
      d[f.name] = v;
  }
  d["overlap"] = m.overlap;
  d["server_step"] = m.server_step;
  d["contributors"] = m.contributors;
  return d;
}

WorkerSession* MakeSession(std::optional<std::string> config_path,
                           std::vector<std::string> overrides, std::optional<int> rank,
                           std::optional<int> world_size, std::optional<std::string> server,
                           std::string run_dir, uint64_t incarnation,
                           std::vector<std::string> names, std::vector<torch::Tensor> params) {
  SessionOptions o;
  o.config_path = config_path.value_or("");
  o.overrides = std::move(overrides);
  o.rank = rank;
  o.world_size = world_size;
  o.server = std::move(server);
  o.run_dir = std::move(run_dir);
  o.incarnation = incarnation;
  return new WorkerSession(std::move(o), std::move(names), std::move(params));
}

}  // namespace
}  // namespace gradpress::python

PYBIND11_MODULE(_C, m) {
  using gradpress::python::WorkerSession;
  m.doc() = "gradpress's C++ worker for gradpress.torch (docs/python.md)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gradpress::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.message().c_str());
    } catch (const gradpress::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.message().c_str());
    }
  });
  m.def("codec_override", &gradpress::python::CodecOverride, py::arg("block"), py::arg("shorthand"),
        "'push=<YAML flow mapping>' from a codec shorthand such as "
        "'topk ratio=0.01 then=qsgd levels=16 error_feedback=true'");
  m.def(
      "worker_data",
      [](std::optional<std::string> path, std::vector<std::string> overrides, int rank, int world,
         int64_t epoch) {
        gradpress::python::WorkerDataSplits d;
        {
          py::gil_scoped_release release;
          const gradpress::Config c = path ? gradpress::LoadConfig(*path, overrides)
                                           : gradpress::ParseConfig("{}", "<defaults>", overrides);
          d = gradpress::python::WorkerData(c, rank, world, epoch);
        }
        return py::make_tuple(py::make_tuple(d.train_images, d.train_labels),
                              py::make_tuple(d.test_images, d.test_labels));
      },
      py::arg("path"), py::arg("overrides"), py::arg("rank"), py::arg("world_size"),
      py::arg("epoch"),
      "(train images, labels) of the rank's epoch in gradpress-worker's order, (test images, "
      "labels)");
  m.def(
      "resolve_config",
      [](std::optional<std::string> path, std::vector<std::string> overrides) {
        return gradpress::ToYaml(path ? gradpress::LoadConfig(*path, overrides)
                                      : gradpress::ParseConfig("{}", "<defaults>", overrides));
      },
      py::arg("path"), py::arg("overrides"), "the resolved job config as YAML");

  py::class_<WorkerSession>(m, "WorkerSession")
      .def(py::init(&gradpress::python::MakeSession), py::arg("config_path"), py::arg("overrides"),
           py::arg("rank"), py::arg("world_size"), py::arg("server"), py::arg("run_dir"),
           py::arg("incarnation"), py::arg("names"), py::arg("params"),
           py::call_guard<py::gil_scoped_release>())
      .def("connect", &WorkerSession::Connect, py::arg("restored_step") = std::nullopt,
           py::arg("epoch") = 0, py::arg("root_rank") = std::nullopt,
           py::call_guard<py::gil_scoped_release>(),
           "Register (once) and adopt the server's initial weights (root_rank's: only it "
           "offers); True if ours were kept")
      .def("begin", &WorkerSession::Begin, py::arg("lr"), py::arg("key_lr"),
           py::call_guard<py::gil_scoped_release>(),
           "the step's lr, and per key its param group's (empty: lr for all); once a step")
      .def("gradient", &WorkerSession::Gradient, py::arg("key"), py::arg("grad"),
           py::call_guard<py::gil_scoped_release>())
      .def("prepare_gradients", &WorkerSession::PrepareGradients,
           py::call_guard<py::gil_scoped_release>(),
           "method 6: zeros for missing gradients and clipping, before the local step")
      .def(
          "exchange",
          [](WorkerSession& s, double lr, std::vector<double> key_lr) {
            gradpress::worker::StepMetrics r;
            {
              py::gil_scoped_release release;
              r = s.Exchange(lr, std::move(key_lr));
            }
            return gradpress::python::MetricsDict(r);
          },
          py::arg("lr"), py::arg("key_lr") = std::vector<double>{},
          "wait for the step's averaged gradients and write them into p.grad")
      .def(
          "broadcast",
          [](WorkerSession& s, const std::string& name, bool root, const py::bytes& data) {
            std::string value = data;
            {
              py::gil_scoped_release release;
              value = s.Broadcast(name, root, std::move(value));
            }
            return py::bytes(value);
          },
          py::arg("name"), py::arg("root"), py::arg("data"),
          "the root's bytes under `name` to every worker (the n-th call of a name: round n)")
      .def("server_stats", &WorkerSession::ServerStats, py::call_guard<py::gil_scoped_release>(),
           "the server's counters (Prometheus text; shard 0's with several)")
      .def("end_step", &WorkerSession::EndStep, py::arg("loss"))
      .def("end_epoch", &WorkerSession::EndEpoch, py::arg("epoch"), py::arg("accuracy"),
           py::arg("train_loss") = std::nullopt, py::call_guard<py::gil_scoped_release>(),
           "the epoch rule of method 6 and the dynamic ladder's decision; returns the accuracy "
           "of the weights kept")
      .def_property("auto_codecs", &WorkerSession::AutoCodecs, &WorkerSession::SetAutoCodecs,
                    "compress.auto's push codec per key (shorthands)")
      .def("close", &WorkerSession::Close, py::arg("flush_rows") = true,
           py::call_guard<py::gil_scoped_release>())
      .def("save_state", [](const WorkerSession& s) { return py::bytes(s.SaveState()); })
      .def("load_state", [](WorkerSession& s, const py::bytes& b) { s.LoadState(std::string(b)); })
      .def("last", [](const WorkerSession& s) { return gradpress::python::MetricsDict(s.last()); })
      .def_property_readonly("connected", &WorkerSession::connected)
      .def_property_readonly("pipelined", &WorkerSession::pipelined)
      .def_property_readonly("weights", &WorkerSession::weights)
      .def_property_readonly("local_steps", &WorkerSession::local_steps)
      .def_property_readonly("step", &WorkerSession::step)
      .def_property_readonly("rank", &WorkerSession::rank)
      .def_property_readonly("world_size", &WorkerSession::world_size)
      .def_property_readonly("server", &WorkerSession::server)
      .def_property_readonly("split", &WorkerSession::split)
      .def_property_readonly("config_yaml",
                             [](const WorkerSession& s) { return gradpress::ToYaml(s.config()); });
}
