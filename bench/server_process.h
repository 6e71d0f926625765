#pragma once
// The server side of `gradpress-bench transport`: the hidden `transport-server` subcommand
// (RunServer) and the parent's handle on that child process (ServerProcess).
//
//   ServerProcess server({self_exe, "transport-server", "--port-file", file, "--workers", "2",
//                         "--threads", "2", "--codec", "none", "--parent-pid", parent_pid});
//   int port = server.WaitForPort(file);   // the child's ServerRunner on 127.0.0.1:port
//   ...;  double mb = server.StatusMb("VmHWM");  server.Terminate();
//
// RunServer (in the child): dies with its parent (PR_SET_PDEATHSIG, and throws if the parent
// named by parent_pid is already gone), runs a ServerRunner on 127.0.0.1:0 with the given
// workers, threads and pull codec (min_numel 0, kRpcDeadlineS as deadline and worker
// timeout), writes the bound port to port_file atomically (tmp file + rename), then serves
// until SIGTERM or SIGINT and stops with 2 s of grace.
// ServerProcess (in the parent): posix_spawns argv with the child's stdout sent to stderr,
// so the bench's stdout stays its own (--json); killed with SIGKILL and reaped on
// destruction, so the child never outlives it. Failures (spawn, child exit during start-up,
// no port within 30 s, no /proc field) throw std::runtime_error.
// Thread-safety: ServerProcess from one thread at a time (the bench's worker threads call
// Kill / EndedHow under a mutex); RunServer once per process, from main.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gradpress::bench {

// Per-RPC deadline of the bench's clients; also the server's deadline and worker timeout.
constexpr double kRpcDeadlineS = 120;

// The `transport-server` subcommand's options (all required on its command line).
struct ServerArgs {
  std::string port_file, spec = "none";
  int workers = 2, threads = 2;
  int64_t parent_pid = 0;
};

// The server loop of the hidden `transport-server` subcommand; returns after SIGTERM/SIGINT.
void RunServer(const ServerArgs& a);

// The server child process; killed and reaped on destruction, so it never outlives us.
class ServerProcess {
 public:
  // Starts args[0] (a path, not searched in PATH) with argv `args`.
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // SIGKILL, without waiting; a no-op once the child has been reaped.
  void Kill() const;
  // "exit 3", "signal 9" once the child has ended; "" while it runs.
  std::string EndedHow();
  // Waits for the port file (written atomically by the child); throws if the child exits.
  int WaitForPort(const std::string& file);
  // A "VmHWM:"-style field of /proc/<pid>/status, in MiB.
  double StatusMb(const std::string& field) const;
  // SIGTERM, then SIGKILL after 10 s; notes an unclean exit on stderr.
  void Terminate();

 private:
  // Waits up to timeout_s for the child to end; true once it has been reaped.
  bool Reap(double timeout_s);
  pid_t pid_ = -1;
  std::string how_;
};

}  // namespace gradpress::bench
