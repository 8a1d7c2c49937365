// `raio job submit|status|logs|stop|list|delete`: the jobs API's command line, a client of
// the REST routes that `raio start --head` serves (docs/design/jobs.md, Ray's `ray job`).
// The server is found from --address (http://HOST:PORT), else RAIO_API_SERVER_ADDRESS,
// else the cluster `raio start` recorded on this machine.
// Thread-safety: used from main's thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace raio::cli {

class JobCommands {
 public:
  // `recorded_address` returns the dashboard address of the cluster recorded on this
  // machine ("" when none).
  explicit JobCommands(std::function<std::string()> recorded_address);
  // Adds `job` and its subcommands to `app`.
  void Register(CLI::App& app);
  // Whether the command line named `raio job ...`.
  bool Parsed() const;
  // Runs the parsed subcommand. Returns the process's exit code: 0 on success (for submit
  // without --no-wait, the job SUCCEEDED), 1 on an error the server or the job reported
  // (printed on stderr), 2 on a usage error. Blocks while it follows a job.
  int Run();

 private:
  int Submit();
  int Status();
  int Logs();
  int Stop();
  int List();
  int Delete();

  std::function<std::string()> recorded_address_;
  CLI::App* job_ = nullptr;
  CLI::App* submit_ = nullptr;
  CLI::App* status_ = nullptr;
  CLI::App* logs_ = nullptr;
  CLI::App* stop_ = nullptr;
  CLI::App* list_ = nullptr;
  CLI::App* delete_ = nullptr;

  std::string address_;
  std::string id_;
  bool json_ = false;
  bool follow_ = false;
  bool no_wait_ = false;
  std::string submission_id_;
  std::string working_dir_;
  std::string runtime_env_json_;
  std::string metadata_json_;
  std::string resources_json_;
  double num_cpus_ = -1, num_gpus_ = -1, memory_ = -1;
  std::vector<std::string> entrypoint_;
};

}  // namespace raio::cli
