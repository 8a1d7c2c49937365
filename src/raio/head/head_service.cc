#include "raio/head/head_service.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "raio/actor.pb.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/resources.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"

namespace raio::head {

namespace {
// A node that does not answer in time is listed without stats rather than failing the
// whole status (the CLI waits config::kControlRpcTimeout).
constexpr std::chrono::milliseconds kNodeStatsTimeout{2000};
}  // namespace

absl::StatusOr<std::unique_ptr<HeadService>> HeadService::Create(Options options) {
  auto head = std::unique_ptr<HeadService>(new HeadService(std::move(options)));
  auto listener = rpc::Listener::ListenTcp(
      head->loop_.io(), head->options_.host, head->options_.port,
      [raw = head.get()](std::shared_ptr<rpc::Connection> c) { raw->OnAccept(std::move(c)); });
  if (!listener.ok()) return listener.status();
  head->listener_ = std::move(*listener);
  head->loop_.Start();
  return head;
}

HeadService::HeadService(Options options) : options_(std::move(options)) {}

HeadService::~HeadService() { Stop(); }

void HeadService::Stop() {
  if (stopped_.exchange(true)) return;
  std::promise<void> done;
  auto fut = done.get_future();
  loop_.Post([this, &done] {
    if (listener_) listener_->Stop();
    for (auto& [raw, conn] : conns_) conn->Close(absl::CancelledError("head stopping"));
    done.set_value();
  });
  if (loop_.started() && fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    RAIO_LOG_WARN("head loop did not stop in time");
  }
  loop_.Stop();
  conns_.clear();
  nodes_.clear();
  jobs_.clear();
}

std::string HeadService::address() const {
  return absl::StrCat(options_.host, ":", listener_ ? listener_->port() : 0);
}

int HeadService::port() const { return listener_ ? listener_->port() : 0; }

void HeadService::OnAccept(std::shared_ptr<rpc::Connection> conn) {
  conns_[conn.get()] = conn;
  conn->Start(
      [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
             std::string_view body) { OnRequest(c, h, body); },
      [this](const std::shared_ptr<rpc::Connection>& c, const absl::Status&) { OnClose(c); });
}

void HeadService::OnClose(const std::shared_ptr<rpc::Connection>& conn) {
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (it->second.conn == conn) {  // only the connection that registered it removes it
      RAIO_LOG_INFO("node {} left the cluster", it->first);
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, job] : jobs_) {
    if (job.conn == conn) {
      job.info.set_state("finished");
      job.conn.reset();
    }
  }
  conns_.erase(conn.get());
}

void HeadService::OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                            std::string_view body) {
  auto parse = [&](google::protobuf::MessageLite& m) {
    if (m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return true;
    conn->ReplyError(h, absl::InvalidArgumentError("malformed request body"));
    return false;
  };
  switch (h.method) {
    case proto::REGISTER_NODE: {
      proto::RegisterNodeRequest req;
      if (!parse(req)) return;
      if (req.node_id().empty() || req.socket_path().empty()) {
        conn->ReplyError(h, absl::InvalidArgumentError("node id and socket path are required"));
        return;
      }
      if (auto total = ResourceSet::FromProto(req.total()); !total.ok()) {
        conn->ReplyError(h, total.status());
        return;
      }
      if (auto it = nodes_.find(req.node_id()); it != nodes_.end() && !it->second.conn->closed()) {
        RAIO_LOG_WARN("refused a second registration of live node {} from {}", req.node_id(),
                      conn->peer_name());
        conn->ReplyError(
            h, absl::AlreadyExistsError("node " + req.node_id() + " is already registered"));
        return;
      }
      RAIO_LOG_INFO("node {} joined at {}", req.node_id(), req.socket_path());
      nodes_[req.node_id()] = NodeEntry{req, conn};
      conn->Reply(h, proto::Empty());
      return;
    }
    case proto::REGISTER_JOB: {
      proto::RegisterJobRequest req;
      if (!parse(req)) return;
      if (nodes_.empty()) {
        conn->ReplyError(h, absl::UnavailableError("the cluster has no live node"));
        return;
      }
      // Attach the driver to a node on its own host (drivers reach nodes over Unix
      // sockets); fall back to the first node.
      const NodeEntry* chosen = &nodes_.begin()->second;
      for (const auto& [id, node] : nodes_) {
        if (node.info.hostname() == req.hostname()) chosen = &node;
      }
      uint32_t job_id = next_job_id_++;
      JobEntry& job = jobs_[job_id];
      job.info.set_job_id(job_id);
      job.info.set_driver_pid(req.driver_pid());
      job.info.set_executable(req.executable());
      job.info.set_state("running");
      job.conn = conn;
      proto::RegisterJobReply reply;
      reply.set_job_id(job_id);
      reply.set_node_id(chosen->info.node_id());
      reply.set_node_socket_path(chosen->info.socket_path());
      conn->Reply(h, reply);
      return;
    }
    case proto::GET_CLUSTER_STATUS:
      HandleGetClusterStatus(conn, h);
      return;
    case proto::LIST_CLUSTER_OBJECTS: {
      auto merged = std::make_shared<proto::ObjectList>();
      auto remaining = std::make_shared<int>(static_cast<int>(nodes_.size()));
      if (*remaining == 0) return conn->Reply(h, *merged);
      for (const auto& [id, node] : nodes_) {
        node.conn->Call(
            proto::LIST_OBJECTS, proto::Empty(),
            [conn, h, merged, remaining](const absl::StatusOr<std::string_view>& r) {
              proto::ObjectList list;
              if (r.ok() && list.ParseFromArray(r->data(), static_cast<int>(r->size()))) {
                for (auto& o : *list.mutable_objects()) *merged->add_objects() = std::move(o);
              }
              if (--*remaining == 0) conn->Reply(h, *merged);
            },
            kNodeStatsTimeout);
      }
      return;
    }
    case proto::LIST_CLUSTER_ACTORS: {
      auto merged = std::make_shared<proto::ActorList>();
      auto remaining = std::make_shared<int>(static_cast<int>(nodes_.size()));
      if (*remaining == 0) return conn->Reply(h, *merged);
      for (const auto& [id, node] : nodes_) {
        node.conn->Call(
            proto::LIST_ACTORS, proto::Empty(),
            [conn, h, merged, remaining](const absl::StatusOr<std::string_view>& r) {
              proto::ActorList list;
              if (r.ok() && list.ParseFromArray(r->data(), static_cast<int>(r->size()))) {
                for (auto& a : *list.mutable_actors()) *merged->add_actors() = std::move(a);
              }
              if (--*remaining == 0) conn->Reply(h, *merged);
            },
            kNodeStatsTimeout);
      }
      return;
    }
    case proto::SHUTDOWN_CLUSTER:
      conn->Reply(h, proto::Empty());
      if (options_.on_shutdown_request) options_.on_shutdown_request();
      return;
    default:
      conn->ReplyError(h, absl::UnimplementedError(absl::StrCat("unknown method ", h.method)));
  }
}

void HeadService::HandleGetClusterStatus(const std::shared_ptr<rpc::Connection>& conn,
                                         const rpc::FrameHeader& h) {
  struct Gather {
    proto::ClusterStatus status;
    int remaining = 0;
  };
  auto gather = std::make_shared<Gather>();
  for (const auto& [id, job] : jobs_) *gather->status.add_jobs() = job.info;
  auto finish = [conn, h, gather] { conn->Reply(h, gather->status); };
  gather->remaining = static_cast<int>(nodes_.size());
  if (gather->remaining == 0) return finish();
  for (const auto& [id, node] : nodes_) {
    node.conn->Call(
        proto::GET_NODE_STATS, proto::Empty(),
        [gather, finish, node_id = id](const absl::StatusOr<std::string_view>& r) {
          proto::NodeStats* stats = gather->status.add_nodes();
          if (!r.ok() || !stats->ParseFromArray(r->data(), static_cast<int>(r->size()))) {
            stats->set_node_id(node_id);
          }
          if (--gather->remaining == 0) finish();
        },
        kNodeStatsTimeout);
  }
}

}  // namespace raio::head
