// An example job for the jobs API (docs/user-guide.md, "Jobs"): a C++ driver shipped to
// the cluster as a working directory with a data file beside it.
//
//   raio job submit --working-dir DIR --runtime-env-json '{"env_vars": {"GREETING": "hi"}}'
//       -- ./job_example [hold]
//
// It reads input.txt from its working directory, then runs a task on a node that offers
// the custom resource "worker_node" when one does (else anywhere): the task reads the same
// file (the job's working directory reaches every node that runs its workers) and the
// GREETING variable (runtime_env env_vars reach them too) and says where it ran.
// With `hold` it also starts an actor there, prints the actor's pid and waits to be
// stopped (`raio job stop`), which ends the actor with the job.
#include <raio/raio.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>

std::string ReadInput() {
  std::ifstream in("input.txt");
  std::string line;
  std::getline(in, line);
  return in ? line : "(no input.txt here)";
}

std::string Describe() {
  const char* greeting = std::getenv("GREETING");
  return "node " + raio::GetNodeId() + " pid " + std::to_string(::getpid()) + " read '" +
         ReadInput() + "' greeting '" + (greeting ? greeting : "(unset)") + "'";
}
RAIO_REMOTE(Describe);

class Holder {
 public:
  static Holder* Create() { return new Holder(); }
  int Pid() { return static_cast<int>(::getpid()); }
};
RAIO_REMOTE(Holder::Create, &Holder::Pid);

int main(int argc, char** argv) {
  raio::Init(argc, argv);
  const bool hold = argc > 1 && std::string(argv[1]) == "hold";
  std::map<std::string, double> remote = {{"CPU", 1}};
  if (const char* where = std::getenv("JOB_EXAMPLE_RESOURCE"); where && *where) {
    remote[where] = 1;
  }
  std::cout << "driver: " << Describe() << std::endl;
  std::string task = raio::Task(Describe).SetResources(remote).Remote().Get();
  std::cout << "task:   " << task << std::endl;
  if (hold) {
    auto holder = raio::Actor(Holder::Create).SetResources(remote).Remote();
    int pid = holder.Task(&Holder::Pid).Remote().Get();
    std::cout << "actor pid " << pid << std::endl;
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until stopped
  }
  raio::Shutdown();
  return 0;
}
