#include "raio/worker/task_executor.h"

#include <cxxabi.h>
#include <stdlib.h>

#include <chrono>
#include <future>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/errors.h"
#include "raio/rpc.pb.h"
#include "raio/worker/core_worker.h"
#include "raio/worker/function_registry.h"

namespace raio::worker {

TaskExecutor::TaskExecutor() : loop_("raio-exec", config::kLoopSpin) {}

TaskExecutor::~TaskExecutor() { Stop(); }

absl::Status TaskExecutor::Listen(const std::string& socket_path) {
  auto l = rpc::Listener::ListenUnix(
      loop_.io(), socket_path, [this](std::shared_ptr<rpc::Connection> conn) {
        conn->Start(
            [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                   std::string_view body) { OnRequest(c, h, body); },
            nullptr);
      });
  if (!l.ok()) return l.status();
  listener_ = std::move(*l);
  return absl::OkStatus();
}

void TaskExecutor::OnRequest(const std::shared_ptr<rpc::Connection>& conn,
                             const rpc::FrameHeader& h, std::string_view body) {
  if (h.method == proto::EXIT_WORKER) {
    Stop();
    return;
  }
  if (h.method != proto::PUSH_TASK || h.kind != rpc::FrameKind::kRequest) {
    RAIO_LOG_WARN("worker got unexpected method {} from {}", h.method, conn->peer_name());
    if (h.kind == rpc::FrameKind::kRequest) {
      conn->ReplyError(h, absl::UnimplementedError("workers serve PUSH_TASK only"));
    }
    return;
  }
  if (!request_.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    conn->ReplyError(h, absl::InvalidArgumentError("malformed PushTaskRequest"));
    return;
  }
  Execute(conn, h);
}

void TaskExecutor::Stop() { loop_.Stop(); }

void TaskExecutor::Run() { loop_.RunInThisThread(); }

void TaskExecutor::Execute(const std::shared_ptr<rpc::Connection>& conn,
                           const rpc::FrameHeader& h) {
  const proto::TaskSpec& spec = request_.spec();
  proto::PushTaskReply reply;
  auto fail = [&](proto::ErrorType type, std::string type_name, std::string message) {
    auto* e = reply.mutable_error();
    e->set_type(type);
    e->set_exception_type(std::move(type_name));
    e->set_message(std::move(message));
    e->set_function_name(spec.name().empty() ? spec.function_name() : spec.name());
    e->set_node_id(node_id_hex_);
  };
  // GPU visibility: exactly the ids granted with the lease.
  if (request_.node_has_gpus() || request_.gpu_ids_size() > 0) {
    std::string visible = absl::StrJoin(request_.gpu_ids(), ",");
    if (!cuda_set_ || visible != last_cuda_visible_devices_) {
      ::setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
      last_cuda_visible_devices_ = visible;
      cuda_set_ = true;
    }
  }
  const RegisteredFunction* fn = FindFunctionByName(spec.function_name());
  auto start = std::chrono::steady_clock::now();
  if (fn == nullptr) {
    fail(proto::FUNCTION_NOT_FOUND, "",
         absl::StrCat("remote function '", spec.function_name(),
                      "' is not registered in this worker's executable (",
                      SelfExecutablePath(), "); add RAIO_REMOTE(", spec.function_name(), ")"));
  } else {
    std::vector<std::string_view> args;
    args.reserve(spec.args_size());
    for (const auto& a : spec.args()) args.emplace_back(a.value());
    CoreWorker::SetExecutingTask(true);
    try {
      *reply.mutable_return_value() = fn->invoker(fn->key, args);
    } catch (const SerializationError& e) {
      fail(proto::SERIALIZATION, "raio::SerializationError",
           absl::StrCat("arguments or result of ", spec.function_name(), ": ", e.what()));
    } catch (const std::exception& e) {
      fail(proto::TASK_ERROR, Demangle(typeid(e).name()), e.what());
    } catch (...) {
      std::type_info* t = abi::__cxa_current_exception_type();
      fail(proto::TASK_ERROR, t ? Demangle(t->name()) : "unknown", "non-std::exception thrown");
    }
    CoreWorker::SetExecutingTask(false);
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  reply.set_exec_duration_us(static_cast<uint64_t>(us.count()));
  conn->Reply(h, reply);
}

}  // namespace raio::worker
