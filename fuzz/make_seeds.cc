// Writes the seed corpus (fuzz/corpus/<fuzzer>/) from well-formed frames, messages and
// values, so that the fuzzers start from inputs the daemons really see. Run it after a
// wire format change:  build-fuzz/make_seeds fuzz/corpus
// Files are named after what they hold; running it again rewrites the same files.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "raio/actor.pb.h"
#include "raio/common.pb.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/owner.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/frame.h"
#include "raio/serialization.h"
#include "raio/task.pb.h"

namespace raio::fuzz {
namespace {

std::filesystem::path g_root;

void Write(const std::string& fuzzer, const std::string& name, const std::string& bytes) {
  std::filesystem::path dir = g_root / fuzzer;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// `tail_bytes` > 0: a version-2 frame whose last `tail_bytes` of `body` are its raw tail.
std::string Frame(rpc::FrameKind kind, uint32_t method, uint64_t id, const std::string& body,
                  uint32_t tail_bytes = 0) {
  std::string out(rpc::kTailFrameHeaderBytes, '\0');
  out.resize(rpc::EncodeFrameHeader(
      {kind, method, id, static_cast<uint32_t>(body.size()), tail_bytes}, out.data()));
  return out + body;
}

std::string Serialized(const google::protobuf::MessageLite& m) { return m.SerializeAsString(); }

void FrameSeeds() {
  using rpc::FrameKind;
  proto::LeaseIdRequest lease;
  lease.set_lease_id("LEASE-01");
  proto::RpcStatus error;
  error.set_code(5);
  error.set_message("no such object");
  const std::string request =
      Frame(FrameKind::kRequest, proto::RETURN_WORKER_LEASE, 7, Serialized(lease));
  const std::string one_way = Frame(FrameKind::kOneWay, proto::NOTIFY_BLOCKED, 0, "");
  const std::string reply = Frame(FrameKind::kReply, proto::GET_NODE_STATS, 1, "reply body");
  const std::string error_reply =
      Frame(FrameKind::kError, proto::GET_NODE_STATS, 2, Serialized(error));
  // Byte 0 of a frame_fuzzer input picks the write size (0: all at once).
  Write("frame", "request", std::string(1, '\0') + request);
  Write("frame", "one_way", std::string(1, '\0') + one_way);
  Write("frame", "reply", std::string(1, '\0') + reply);
  Write("frame", "error_reply", std::string(1, '\0') + error_reply);
  // An error reply whose status is OK: aborted the process before connection.cc checked.
  proto::RpcStatus ok_status;
  ok_status.set_message("x");
  Write("frame", "error_reply_with_status_ok",
        std::string(1, '\0') +
            Frame(FrameKind::kError, proto::GET_NODE_STATS, 1, Serialized(ok_status)));
  // Version 2: a reply whose body ends in a raw tail (read whole: no CallInto here).
  Write("frame", "reply_with_tail",
        std::string(1, '\5') + Frame(FrameKind::kReply, proto::READ_OBJECT_CHUNK, 1,
                                     "head" + std::string(64, 't'), 64));
  Write("frame", "four_frames_in_7_byte_writes",
        std::string(1, '\7') + request + one_way + reply + error_reply);
  Write("frame", "four_frames_in_1_byte_writes",
        std::string(1, '\1') + reply + error_reply + request + one_way);
  std::string bad = request;
  bad[0] = 'X';
  Write("frame", "bad_magic", std::string(1, '\0') + reply + bad);
  bad = request;
  bad[2] = 3;
  Write("frame", "wrong_version", std::string(1, '\0') + bad);
  bad = request;
  bad[3] = 9;
  Write("frame", "bad_kind", std::string(1, '\0') + bad);
  bad = request;
  bad[16] = bad[17] = bad[18] = bad[19] = '\xff';  // 4 GiB body: over the limit
  Write("frame", "oversized", std::string(1, '\0') + bad);
  Write("frame", "truncated_header", std::string(1, '\0') + request.substr(0, 13));
  Write("frame", "truncated_body", std::string(1, '\3') + request.substr(0, request.size() - 2));
}

// Byte 0 of a message_fuzzer input is the index into its table; keep these in step
// with Messages() in message_fuzzer.cc.
enum MessageIndex {
  kRegisterNode = 0,
  kRegisterDriver = 2,
  kRequestWorkerLease = 4,
  kCreateObject = 7,
  kCreateActor = 9,
  kBorrower = 13,
  kPushTask = 15,
  kRpcStatus = 18,
  kPushTaskReply = 19,
  kGetObjectReply = 20,
};

void Message(MessageIndex index, const std::string& name, const google::protobuf::MessageLite& m) {
  Write("message", name, std::string(1, static_cast<char>(index)) + Serialized(m));
}

void AddArg(proto::TaskSpec* spec, const internal::EncodedValue& v) {
  proto::TaskArg* arg = spec->add_args();
  arg->set_value(v.bytes);
  arg->set_format(static_cast<uint32_t>(v.format));
  arg->set_dtype(static_cast<uint32_t>(v.dtype));
}

void MessageSeeds() {
  proto::ResourceSet demand;
  (*demand.mutable_amounts())["CPU"] = 1;
  (*demand.mutable_amounts())["GPU"] = 0.5;
  (*demand.mutable_amounts())["memory"] = 1 << 30;

  proto::RegisterNodeRequest node;
  node.set_node_id("0123456789abcdef");
  node.mutable_address()->set_unix_socket("/tmp/raio/node.sock");
  node.set_hostname("host-a");
  (*node.mutable_total()->mutable_amounts())["CPU"] = 8;
  Message(kRegisterNode, "register_node", node);

  proto::RegisterDriverRequest driver;
  driver.set_job_id(1);
  driver.set_executable("/usr/bin/true");
  driver.set_worker_id("WORKER01");
  Message(kRegisterDriver, "register_driver", driver);

  proto::RequestWorkerLeaseRequest lease;
  lease.set_lease_id("LEASE-01");
  *lease.mutable_demand() = demand;
  lease.set_backlog(3);
  lease.set_function_name("Train");
  Message(kRequestWorkerLease, "request_worker_lease", lease);

  proto::CreateObjectRequest create;
  create.set_object_id(std::string(20, '\1'));
  create.set_owner_worker_id("WORKER01");
  Message(kCreateObject, "create_object", create);

  proto::CreateActorRequest actor;
  actor.mutable_spec()->set_actor_id(std::string(16, '\2'));
  actor.mutable_spec()->set_factory_name("Counter::Create");
  *actor.mutable_spec()->mutable_resources() = demand;
  actor.mutable_spec()->set_max_concurrency(1);
  Message(kCreateActor, "create_actor", actor);

  proto::BorrowerRequest borrower;
  borrower.set_object_id(std::string(20, '\3'));
  borrower.set_borrower_worker_id("WORKER02");
  borrower.set_count(2);
  Message(kBorrower, "add_borrower", borrower);

  proto::PushTaskRequest push;
  proto::TaskSpec* spec = push.mutable_spec();
  spec->set_task_id(std::string(16, '\4'));
  spec->set_function_name("Train");
  spec->set_owner_worker_id("WORKER01");
  AddArg(spec, internal::Encode(42));
  AddArg(spec, internal::Encode(std::string("label")));
  AddArg(spec, internal::Encode(std::vector<double>{0.5, 1.5, 2.5}));
  AddArg(spec, internal::Encode(std::map<std::string, int>{{"hidden", 64}, {"epochs", 3}}));
  proto::TaskArg* list = spec->add_args();  // a std::vector argument joined from elements
  for (const auto& element :
       {internal::Encode(1.0), internal::Encode(std::vector<double>{2.0, 3.0})}) {
    proto::TaskArg* e = list->mutable_list()->add_elements();
    e->set_value(element.bytes);
    e->set_format(static_cast<uint32_t>(element.format));
    e->set_dtype(static_cast<uint32_t>(element.dtype));
  }
  Message(kPushTask, "push_task", push);

  proto::RpcStatus status;
  status.set_code(14);
  status.set_message("node is shutting down");
  Message(kRpcStatus, "rpc_status", status);

  proto::PushTaskReply task_reply;
  task_reply.set_return_value(internal::Encode(std::vector<std::string>{"a", "b"}).bytes);
  task_reply.set_exec_duration_us(1200);
  Message(kPushTaskReply, "push_task_reply", task_reply);

  proto::GetObjectReply object_reply;
  internal::EncodedValue array = internal::Encode(std::vector<float>{1, 2, 3, 4});
  object_reply.set_value(array.bytes);
  object_reply.set_format(static_cast<uint32_t>(array.format));
  object_reply.set_dtype(static_cast<uint32_t>(array.dtype));
  Message(kGetObjectReply, "get_object_reply_array", object_reply);
}

// The C++ type a value_fuzzer input is decoded as: the index in fuzz::DecodeAs.
enum DecodedType {
  kInt = 0,
  kString = 4,
  kVectorDouble = 5,
  kMapStringInt = 9,
  kPoint = 11,
  kObjectRef = 13,
  kVectorObjectRef = 14,
  kBuffer = 15,
  kViewFloat = 16,
};

void Value(const std::string& name, DecodedType type, const internal::EncodedValue& v) {
  std::string header{static_cast<char>(v.format), static_cast<char>(v.dtype),
                     static_cast<char>(type)};
  Write("value", name, header + v.bytes);
}

struct Point {
  double x = 0;
  std::string label;
  std::vector<int> tags;
  RAIO_SERIALIZE(x, label, tags);
};

void ValueSeeds() {
  Value("int", kInt, internal::Encode(-7));
  Value("string", kString, internal::Encode(std::string("hello")));
  Value("vector_double_msgpack", kVectorDouble,
        {internal::ValueFormat::kMsgpack, internal::DType::kNone,
         internal::Pack(std::vector<double>{1.0, -2.5})});
  Value("vector_double_array", kVectorDouble,
        internal::Encode(std::vector<double>{1.0, -2.5, 1e300}));
  // 2^64: msgpack's pack_double casts it to uint64_t (see fuzz/ubsan.supp).
  Value("array_f64_2_pow_64", kVectorDouble, internal::Encode(std::vector<double>{0x1p64}));
  Value("vector_float_array", kViewFloat, internal::Encode(std::vector<float>{0.25f, 8.0f}));
  Value("map_string_int", kMapStringInt,
        internal::Encode(std::map<std::string, int>{{"a", 1}, {"b", 2}}));
  Value("point", kPoint, internal::Encode(Point{1.5, "p", {1, 2, 3}}));
  Value("raw_bytes", kBuffer,
        {internal::ValueFormat::kRaw, internal::DType::kNone, std::string("\x00\x01\x02", 3)});
  // ObjectRef<int> as ObjectRef's msgpack adaptor packs it: [id, owner id, owner address].
  std::string ref;
  internal::StringWriter writer{&ref};
  msgpack::packer<internal::StringWriter> packer(writer);
  packer.pack_array(3);
  packer.pack_bin(20);
  packer.pack_bin_body(std::string(20, '\5').data(), 20);
  packer.pack_bin(8);
  packer.pack_bin_body("WORKER01", 8);
  packer.pack(std::string("/tmp/raio/owner.sock"));
  Value("object_ref", kObjectRef, {internal::ValueFormat::kMsgpack, internal::DType::kNone, ref});
  Value("vector_of_object_refs", kVectorObjectRef,
        {internal::ValueFormat::kMsgpack, internal::DType::kNone, "\x92" + ref + ref});
}

}  // namespace
}  // namespace raio::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  raio::fuzz::g_root = argv[1];
  raio::fuzz::FrameSeeds();
  raio::fuzz::MessageSeeds();
  raio::fuzz::ValueSeeds();
  return 0;
}
