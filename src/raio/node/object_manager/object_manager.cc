#include "raio/node/object_manager/object_manager.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/rpc.pb.h"

namespace raio::node {

namespace {

// The probe's READ_OBJECT_CHUNK reply (read whole: the object's size is not known yet, so
// there is no place in the store to read it into), read in place: `data` points into the
// connection's receive buffer (valid only during the reply callback), so the bytes are
// copied once, into the store, instead of first into a protobuf string.
struct ChunkReplyView {
  uint64_t object_size_bytes = 0;
  std::string_view data;
};

// Walks the reply's protobuf wire format (ReadObjectChunkReply in node.proto); unknown
// fields are skipped, as protobuf would. nullopt when it does not parse.
std::optional<ChunkReplyView> ParseChunkReply(std::string_view body) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(body.data()),
                                            static_cast<int>(body.size()));
  ChunkReplyView view;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    if (field == proto::ReadObjectChunkReply::kObjectSizeBytesFieldNumber &&
        type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&view.object_size_bytes)) return std::nullopt;
    } else if (field == proto::ReadObjectChunkReply::kDataFieldNumber &&
               type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return std::nullopt;
      const int at = in.CurrentPosition();
      if (!in.Skip(static_cast<int>(length))) return std::nullopt;
      view.data = body.substr(static_cast<std::size_t>(at), length);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return view;
}

}  // namespace

// One object's transfer. Chunks are either still to ask for (`retry`, then every offset
// from `next_offset`), outstanding (exactly one request each, `in_flight` in all, on any
// source's connection), or received; so no byte is asked for twice at once.
struct ObjectManager::Transfer {
  ObjectId id;
  std::vector<proto::Address> sources;
  std::vector<std::string> failures;  // "<source>: <status>", one per source given up on
  bool all_not_found = true;          // every failure so far was NOT_FOUND
  std::size_t source = 0;             // index in `sources` of the one in use
  // Bumped at each change of source: a failure of a request sent to an earlier source
  // does not move on again (its chunk is asked for anew), though its bytes, when they
  // come, are as good as any (the object is immutable).
  uint64_t generation = 0;
  std::shared_ptr<rpc::Connection> conn;  // to sources[source] once connected
  uint64_t chunk_bytes = 0;
  int chunks_in_flight = 0;

  std::optional<uint64_t> size;  // known from the first reply
  bool waiting_for_room = false;
  bool created = false;  // allocated in the local store (unsealed) at `location`
  ObjectLocation location;
  uint64_t next_offset = 0;
  std::deque<Chunk> retry;
  int in_flight = 0;
  uint64_t received = 0;
  bool done = false;  // finished: late replies are dropped, the memory may be gone
  // Set once the transfer has failed. Each outstanding chunk read may still write into the
  // copy's memory (CallInto), so the copy is dropped, and the callbacks run, only when no
  // read is outstanding (in_flight == 0); Stop() closes the connections first instead.
  std::optional<absl::Status> failure;
  std::vector<PullCallback> callbacks;
};

ObjectManager::ObjectManager(boost::asio::io_context& io, ObjectStoreService& store,
                             Options options)
    : io_(io), store_(store), options_(std::move(options)), pool_(io, options_.connection_factory) {
  RAIO_CHECK(options_.connection_factory != nullptr);
  connect_loop_.Start();
}

ObjectManager::~ObjectManager() { Stop(); }

template <typename F>
void ObjectManager::PostGuarded(F f) {
  boost::asio::post(io_, [weak = std::weak_ptr<bool>(alive_), f = std::move(f)]() mutable {
    if (!weak.expired()) f();
  });
}

void ObjectManager::RegisterHandlers(rpc::Service& service) {
  service.Handle<proto::READ_OBJECT_CHUNK>(
      [this](const rpc::Responder<proto::READ_OBJECT_CHUNK>& r,
             const proto::ReadObjectChunkRequest& req) { ServeChunk(r, req); });
}

void ObjectManager::ServeChunk(const rpc::Responder<proto::READ_OBJECT_CHUNK>& r,
                               const proto::ReadObjectChunkRequest& req) {
  if (req.object_id().size() != ObjectId::kSize) {
    return r.Error(absl::InvalidArgumentError(absl::StrCat("READ_OBJECT_CHUNK: object_id has ",
                                                           req.object_id().size(), " bytes, not ",
                                                           ObjectId::kSize)));
  }
  const ObjectId id = ObjectId::FromBinary(req.object_id());
  if (req.length_bytes() > kMaxChunkBytes) {
    return r.Error(absl::InvalidArgumentError(
        absl::StrCat("READ_OBJECT_CHUNK of object ", id.Hex(), ": length_bytes ",
                     req.length_bytes(), " is above the largest chunk served, ", kMaxChunkBytes)));
  }
  absl::StatusOr<ObjectLocation> loc = store_.PinForNode(id);
  if (!loc.ok()) return r.Error(loc.status());
  if (req.offset_bytes() > loc->size) {
    store_.UnpinForNode(id);
    return r.Error(absl::OutOfRangeError(absl::StrCat("READ_OBJECT_CHUNK of object ", id.Hex(),
                                                      ": offset_bytes ", req.offset_bytes(),
                                                      " is past its end (", loc->size, " bytes)")));
  }
  const uint64_t n = std::min(req.length_bytes(), loc->size - req.offset_bytes());
  proto::ReadObjectChunkReply reply;
  reply.set_object_size_bytes(loc->size);
  ++stats_.chunks_served;
  stats_.bytes_served += n;
  // The bytes go from the store to the socket with no copy (a raw tail, written with
  // scatter-gather): the object stays pinned until the connection has written them, or
  // has closed.
  const auto* data =
      reinterpret_cast<const char*>(store_.shm_base() + loc->offset + req.offset_bytes());
  r.OkWithTail(reply, proto::ReadObjectChunkReply::kDataFieldNumber,
               rpc::RawTail{std::string_view(data, n), HoldPin(id)});
}

std::shared_ptr<const void> ObjectManager::HoldPin(const ObjectId& id) {
  auto unpin = [this, weak = std::weak_ptr<bool>(alive_), id](const void*) {
    if (weak.expired()) return;  // the manager is gone, and the node with it
    if (io_.get_executor().running_in_this_thread()) {
      store_.UnpinForNode(id);
    } else {
      PostGuarded([this, id] { store_.UnpinForNode(id); });
    }
  };
  return std::shared_ptr<const void>(nullptr, std::move(unpin));
}

void ObjectManager::Pull(const ObjectId& id, std::vector<proto::Address> sources,
                         PullCallback done) {
  if (stopped_) {
    PostGuarded([done = std::move(done), id] {
      done(absl::CancelledError(
          absl::StrCat("pull of object ", id.Hex(), ": the object manager has stopped")));
    });
    return;
  }
  if (auto it = pulls_.find(id); it != pulls_.end()) {
    const PullPtr& p = it->second;
    ++stats_.pulls_merged;
    p->callbacks.push_back(std::move(done));
    for (auto& s : sources) {
      const bool known = std::any_of(p->sources.begin(), p->sources.end(), [&s](const auto& k) {
        return k.SerializeAsString() == s.SerializeAsString();
      });
      if (!known) p->sources.push_back(std::move(s));
    }
    return;
  }
  if (store_.HasSealed(id)) {
    PostGuarded([done = std::move(done)] { done(absl::OkStatus()); });
    return;
  }
  if (sources.empty()) {
    PostGuarded([done = std::move(done), id] {
      done(absl::NotFoundError(
          absl::StrCat("object ", id.Hex(), " could not be pulled: no node has it")));
    });
    return;
  }
  auto p = std::make_shared<Transfer>();
  p->id = id;
  p->sources = std::move(sources);
  p->chunk_bytes =
      options_.chunk_bytes > 0 ? options_.chunk_bytes : config::object_transfer_chunk_bytes();
  p->chunk_bytes = std::clamp<uint64_t>(p->chunk_bytes, 1, kMaxChunkBytes);
  p->chunks_in_flight = options_.chunks_in_flight > 0
                            ? options_.chunks_in_flight
                            : static_cast<int>(config::object_transfer_chunks_in_flight());
  p->callbacks.push_back(std::move(done));
  pulls_.emplace(id, p);
  ++stats_.transfers_started;
  // Start from the loop, so that a second Pull of the same object in this handler joins.
  PostGuarded([this, p] { Connect(p); });
}

std::size_t ObjectManager::num_waiting_for_room() const {
  return static_cast<std::size_t>(std::count_if(
      pulls_.begin(), pulls_.end(), [](const auto& kv) { return kv.second->waiting_for_room; }));
}

void ObjectManager::Connect(const PullPtr& p) {
  if (p->done || p->failure) return;
  const uint64_t generation = p->generation;
  const proto::Address& to = p->sources[p->source];
  if (std::shared_ptr<rpc::Connection> conn = pool_.Find(to)) {
    return OnConnected(p, generation, std::move(conn));
  }
  // ConnectionPool::Get blocks while it connects: off the loop.
  connect_loop_.Post([this, weak = std::weak_ptr<bool>(alive_), p, generation, to] {
    if (weak.expired()) return;  // the pool lives as long as the manager, which joins us
    absl::StatusOr<std::shared_ptr<rpc::Connection>> conn = pool_.Get(to);
    PostGuarded([this, p, generation, conn = std::move(conn)]() mutable {
      OnConnected(p, generation, std::move(conn));
    });
  });
}

void ObjectManager::OnConnected(const PullPtr& p, uint64_t generation,
                                absl::StatusOr<std::shared_ptr<rpc::Connection>> conn) {
  if (p->done || p->failure || generation != p->generation) return;
  if (!conn.ok()) return SourceFailed(p, conn.status());
  p->conn = *std::move(conn);
  if (!p->size) return Probe(p);
  if (!p->waiting_for_room) IssueChunks(p);
}

namespace {
proto::ReadObjectChunkRequest ChunkRequest(const ObjectId& id, uint64_t offset, uint64_t length) {
  proto::ReadObjectChunkRequest req;
  req.set_object_id(id.Binary());
  req.set_offset_bytes(offset);
  req.set_length_bytes(length);
  return req;
}
}  // namespace

void ObjectManager::Probe(const PullPtr& p) {
  const uint64_t generation = p->generation;
  ++p->in_flight;
  ++stats_.chunks_requested;
  p->conn->Call(
      proto::READ_OBJECT_CHUNK, ChunkRequest(p->id, 0, p->chunk_bytes),
      [this, weak = std::weak_ptr<bool>(alive_), p,
       generation](const absl::StatusOr<std::string_view>& body) {
        if (!weak.expired()) OnProbeReply(p, generation, body);
      },
      rpc::DefaultDeadline(rpc::MethodTraits<proto::READ_OBJECT_CHUNK>::kInfo));
}

void ObjectManager::ReadChunk(const PullPtr& p, Chunk chunk) {
  const uint64_t generation = p->generation;
  ++p->in_flight;
  ++stats_.chunks_requested;
  // The reply's bytes are read from the socket straight into the allocated object.
  char* into = reinterpret_cast<char*>(store_.shm_base() + p->location.offset + chunk.offset);
  rpc::CallInto<proto::READ_OBJECT_CHUNK>(
      *p->conn, ChunkRequest(p->id, chunk.offset, chunk.length),
      proto::ReadObjectChunkReply::kDataFieldNumber, std::span<char>(into, chunk.length),
      [this, weak = std::weak_ptr<bool>(alive_), p, generation,
       chunk](const absl::StatusOr<rpc::IntoReply<proto::ReadObjectChunkReply>>& reply) {
        if (!weak.expired()) OnChunkReply(p, generation, chunk, reply);
      });
}

void ObjectManager::OnProbeReply(const PullPtr& p, uint64_t generation,
                                 const absl::StatusOr<std::string_view>& body) {
  --p->in_flight;
  if (p->failure) return FinishFailureIfDrained(p);
  if (p->done || generation != p->generation) return;
  if (!body.ok()) return SourceFailed(p, body.status());
  std::optional<ChunkReplyView> reply = ParseChunkReply(*body);
  const uint64_t expect = reply ? std::min(p->chunk_bytes, reply->object_size_bytes) : 0;
  if (!reply || reply->data.size() != expect) {
    return SourceFailed(p, absl::DataLossError("malformed READ_OBJECT_CHUNK reply"));
  }
  p->size = reply->object_size_bytes;
  // Admission: allocate before anything is written. When the store answers at once, the
  // first chunk's bytes (still in the receive buffer) are kept; when the pull has to wait
  // for room they are dropped and asked for again once there is room.
  // `done` runs inline (decided at once: `*now` is set) or later, from inside another
  // store call, when room is made: then it continues from the loop. Both are shared with
  // it, since it may run after this function returned.
  auto now = std::make_shared<std::optional<absl::StatusOr<ObjectLocation>>>();
  auto deciding = std::make_shared<bool>(true);
  store_.CreateForNode(
      p->id, *p->size, CopyKind::kSecondary,
      [this, p, now, deciding](absl::StatusOr<ObjectLocation> loc) {
        if (*deciding) {
          *now = std::move(loc);
          return;
        }
        PostGuarded([this, p, loc = std::move(loc)]() mutable { OnCreated(p, std::move(loc)); });
      });
  *deciding = false;
  if (!now->has_value()) {
    p->waiting_for_room = true;
    RAIO_LOG_DEBUG("pull of object {} ({} bytes) waits for room in the object store", p->id.Hex(),
                   *p->size);
    return;
  }
  absl::StatusOr<ObjectLocation> location = std::move(**now);
  if (location.ok() && expect > 0) {
    std::memcpy(store_.shm_base() + location->offset, reply->data.data(), expect);
    p->received = expect;
    p->next_offset = expect;
    stats_.bytes_received += expect;
  }
  OnCreated(p, std::move(location));
}

void ObjectManager::OnCreated(const PullPtr& p, absl::StatusOr<ObjectLocation> location) {
  if (p->done || p->failure) {
    // Stopped or failed while waiting: the copy that was just made is not wanted.
    if (location.ok()) store_.AbortCreateForNode(p->id);
    return;
  }
  p->waiting_for_room = false;
  if (!location.ok()) {
    if (location.status().code() == absl::StatusCode::kAlreadyExists && store_.HasSealed(p->id)) {
      return Succeed(p);  // made here meanwhile (e.g. by another path)
    }
    return Fail(
        p, absl::Status(location.status().code(), absl::StrCat("cannot pull object ", p->id.Hex(),
                                                               ": ", location.status().message())));
  }
  p->created = true;
  p->location = *location;
  if (p->received == *p->size) return Succeed(p);
  if (p->conn && !p->conn->closed()) {
    IssueChunks(p);
  } else {
    // The source went away while the pull waited: ask it (or the next) again.
    Connect(p);
  }
}

void ObjectManager::IssueChunks(const PullPtr& p) {
  if (p->done || p->failure || !p->created || !p->conn) return;
  while (p->in_flight < p->chunks_in_flight) {
    Chunk chunk;
    if (!p->retry.empty()) {
      chunk = p->retry.front();
      p->retry.pop_front();
    } else if (p->next_offset < *p->size) {
      chunk.offset = p->next_offset;
      chunk.length = std::min(p->chunk_bytes, *p->size - p->next_offset);
      p->next_offset += chunk.length;
    } else {
      return;
    }
    ReadChunk(p, chunk);
  }
}

void ObjectManager::OnChunkReply(
    const PullPtr& p, uint64_t generation, Chunk chunk,
    const absl::StatusOr<rpc::IntoReply<proto::ReadObjectChunkReply>>& reply) {
  --p->in_flight;
  if (p->failure) return FinishFailureIfDrained(p);
  if (p->done) return;
  absl::Status failure;
  if (!reply.ok()) {
    failure = reply.status();
  } else {
    uint64_t got = reply->bytes;
    const std::string& inline_data = reply->reply.data();
    if (got == 0 && !inline_data.empty()) {
      // A peer that sends the bytes inside the message, not as a raw tail.
      got = inline_data.size();
      if (reply->reply.object_size_bytes() == *p->size && got == chunk.length) {
        std::memcpy(store_.shm_base() + p->location.offset + chunk.offset, inline_data.data(), got);
      }
    }
    if (reply->reply.object_size_bytes() != *p->size || got != chunk.length) {
      failure = absl::DataLossError(
          absl::StrCat("READ_OBJECT_CHUNK reply of ", got, " bytes of an object of ",
                       reply->reply.object_size_bytes(), " bytes, for ", chunk.length, " bytes at ",
                       chunk.offset, " of ", *p->size));
    }
  }
  if (!failure.ok()) {
    p->retry.push_back(chunk);
    if (generation == p->generation) return SourceFailed(p, failure);
    return IssueChunks(p);  // an earlier source's late failure
  }
  p->received += chunk.length;
  stats_.bytes_received += chunk.length;
  if (p->received == *p->size) return Succeed(p);
  IssueChunks(p);
}

void ObjectManager::SourceFailed(const PullPtr& p, const absl::Status& why) {
  ++stats_.source_failures;
  if (why.code() != absl::StatusCode::kNotFound) p->all_not_found = false;
  p->failures.push_back(absl::StrCat(rpc::DescribeAddress(p->sources[p->source]), ": ",
                                     absl::StatusCodeToString(why.code()), ": ", why.message()));
  RAIO_LOG_DEBUG("pull of object {}: source failed: {}", p->id.Hex(), p->failures.back());
  NextSource(p);
}

void ObjectManager::NextSource(const PullPtr& p) {
  ++p->source;
  ++p->generation;
  p->conn = nullptr;
  if (p->source >= p->sources.size()) {
    const std::string from = p->sources.size() == 1
                                 ? std::string("its source")
                                 : absl::StrCat("any of its ", p->sources.size(), " sources");
    return Fail(p, absl::Status(p->all_not_found ? absl::StatusCode::kNotFound
                                                 : absl::StatusCode::kUnavailable,
                                absl::StrCat("object ", p->id.Hex(), " could not be pulled from ",
                                             from, ": ", absl::StrJoin(p->failures, "; "))));
  }
  Connect(p);
}

void ObjectManager::Succeed(const PullPtr& p) {
  absl::Status sealed = store_.SealForNode(p->id);
  if (!sealed.ok() && !store_.HasSealed(p->id)) {
    return Fail(p, absl::InternalError(absl::StrCat("cannot seal pulled object ", p->id.Hex(), ": ",
                                                    sealed.message())));
  }
  p->created = false;  // sealed: nothing to abort
  ++stats_.transfers_succeeded;
  Finish(p, absl::OkStatus());
}

void ObjectManager::Fail(const PullPtr& p, absl::Status status) {
  if (p->done || p->failure) return;
  ++stats_.transfers_failed;
  if (p->waiting_for_room) store_.CancelCreateForNode(p->id);
  p->waiting_for_room = false;
  p->failure = std::move(status);
  p->conn = nullptr;
  FinishFailureIfDrained(p);
}

void ObjectManager::FinishFailureIfDrained(const PullPtr& p) {
  if (p->done || !p->failure || p->in_flight > 0) return;
  if (p->created) store_.AbortCreateForNode(p->id);
  p->created = false;
  Finish(p, *p->failure);
}

void ObjectManager::Finish(const PullPtr& p, const absl::Status& status) {
  p->done = true;
  p->conn = nullptr;
  if (auto it = pulls_.find(p->id); it != pulls_.end() && it->second == p) pulls_.erase(it);
  std::vector<PullCallback> callbacks = std::move(p->callbacks);
  for (auto& cb : callbacks) cb(status);
}

void ObjectManager::Stop() {
  if (stopped_) return;
  stopped_ = true;
  connect_loop_.Stop();  // waits for a connect under way
  // Closing on the loop closes the streams at once: no chunk read writes into a copy after
  // this, so the copies can go now, whatever reads are still outstanding.
  pool_.CloseAll(absl::CancelledError("object manager stopped"));
  std::vector<PullPtr> pulls;
  for (auto& [id, p] : pulls_) pulls.push_back(p);
  for (auto& p : pulls) {
    Fail(p, absl::CancelledError(
                absl::StrCat("pull of object ", p->id.Hex(), ": the object manager stopped")));
    if (p->done) continue;
    if (p->created) store_.AbortCreateForNode(p->id);
    p->created = false;
    Finish(p, *p->failure);
  }
}

}  // namespace raio::node
