#pragma once
// The server side of `gradpress-bench transport`: the real `gradpress-server` binary run as a
// child process (ServerProcess), and where to find it (ServerBinary).
//
//   ServerProcess server({ServerBinary(), "--config", yaml, "--listen", "127.0.0.1:0",
//                         "--port-file", file, "--log-level", "warn"});
//   int port = server.WaitForPort(file);   // written atomically by gradpress-server
//   ...;  double mb = server.StatusMb("VmHWM");  server.Terminate();
//
// ServerProcess posix_spawns argv with the child's stdout sent to stderr, so the bench's
// stdout stays its own (--json); killed with SIGKILL and reaped on destruction. Failures
// (spawn, child exit during start-up, no port within 30 s, no /proc field) throw
// std::runtime_error.
// Thread-safety: ServerProcess from one thread at a time (the bench's worker threads call
// Kill / EndedHow under a mutex).
#include <sys/types.h>

#include <string>
#include <vector>

namespace gradpress::bench {

// Per-RPC deadline of the bench's clients; also the server's deadline and worker timeout.
constexpr double kRpcDeadlineS = 120;

// The gradpress-server to run: $GRADPRESS_SERVER, else the build tree's server/gradpress-server
// next to this bench (bench/..), else gradpress-server beside this binary (an install).
// Throws std::runtime_error naming the places looked at if none exists.
std::string ServerBinary();

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
