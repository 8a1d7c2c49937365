#include "inspect.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/actor.pb.h"
#include "raio/common/config.h"
#include "raio/common/event_loop.h"
#include "raio/common/placement_resources.h"
#include "raio/head.pb.h"
#include "raio/internal/object_id.h"
#include "raio/node.pb.h"
#include "raio/placement_group.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"

namespace raio::cli {

namespace {

// Sends one request to the head and parses the reply; prints errors as `what: ...`.
bool CallHead(const std::string& address_flag, const char* what, uint32_t method,
              google::protobuf::Message* reply_out) {
  std::string address = ResolveAddress(address_flag);
  if (address.empty()) {
    std::cerr << what << ": no cluster found (pass --address or set RAIO_ADDRESS)\n";
    return false;
  }
  raio::EventLoop loop("raio-cli");
  auto conn = raio::rpc::ConnectTcp(loop.io(), address, raio::config::connect_timeout_ms());
  if (!conn.ok()) {
    std::cerr << what << ": " << conn.status().message() << "\n";
    return false;
  }
  (*conn)->Start(nullptr, nullptr);
  loop.Start();
  auto reply = raio::rpc::CallSync(**conn, method, raio::proto::Empty(),
                                   raio::config::control_rpc_timeout_ms());
  (*conn)->Close(absl::CancelledError("done"));
  if (!reply.ok() || !reply_out->ParseFromString(*reply)) {
    std::cerr << what << ": "
              << (reply.ok() ? "malformed reply" : std::string(reply.status().message())) << "\n";
    return false;
  }
  return true;
}

// Rewrites the bytes fields of `m` in `j` (protobuf's JSON of `m`, base64 there) as hex,
// the form raio's ids take everywhere else (the API, the tables). Map fields are left as
// they are (no map of raio's listings holds bytes).
void BytesToHex(const google::protobuf::Message& m, nlohmann::ordered_json& j) {
  using google::protobuf::FieldDescriptor;
  if (!j.is_object()) return;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    auto it = j.find(f->name());
    if (it == j.end() || f->is_map()) continue;
    if (f->type() == FieldDescriptor::TYPE_BYTES) {
      if (!f->is_repeated()) {
        *it = absl::BytesToHexString(r->GetString(m, f));
      } else if (it->is_array() && it->size() == static_cast<size_t>(r->FieldSize(m, f))) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          (*it)[k] = absl::BytesToHexString(r->GetRepeatedString(m, f, k));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!f->is_repeated()) {
        if (r->HasField(m, f)) BytesToHex(r->GetMessage(m, f), *it);
      } else if (it->is_array() && it->size() == static_cast<size_t>(r->FieldSize(m, f))) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          BytesToHex(r->GetRepeatedMessage(m, f, k), (*it)[k]);
        }
      }
    }
  }
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(out, nullptr, false);
  if (j.is_discarded()) return out;
  BytesToHex(m, j);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

const char* ActorStateName(raio::proto::ActorState s) {
  switch (s) {
    case raio::proto::ACTOR_PENDING:
      return "PENDING";
    case raio::proto::ACTOR_ALIVE:
      return "ALIVE";
    case raio::proto::ACTOR_RESTARTING:
      return "RESTARTING";
    case raio::proto::ACTOR_DEAD:
      return "DEAD";
    default:
      return "?";
  }
}

void PrintActors(const raio::proto::ActorList& list) {
  std::printf("%-32s  %-10s  %-20s  %-20s  %-16s  %8s  %s\n", "ACTOR ID", "STATE", "NAME", "CLASS",
              "NODE", "RESTARTS", "DEATH CAUSE");
  for (const auto& a : list.actors()) {
    std::string name = a.name().empty() ? "-" : a.namespace_() + "/" + a.name();
    std::printf("%-32s  %-10s  %-20s  %-20s  %-16s  %8u  %s\n",
                raio::ActorId::FromBinary(a.actor_id()).Hex().c_str(), ActorStateName(a.state()),
                name.c_str(), a.class_name().c_str(),
                a.node_id().empty() ? "-" : a.node_id().c_str(), a.num_restarts(),
                a.death_cause().empty() ? "-" : a.death_cause().c_str());
  }
}

std::string Fmt(const std::string& name, double v) {
  char buf[64];
  if (name == "memory") {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

// "{CPU: 1, slot: 1}", names sorted (a protobuf map has no order).
std::string FormatDemand(const raio::proto::ResourceSet& demand) {
  std::map<std::string, double> sorted(demand.amounts().begin(), demand.amounts().end());
  std::string out = "{";
  for (const auto& [k, v] : sorted) {
    out += (out.size() > 1 ? ", " : "") + k + ": " + Fmt(k, v);
  }
  return out + "}";
}

// Tasks of one scheduling class (job, demand, function) waiting for a lease on a node.
struct PendingGroup {
  uint32_t job_id = 0;
  std::string function_name;
  std::string demand;
  bool infeasible = false;  // no node of the cluster can meet the demand now
  std::size_t requests = 0;
  uint32_t latest_backlog = 0;  // the owner's queue length when it sent its latest request
  std::size_t Waiting() const {
    // An owner keeps min(queued tasks, max_pending_lease_requests_per_class) lease requests
    // open per class, and each request's `backlog` is the owner's queue length when it
    // was sent: a snapshot that includes the tasks the class's other requests will run
    // and that does not shrink as they are granted. So summing backlogs over-counts, and
    // so does their maximum; below the cap each open request stands for one waiting
    // task. At the cap, more may wait than there are requests: the latest snapshot is
    // the best figure the node has. Old owners send backlog 0: count the requests.
    if (latest_backlog == 0 ||
        requests < static_cast<std::size_t>(raio::config::max_pending_lease_requests_per_class())) {
      return requests;
    }
    return std::max<std::size_t>(requests, latest_backlog);
  }
};

// Groups a node's pending lease requests by job + demand + function, in the order the
// node received them (so the last request of a group carries the freshest backlog).
std::vector<PendingGroup> GroupPendingLeases(const raio::proto::NodeStats& node) {
  std::vector<PendingGroup> groups;
  for (const auto& p : node.pending_leases()) {
    std::string demand = FormatDemand(p.demand());
    auto it = std::find_if(groups.begin(), groups.end(), [&](const PendingGroup& g) {
      return g.job_id == p.job_id() && g.function_name == p.function_name() && g.demand == demand &&
             g.infeasible == p.infeasible();
    });
    if (it == groups.end()) {
      it = groups.insert(groups.end(),
                         PendingGroup{p.job_id(), p.function_name(), demand, p.infeasible()});
    }
    ++it->requests;
    it->latest_backlog = p.backlog();
  }
  return groups;
}

// At most this many workers are listed one per line per node; the rest are only counted.
constexpr int kMaxWorkersListed = 20;

// Word-wraps `text` at `width` columns, each line after `indent` spaces.
std::string Wrap(std::string_view text, std::size_t indent, std::size_t width) {
  std::string out, line;
  auto flush = [&] {
    out += std::string(indent, ' ') + line + "\n";
    line.clear();
  };
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(at, end - at);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) flush();
    line += (line.empty() ? "" : " ") + std::string(word);
    at = end + 1;
  }
  if (!line.empty()) flush();
  return out;
}

// `raio config`: the configuration table with this environment's values, or with a running
// cluster's when `address_flag` is given ("auto": the recorded cluster).

}  // namespace

// "2026-12-02 15:40:07 UTC" for a time in ms since the Unix epoch.
std::string FormatUnixMillis(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// One line per dead node: id, address, when and why it was declared dead.
void PrintDeadNodes(const google::protobuf::RepeatedPtrField<raio::proto::NodeInfo>& dead) {
  for (const auto& n : dead) {
    std::cout << "  node " << n.node_id() << "  " << n.address().ip() << ":" << n.address().port()
              << (n.hostname().empty() ? "" : "  " + n.hostname()) << "  dead since "
              << FormatUnixMillis(n.death_time_ms()) << ": " << n.death_cause() << "\n";
  }
}

int Status(const std::string& address_flag, bool json) {
  std::string address = ResolveAddress(address_flag);
  if (address.empty()) {
    std::cerr << "raio status: no cluster found (start one with `raio start --head`, or pass "
                 "--address / RAIO_ADDRESS)\n";
    return 1;
  }
  raio::proto::ClusterStatus status;
  if (!CallHead(address, "raio status", raio::proto::GET_CLUSTER_STATUS, &status)) return 1;
  if (json) {
    std::cout << ToJson(status) << "\n";
    return 0;
  }
  // The cluster's values, so that figures below read as the nodes meant them (e.g. the
  // lease requests an owner keeps open per class).
  (void)raio::config::ApplyOverrides(
      std::map<std::string, std::string>(status.system_config().begin(),
                                         status.system_config().end()),
      "the head's configuration");
  std::map<std::string, double> total, available;
  std::size_t pending_tasks = 0;
  std::cout << "======== raio cluster " << address << " ========\n";
  std::cout << "Nodes: " << status.nodes_size() << "\n";
  for (const auto& n : status.nodes()) {
    std::map<std::string, int> states;
    for (const auto& w : n.workers()) ++states[w.state()];
    std::cout << "  node " << n.node_id() << "  " << n.address()
              << (n.hostname().empty() ? "" : "  " + n.hostname()) << "\n    resources in use:";
    std::map<std::string, double> node_total(n.total().amounts().begin(),
                                             n.total().amounts().end());
    for (const auto& [k, v] : node_total) {
      auto it = n.available().amounts().find(k);
      double avail = it == n.available().amounts().end() ? 0 : it->second;
      std::cout << "  " << k << " " << Fmt(k, v - avail) << "/" << Fmt(k, v);
    }
    std::cout << "\n    workers: " << n.workers_size();
    for (const auto& [s, c] : states) std::cout << "  " << s << "=" << c;
    std::cout << "\n";
    for (int i = 0; i < n.workers_size() && i < kMaxWorkersListed; ++i) {
      const auto& w = n.workers(i);
      std::printf("      %-8s  pid %-7d  job %u\n", w.state().c_str(), w.pid(), w.job_id());
    }
    if (n.workers_size() > kMaxWorkersListed) {
      std::printf("      ... and %d more\n", n.workers_size() - kMaxWorkersListed);
    }
    for (const auto& [k, v] : n.total().amounts()) total[k] += v;
    for (const auto& [k, v] : n.available().amounts()) available[k] += v;
    for (const auto& g : GroupPendingLeases(n)) pending_tasks += g.Waiting();
  }
  if (status.dead_nodes_size() > 0) {
    std::cout << "Dead nodes: " << status.dead_nodes_size() << "\n";
    PrintDeadNodes(status.dead_nodes());
  }
  std::cout << "Resources (in use / total):\n";
  for (const auto& [k, v] : total) {
    std::cout << "  " << k << ": " << Fmt(k, v - available[k]) << " / " << Fmt(k, v) << "\n";
  }
  uint64_t store_objects = 0, store_used = 0, store_capacity = 0, spilled = 0, spilled_bytes = 0;
  for (const auto& n : status.nodes()) {
    store_objects += n.object_store().num_objects();
    store_used += n.object_store().used_bytes();
    store_capacity += n.object_store().capacity_bytes();
    spilled += n.object_store().num_spilled();
    spilled_bytes += n.object_store().spilled_bytes();
  }
  std::cout << "Object store: " << store_objects << " objects, " << Fmt("memory", store_used)
            << " / " << Fmt("memory", store_capacity) << " used, " << spilled << " spilled ("
            << Fmt("memory", spilled_bytes) << ")\n";
  std::cout << "Pending tasks: " << pending_tasks << "\n";
  for (const auto& n : status.nodes()) {
    for (const auto& g : GroupPendingLeases(n)) {
      std::cout << (g.infeasible ? "  infeasible (no node can meet it; waits for one to join): "
                                 : "  waiting for resources: ")
                << "job " << g.job_id << " " << g.function_name << " demand " << g.demand << " ("
                << g.Waiting() << " waiting) on node " << n.node_id() << "\n";
    }
  }
  raio::proto::ActorList actors;
  if (CallHead(address, "raio status", raio::proto::LIST_CLUSTER_ACTORS, &actors)) {
    std::map<std::string, int> by_state;
    for (const auto& a : actors.actors()) ++by_state[ActorStateName(a.state())];
    std::cout << "Actors: " << actors.actors_size();
    for (const auto& [state, n] : by_state) std::cout << "  " << state << "=" << n;
    std::cout << "\n";
    int waiting = 0;
    for (const auto& a : actors.actors()) waiting += a.waiting_for_resources() ? 1 : 0;
    std::cout << "Pending actors: " << waiting << "\n";
    for (const auto& a : actors.actors()) {
      if (!a.waiting_for_resources()) continue;
      std::cout << (a.infeasible() ? "  infeasible (no node can meet it; waits for one to join): "
                                   : "  waiting for resources: ")
                << "job " << a.job_id() << " actor " << a.class_name()
                << (a.name().empty() ? "" : " '" + a.name() + "'") << " "
                << raio::ActorId::FromBinary(a.actor_id()).Hex() << " ("
                << ActorStateName(a.state()) << ") demand " << FormatDemand(a.resources())
                << (a.node_id().empty() ? "" : " on node " + a.node_id()) << "\n";
    }
    if (actors.actors_size() > 0) PrintActors(actors);
  }
  std::cout << "Jobs:\n";
  for (const auto& j : status.jobs()) {
    std::cout << "  job " << j.job_id() << "  " << j.state() << "  pid " << j.driver_pid() << "  "
              << j.executable() << "\n";
  }
  std::map<std::string, std::string> changed = raio::config::NonDefaultValues();
  std::cout << "System config: " << (changed.empty() ? "all defaults" : "") << "\n";
  for (const auto& [name, value] : changed) std::cout << "  " << name << " = " << value << "\n";
  return 0;
}

int ShowConfig(const std::string& address_flag, bool json) {
  if (!address_flag.empty()) {
    raio::proto::ClusterStatus status;
    if (!CallHead(address_flag, "raio config", raio::proto::GET_CLUSTER_STATUS, &status)) {
      return 1;
    }
    if (absl::Status s = raio::config::ApplyOverrides(
            std::map<std::string, std::string>(status.system_config().begin(),
                                               status.system_config().end()),
            "the head's configuration");
        !s.ok()) {
      std::cerr << "raio config: " << s.message() << "\n";
      return 1;
    }
  }
  std::vector<raio::config::EntryInfo> entries = raio::config::Describe();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
      out.push_back({{"name", e.name},
                     {"type", raio::config::TypeName(e.type)},
                     {"default", e.default_value},
                     {"value", e.value},
                     {"unit", e.unit},
                     {"env", e.env_var},
                     {"doc", e.doc}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-38s %-12s %-10s %-10s %-9s %s\n", "NAME", "TYPE", "DEFAULT", "VALUE", "UNIT",
              "ENVIRONMENT");
  for (const auto& e : entries) {
    std::printf("%-38s %-12s %-10s %-10s %-9s %s\n", std::string(e.name).c_str(),
                std::string(raio::config::TypeName(e.type)).c_str(), e.default_value.c_str(),
                e.value.c_str(), e.unit.empty() ? "-" : std::string(e.unit).c_str(),
                e.env_var.c_str());
    std::cout << Wrap(e.doc, 4, 96);
  }
  std::cout << "\nVALUE: "
            << (address_flag.empty() ? "this environment's (the defaults and RAIO_* variables)"
                                     : "the cluster's")
            << ". Set values with RAIO_<NAME>, InitOptions::system_config or\n"
               "`raio start --head --system-config '{\"name\": value}'` (docs/design/config.md).\n"
               "Fixed at build time, as every process must agree: max_frame_bytes = "
            << raio::config::kMaxFrameBytes << ".\n";
  return 0;
}

int ListActors(const std::string& address_flag, bool json) {
  raio::proto::ActorList list;
  if (!CallHead(address_flag, "raio list actors", raio::proto::LIST_CLUSTER_ACTORS, &list))
    return 1;
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  PrintActors(list);
  std::cout << list.actors_size() << " actors\n";
  return 0;
}

int ListPlacementGroups(const std::string& address_flag, bool json) {
  raio::proto::PlacementGroupList list;
  if (!CallHead(address_flag, "raio list placement-groups", raio::proto::LIST_PLACEMENT_GROUPS,
                &list)) {
    return 1;
  }
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  auto state_name = [](const raio::proto::PlacementGroupInfo& g) -> std::string {
    if (g.state() == raio::proto::PG_PENDING && g.infeasible()) return "INFEASIBLE";
    std::string name = raio::proto::PlacementGroupState_Name(g.state());
    return name.substr(3);  // PG_
  };
  std::printf("%-17s %-16s %-13s %-13s %s\n", "PLACEMENT GROUP", "NAME", "STRATEGY", "STATE",
              "BUNDLES (resources @ node)");
  int pending = 0, infeasible = 0;
  for (const auto& g : list.groups()) {
    std::string bundles;
    for (const auto& b : g.bundles()) {
      std::map<std::string, double> r(b.resources().amounts().begin(),
                                      b.resources().amounts().end());
      std::string amounts;
      for (const auto& [k, v] : r)
        absl::StrAppend(&amounts, amounts.empty() ? "" : " ", k, ":", Fmt(k, v));
      absl::StrAppend(&bundles, bundles.empty() ? "" : ", ", "#", b.index(), " {", amounts, "}",
                      b.node_id().empty() ? "" : " @ " + b.node_id());
    }
    if (g.state() == raio::proto::PG_PENDING && g.infeasible()) {
      ++infeasible;
    } else if (g.state() == raio::proto::PG_PENDING || g.state() == raio::proto::PG_RESCHEDULING) {
      ++pending;
    }
    // A name is any string: control characters escaped, so that each group stays one line.
    std::string name = g.name().empty() ? "-" : "";
    for (unsigned char c : g.name()) {
      if (c < 0x20 || c == 0x7f) {
        absl::StrAppend(&name, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else {
        name.push_back(static_cast<char>(c));
      }
    }
    std::printf("%-17s %-16s %-13s %-13s %s\n",
                absl::BytesToHexString(g.placement_group_id()).c_str(), name.c_str(),
                raio::proto::PlacementStrategy_Name(g.strategy()).c_str(), state_name(g).c_str(),
                bundles.c_str());
    if (!g.message().empty() && g.state() != raio::proto::PG_CREATED) {
      std::printf("    %s\n", g.message().c_str());
    }
  }
  std::cout << list.groups_size() << " placement groups, " << pending
            << " pending or rescheduling, " << infeasible << " infeasible\n";
  return 0;
}

int ListNodes(const std::string& address_flag, bool json) {
  raio::proto::NodeList list;
  if (!CallHead(address_flag, "raio list nodes", raio::proto::LIST_NODES, &list)) return 1;
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  std::cout << "NODE ID           ADDRESS                HOST              STATE  RESOURCES "
               "(in use / total)  LABELS\n";
  int alive = 0;
  google::protobuf::RepeatedPtrField<raio::proto::NodeInfo> dead;
  for (const auto& n : list.nodes()) {
    if (n.state() == "dead") {
      *dead.Add() = n;
      continue;
    }
    ++alive;
    std::map<std::string, double> total;
    for (const auto& [k, v] : n.total().amounts()) {
      // Placement group bundles show in `raio list placement-groups`, not as resources.
      if (!raio::ParseBundleResource(k)) total[k] = v;
    }
    std::string resources;
    for (const auto& [k, v] : total) {
      auto it = n.available().amounts().find(k);
      double avail = it == n.available().amounts().end() ? 0 : it->second;
      absl::StrAppend(&resources, resources.empty() ? "" : ", ", k, " ", Fmt(k, v - avail), "/",
                      Fmt(k, v));
    }
    std::map<std::string, std::string> labels(n.labels().begin(), n.labels().end());
    std::string label_text;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&label_text, label_text.empty() ? "" : ",", k, "=", v);
    }
    std::string address = absl::StrCat(n.address().ip(), ":", n.address().port());
    std::printf("%-16s  %-21s  %-16s  %-5s  %s  %s\n", n.node_id().c_str(), address.c_str(),
                n.hostname().c_str(), n.state().c_str(), resources.c_str(),
                label_text.empty() ? "-" : label_text.c_str());
  }
  std::cout << alive << (alive == 1 ? " node" : " nodes");
  if (dead.empty()) {
    std::cout << "\n";
  } else {
    std::cout << ", " << dead.size() << " dead:\n";
    PrintDeadNodes(dead);
  }
  return 0;
}

int ListObjects(const std::string& address_flag, bool json) {
  raio::proto::ObjectList list;
  if (!CallHead(address_flag, "raio list objects", raio::proto::LIST_CLUSTER_OBJECTS, &list)) {
    return 1;
  }
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  uint64_t total = 0;
  // One row per copy: an object on several nodes has a row for each.
  std::set<std::string> distinct;
  std::cout << "OBJECT ID                                   SIZE        STATE     PINS  NODE"
               "              COPY\n";
  for (const auto& o : list.objects()) {
    if (!o.secondary()) total += o.size_bytes();
    distinct.insert(o.object_id());
    std::printf("%-42s  %10llu  %-8s  %4llu  %-16s  %s\n",
                raio::ObjectId::FromBinary(o.object_id()).Hex().c_str(),
                static_cast<unsigned long long>(o.size_bytes()), o.state().c_str(),
                static_cast<unsigned long long>(o.pins()), o.node_id().c_str(),
                o.secondary() ? "secondary" : "primary");
  }
  std::cout << distinct.size() << " objects (" << list.objects_size()
            << " copies) in shared-memory stores, " << total
            << " bytes in primary copies (small objects live in their owners' processes and are "
               "not listed)\n";
  return 0;
}

}  // namespace raio::cli
