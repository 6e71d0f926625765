#include "bench/server_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace gradpress::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kStartTimeoutS = 30;  // for the server's port file

}  // namespace

// ---- the parent side: the child process ----

ServerProcess::ServerProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);  // stdout: ours
  const int rc = posix_spawn(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  }
}

ServerProcess::~ServerProcess() {
  Kill();
  Reap(/*timeout_s=*/10);
}

void ServerProcess::Kill() const {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

std::string ServerProcess::EndedHow() { return Reap(0) ? how_ : ""; }

int ServerProcess::WaitForPort(const std::string& file) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(kStartTimeoutS);
  while (Clock::now() < deadline) {
    int port = 0;
    if (std::ifstream(file) >> port && port > 0) return port;
    if (Reap(0)) throw std::runtime_error("gradpress-server exited during start-up: " + how_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("gradpress-server did not report a port within 30 s");
}

double ServerProcess::StatusMb(const std::string& field) const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
  }
  throw std::runtime_error("no " + field + " in /proc/" + std::to_string(pid_) + "/status");
}

void ServerProcess::Terminate() {
  if (pid_ > 0) ::kill(pid_, SIGTERM);
  if (!Reap(10)) {
    Kill();
    Reap(10);
  }
  if (how_ != "exit 0") std::cerr << "  note: gradpress-server ended with " << how_ << "\n";
}

bool ServerProcess::Reap(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (pid_ > 0) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      how_ = WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
             : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                   : "unknown status";
      pid_ = -1;
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string ServerBinary() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("GRADPRESS_SERVER"); env != nullptr && *env != '\0') {
    if (!fs::exists(env))
      throw std::runtime_error(std::string("GRADPRESS_SERVER=") + env + " does not exist");
    return env;
  }
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p :
       {self.parent_path() / "server" / "gradpress-server", self / "gradpress-server"}) {
    if (fs::exists(p)) return p.string();
  }
  throw std::runtime_error("no gradpress-server in " + (self.parent_path() / "server").string() +
                           " or " + self.string() + ": build it, or set GRADPRESS_SERVER");
}

}  // namespace gradpress::bench
