#include "plan/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/json_line.h"

namespace gradpress::plan {
namespace {

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The codec time a method spends per step on one worker (encode + decode).
double CodecMs(const Calibration& c) {
  double ms = 0;
  for (const auto& b : c.buckets) ms += b.encode_ms + b.decode_ms;
  return ms;
}

// Method i's predicted ms to the target (its run's steps x its step); none when no target was
// asked or its run never reached it.
std::optional<double> TimeToTargetMs(const AccuracyTarget& acc, size_t i, const StepPrediction& p) {
  if (acc.steps.empty() || !acc.steps[i]) return std::nullopt;
  return static_cast<double>(*acc.steps[i]) * p.step_ms;
}

}  // namespace

std::string Suggest(const std::vector<Calibration>& methods, const Cluster& k,
                    const AccuracyTarget& acc) {
  const bool to_target = !acc.steps.empty();
  std::vector<StepPrediction> p;
  std::vector<double> time;  // ms to the target, or per step; < 0: never reached
  for (size_t i = 0; i < methods.size(); ++i) {
    p.push_back(PredictStep(methods[i], k));
    time.push_back(to_target ? TimeToTargetMs(acc, i, p[i]).value_or(-1) : p[i].step_ms);
  }
  size_t best = methods.size();
  for (size_t i = 0; i < p.size(); ++i)
    if (time[i] >= 0 && (best == methods.size() || time[i] < time[best])) best = i;
  std::ostringstream s;
  s << "at " << Fmt("%g", k.rate_gbps) << " Gbit/s with " << k.workers << " workers and "
    << k.shards << " shard(s), ";
  if (best == methods.size())
    return s.str() + "no method's run reached " + Fmt("%.3g", acc.target_acc);
  s << "'" << methods[best].method << "' "
    << (to_target ? "reaches " + Fmt("%.3g", acc.target_acc) + " first: " +
                        Fmt("%.1f s", time[best] / 1e3) + " (" + std::to_string(*acc.steps[best]) +
                        " steps of " + Fmt("%.1f ms", p[best].step_ms) + ")"
                  : "is fastest: " + Fmt("%.1f", p[best].step_ms) + " ms per step");
  for (size_t i = 0; i < p.size(); ++i) {
    if (i == best) continue;
    s << "; against '" << methods[i].method << "' (";
    if (time[i] < 0) {
      s << "its run never reached " << Fmt("%.3g", acc.target_acc) << ")";
      continue;
    }
    if (to_target) s << Fmt("%.1f s", time[i] / 1e3) << ", " << *acc.steps[i] << " steps of ";
    s << Fmt("%.1f", p[i].step_ms) << " ms): ";
    const double transfer_saved = p[i].exposed_comm_ms - p[best].exposed_comm_ms;
    const double codec_more = CodecMs(methods[best]) - CodecMs(methods[i]);
    const std::string exposes = "it exposes " + Fmt("%.1f", std::abs(transfer_saved)) + " ms " +
                                (transfer_saved >= 0 ? "less" : "more") + " communication";
    if (codec_more > 0)
      s << "its encode and decode cost " << Fmt("%.1f", codec_more) << " ms more and " << exposes
        << " per step";
    else
      s << exposes << " and codes " << Fmt("%.1f", -codec_more) << " ms faster per step";
  }
  return s.str();
}

std::string Report(const std::vector<Calibration>& methods, const Cluster& cluster,
                   const std::vector<double>& rates, bool json, const AccuracyTarget& acc) {
  GP_ENFORCE(acc.steps.empty() || acc.steps.size() == methods.size(),
             "--accuracy: ", acc.steps.size(), " run(s) for ", methods.size(),
             " method(s): give one per method");
  const bool to_target = !acc.steps.empty();
  std::ostringstream out;
  for (double r : rates) {
    Cluster k = cluster;
    k.rate_gbps = r;
    if (!json) {
      out << "rate " << Fmt("%g", r) << " Gbit/s, " << k.workers << " workers, " << k.shards
          << " shard(s), " << (k.star ? "star" : "a link per worker") << ", latency "
          << Fmt("%g", k.latency_ms) << " ms, " << (k.overlap ? "pipelined" : "serial")
          << " step\n";
      out << "  method                                                step_ms  compute  "
             "exposed  comm%    bytes_up  bytes_down"
          << (to_target ? "  to " + Fmt("%.3g", acc.target_acc) + " acc" : std::string()) << "\n";
    }
    for (size_t i = 0; i < methods.size(); ++i) {
      const Calibration& m = methods[i];
      const StepPrediction p = PredictStep(m, k);
      const std::optional<double> to_ms = TimeToTargetMs(acc, i, p);
      const double share = p.step_ms > 0 ? p.exposed_comm_ms / p.step_ms : 0;
      if (json) {
        JsonLine j;
        j.Str("method", m.method)
            .Int("workers", k.workers)
            .Int("shards", k.shards)
            .Num("rate_gbps", r)
            .Num("latency_ms", k.latency_ms)
            .Bool("overlap", k.overlap)
            .Str("topology", k.star ? "star" : "links")
            .Num("step_ms", p.step_ms)
            .Num("compute_ms", p.compute_ms)
            .Num("exposed_comm_ms", p.exposed_comm_ms)
            .Num("comm_share", share)
            .Int("bytes_up", p.bytes_up)
            .Int("bytes_down", p.bytes_down);
        if (to_ms) j.Int("steps_to_target", *acc.steps[i]).Num("time_to_target_s", *to_ms / 1e3);
        out << j.Done() << "\n";
        continue;
      }
      char line[256];
      std::snprintf(line, sizeof line, "  %-52.52s %8.2f %8.2f %8.2f %5.1f %11lld %11lld",
                    m.method.c_str(), p.step_ms, p.compute_ms, p.exposed_comm_ms, 100 * share,
                    static_cast<long long>(p.bytes_up), static_cast<long long>(p.bytes_down));
      out << line;
      if (to_target)
        out << "  "
            << (to_ms
                    ? Fmt("%.1f s", *to_ms / 1e3) + " (" + std::to_string(*acc.steps[i]) + " steps)"
                    : std::string("not reached"));
      out << "\n";
    }
  }
  if (json) return out.str();
  if (rates.size() > 1) {
    const double lo = *std::min_element(rates.begin(), rates.end());
    const double hi = *std::max_element(rates.begin(), rates.end());
    for (size_t i = 1; i < methods.size(); ++i) {
      // With an accuracy target, the rate where the times to it are equal.
      const bool both = to_target && acc.steps[0] && acc.steps[i];
      if (to_target && !both) continue;  // a run that never reached it has no crossover
      const double x = both ? CrossoverRate(methods[0], methods[i], cluster, lo, hi, *acc.steps[0],
                                            *acc.steps[i])
                            : CrossoverRate(methods[0], methods[i], cluster, lo, hi);
      out << "crossover" << (both ? " in time to " + Fmt("%.3g", acc.target_acc) : "") << " '"
          << methods[i].method << "' vs '" << methods[0].method << "': "
          << (x > 0 ? Fmt("%.3g Gbit/s", x)
                    : std::string("none between ") + Fmt("%g", lo) + " and " + Fmt("%g", hi) +
                          " Gbit/s")
          << "\n";
    }
  }
  out << "suggestion: " << Suggest(methods, cluster, acc) << "\n";
  return out.str();
}

void Plot(const std::vector<Calibration>& methods, const Cluster& cluster,
          const std::vector<double>& rates, const std::string& png) {
  GP_ENFORCE(rates.size() >= 2, "--plot needs at least two --rates");
  const std::string base = png + ".data";
  std::ofstream gp(base + ".gp");
  const double lo = *std::min_element(rates.begin(), rates.end());
  const double hi = *std::max_element(rates.begin(), rates.end());
  gp << "set terminal png size 900,600 noenhanced\nset output \"" << png << "\"\n"
     << "set logscale xy\nset xlabel \"link rate, Gbit/s\"\nset ylabel \"predicted step, ms\"\n"
     << "set title \"gradpress-plan: " << cluster.workers << " workers, " << cluster.shards
     << " shard(s), dashed: where a method's step crosses '" << methods[0].method
     << "'\"\nset key top right\n";
  for (size_t i = 1; i < methods.size(); ++i) {  // the crossovers, marked
    const double x = CrossoverRate(methods[0], methods[i], cluster, lo, hi);
    if (x > 0)
      gp << "set arrow from " << x << ", graph 0 to " << x << ", graph 1 nohead dt 2 lc " << i + 1
         << "\n";
  }
  gp << "plot ";
  for (size_t i = 0; i < methods.size(); ++i) {
    const std::string dat = base + "." + std::to_string(i);
    std::ofstream d(dat);
    for (int j = 0; j <= 60; ++j) {  // a smooth line between the sweep's ends
      Cluster k = cluster;
      k.rate_gbps = lo * std::pow(hi / lo, j / 60.0);
      d << k.rate_gbps << " " << PredictStep(methods[i], k).step_ms << "\n";
    }
    gp << (i ? ", " : "") << "\"" << dat << "\" using 1:2 with lines lw 2 lc " << i + 1
       << " title \"" << methods[i].method << "\"";
  }
  gp << "\n";
  gp.close();
  const std::string cmd = "gnuplot '" + base + ".gp'";
  GP_ENFORCE_AS(Internal, std::system(cmd.c_str()) == 0, "--plot: '", cmd,
                "' failed (is gnuplot installed?)");
}

}  // namespace gradpress::plan
