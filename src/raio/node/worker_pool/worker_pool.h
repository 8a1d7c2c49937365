// WorkerPool: the worker processes of one node. Starts a job's executable in worker
// mode for one device set (its CUDA_VISIBLE_DEVICES, fixed at spawn), tracks each
// process from start to registration to exit, keeps idle workers for reuse by later
// leases of the same job and device set, and ends a job's workers when the job ends.
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "raio/common.pb.h"
#include "raio/common/ids.h"
#include "raio/node/worker_pool/device_set.h"
#include "raio/node/worker_pool/worker_stderr.h"
#include "raio/rpc/connection.h"

namespace raio::node {

struct JobConfig {
  std::string executable;
  std::string working_dir;
  std::string ld_library_path;
  std::string ns;  // actor namespace of the job
  // Set for the job's workers over the node's own environment (RAIO_ names are ignored).
  std::map<std::string, std::string> env_vars;
};

// What an idle worker is reused for: a worker started for one job and device set serves
// only leases and actors of that job holding exactly that set (a GPU node's CPU-only
// work is the empty set), since its CUDA_VISIBLE_DEVICES cannot change after spawn.
struct WorkerKey {
  JobId job = 0;
  DeviceSet gpus;
  auto operator<=>(const WorkerKey&) const = default;
};

struct WorkerProcess {
  enum class State { kStarting, kIdle, kLeased };
  WorkerId id;
  pid_t pid = -1;
  JobId job = 0;
  DeviceSet gpus;  // the GPU ids it was started for (see WorkerKey)
  State state = State::kStarting;
  std::chrono::steady_clock::time_point started;
  std::shared_ptr<rpc::Connection> conn;  // set at registration
  proto::Address address;                 // where it takes PUSH_TASK (set at registration)
  LeaseId lease;                          // when leased
  bool hosts_actor = false;               // leased to an actor for its lifetime
  // Whether it was ever leased for tasks: such a worker may own objects (its tasks' Puts
  // and results), so it never becomes an actor's process, whose Kill would lose them.
  bool ran_tasks = false;
  std::shared_ptr<WorkerStderr> err;  // its stderr, forwarded by the node
  WorkerKey key() const { return {job, gpus}; }
};

class WorkerPool {
 public:
  struct Options {
    std::string session_dir;
    std::string node_socket_path;
    // Whether the node offers GPUs: then every worker gets CUDA_VISIBLE_DEVICES, ""
    // when it holds none; otherwise workers keep the node's own value.
    bool node_has_gpus = false;
    // The node's own CUDA_VISIBLE_DEVICES split at commas (ParseDeviceMask): GPU id i is
    // device node_mask[i]. Empty: id i is device i.
    std::vector<std::string> node_mask;
    // The node's IP (RAIO_NODE_IP): workers listen on TCP there for other hosts.
    std::string node_ip = "127.0.0.1";
  };
  // `io` is the node's loop, where the workers' stderr pipes are read.
  WorkerPool(boost::asio::io_context& io, Options options);
  ~WorkerPool();

  void AddJob(JobId job, JobConfig config);
  bool HasJob(JobId job) const { return jobs_.count(job) > 0; }
  // Starts one worker process for `key.job` that sees exactly the GPUs `key.gpus`
  // (CUDA_VISIBLE_DEVICES, mapped through Options::node_mask). Its environment is the
  // node's without RAIO_* variables, plus the wiring variables and this process's config
  // values (config::EnvironmentForWorkers). Error if the job is unknown or spawn fails.
  absl::Status StartWorker(const WorkerKey& key);
  // Marks a started worker registered. Error if no such starting worker.
  absl::StatusOr<WorkerProcess*> OnRegistered(const WorkerId& id, pid_t pid,
                                              std::shared_ptr<rpc::Connection> conn,
                                              proto::Address address);
  // An idle registered worker started for `key` (same job, same device set), marked
  // leased, or nullptr. `for_actor`: only one that never ran tasks (see
  // WorkerProcess::ran_tasks); otherwise it is marked as running tasks.
  WorkerProcess* PopIdle(const WorkerKey& key, bool for_actor = false);

  void MakeIdle(WorkerProcess* worker);
  // Workers started for `key` that have not registered yet.
  int NumStarting(const WorkerKey& key) const;
  // All workers that have not registered yet, of any job.
  int NumStarting() const;
  WorkerProcess* Find(const WorkerId& id);
  // Kills (SIGKILL) and forgets a worker. Its exit is reaped later.
  void Kill(const WorkerId& id);
  // Kills every worker of a job except `keep` (detached actors' workers), and forgets the
  // job unless some are kept.
  void RemoveJob(JobId job, const std::set<WorkerId>& keep = {}, bool keep_job = false);
  void KillAll();
  // Whether `pid`, a worker this pool killed, has been reaped (its memory is free).
  bool IsReaped(pid_t pid) const;
  // Reaps exited processes; returns workers that exited or overstayed their start.
  std::vector<WorkerId> Reap();
  // How a reaped worker process ended (a waitpid status), killed by the pool or not.
  struct Exit {
    WorkerId worker;
    pid_t pid = 0;
    int status = 0;
    // The task it was running when it died ("" between tasks; nullopt unknown).
    std::optional<std::string> running_task;
  };
  // The exits reaped since the last call.
  std::vector<Exit> TakeExits() { return std::exchange(exits_, {}); }
  // Jobs whose worker processes died before registering `threshold` times in a row since
  // one last registered, each with a message giving the last one's exit status and the
  // last lines of its stderr. Their counts start again from zero.
  std::vector<std::pair<JobId, std::string>> TakeStartFailures(int threshold);
  // Whether `worker` was killed (or found gone) and its process is not reaped yet.
  bool IsUnreaped(const WorkerId& worker) const;
  // The task a worker runs now, from its running-task file (common/running_task.h).
  std::optional<std::string> RunningTask(const WorkerId& id) const;
  const std::map<WorkerId, WorkerProcess>& workers() const { return workers_; }

 private:
  // A starting worker of `w`'s job died (`how`): counts towards TakeStartFailures.
  // `not_loaded`: it exited with 127 (the loader's or exec's failure), so the hint is
  // about the host, not about raio::Init.
  void NoteStartFailure(const WorkerProcess& w, const std::string& how, bool not_loaded = false);

  boost::asio::io_context& io_;
  std::string session_dir_;
  std::string node_socket_path_;
  std::string node_ip_;
  bool node_has_gpus_;
  std::vector<std::string> node_mask_;
  struct StartFailures {
    int count = 0;
    std::string last;
  };
  std::map<JobId, StartFailures> start_failures_;
  std::map<JobId, JobConfig> jobs_;
  std::map<WorkerId, WorkerProcess> workers_;
  struct Zombie {
    pid_t pid;
    WorkerId worker;
    std::optional<std::string> running_task;  // read before its file was removed
  };
  std::vector<Zombie> zombies_;  // killed, not yet reaped
  std::vector<Exit> exits_;
};

}  // namespace raio::node
