// DependencyResolver: calls wait for their ObjectRef arguments by task id, so a call
// cancelled while it waits is forgotten, and the objects it waited for neither resolve it
// nor any later call (the use-after-free of pointer-linked entries cannot recur).
#include "raio/worker/dependency_resolver.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace raio::worker {
namespace {

class DependencyResolverTest : public ::testing::Test {
 protected:
  DependencyResolverTest()
      : table_({[this](const ObjectId& id, ObjectEntry&) { freed_.push_back(id); }, nullptr}),
        resolver_(table_) {}

  // An owned object, not ready, with one local reference.
  ObjectId NewObject() {
    ObjectId id = RandomId<ObjectId>();
    table_.Create(id, 1);
    return id;
  }
  void MakeReady(const ObjectId& id, const std::string& bytes) {
    auto keep = std::make_shared<const std::string>(bytes);
    resolver_.OnObjectsReady(table_.SetValue(
        id, internal::ValueView{internal::ValueFormat::kRaw, internal::DType::kNone, *keep, keep}));
  }
  // Resolves one plain ref argument at index 0 of `task`, recording the outcome.
  void Resolve(const TaskId& task, const ObjectId& arg, std::optional<ResolvedArgs>* out) {
    resolver_.Resolve(task, "f", {RefArg{0, {arg}, false}},
                      [out](ResolvedArgs r) { *out = std::move(r); });
  }

  std::vector<ObjectId> freed_;
  ObjectTable table_;
  DependencyResolver resolver_;
};

TEST_F(DependencyResolverTest, ResolvesWhenTheArgumentBecomesReady) {
  ObjectId arg = NewObject();
  std::optional<ResolvedArgs> out;
  Resolve(RandomId<TaskId>(), arg, &out);
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(table_.Find(arg)->task_arg_refs, 1);
  MakeReady(arg, "abc");
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->error, nullptr);
  ASSERT_EQ(out->args.size(), 1u);
  EXPECT_EQ(out->args[0].first, 0);
  EXPECT_EQ(out->args[0].second.value(), "abc");
  EXPECT_TRUE(out->kept.empty());                 // inline values are copied in
  EXPECT_EQ(table_.Find(arg)->task_arg_refs, 0);  // and their references dropped
}

TEST_F(DependencyResolverTest, ACancelledCallIsNeverResolvedNorMistakenForALaterOne) {
  ObjectId soon = NewObject(), later = NewObject();
  std::optional<ResolvedArgs> cancelled_out, later_out;
  TaskId cancelled = RandomId<TaskId>();
  Resolve(cancelled, soon, &cancelled_out);
  EXPECT_TRUE(resolver_.Cancel(cancelled));
  EXPECT_EQ(table_.Find(soon)->task_arg_refs, 0);
  // A later call waiting for another object: `soon` becoming ready must not count for it.
  Resolve(RandomId<TaskId>(), later, &later_out);
  MakeReady(soon, "1");
  EXPECT_FALSE(cancelled_out.has_value());
  EXPECT_FALSE(later_out.has_value());
  MakeReady(later, "2");
  ASSERT_TRUE(later_out.has_value());
  EXPECT_EQ(later_out->args.at(0).second.value(), "2");
  EXPECT_FALSE(resolver_.Cancel(cancelled));
  EXPECT_EQ(resolver_.size(), 0u);
}

TEST_F(DependencyResolverTest, AFailedArgumentFailsTheCallAndDropsEveryReference) {
  ObjectId ok = NewObject(), bad = NewObject();
  std::optional<ResolvedArgs> out;
  resolver_.Resolve(RandomId<TaskId>(), "f", {RefArg{0, {ok}, false}, RefArg{1, {bad}, false}},
                    [&out](ResolvedArgs r) { out = std::move(r); });
  MakeReady(ok, "x");
  EXPECT_FALSE(out.has_value());
  auto error = std::make_shared<proto::ErrorInfo>();
  error->set_type(proto::TASK_ERROR);
  error->set_message("boom");
  resolver_.OnObjectsReady(table_.SetError(bad, error));
  ASSERT_TRUE(out.has_value());
  ASSERT_NE(out->error, nullptr);
  EXPECT_EQ(out->error->message(), "boom");
  EXPECT_TRUE(out->args.empty());
  EXPECT_EQ(table_.Find(ok)->task_arg_refs, 0);
  EXPECT_EQ(table_.Find(bad)->task_arg_refs, 0);
}

TEST_F(DependencyResolverTest, StoreObjectsTravelByIdAndStayReferencedAndListsKeepOrder) {
  ObjectId small = NewObject(), big = NewObject();
  resolver_.OnObjectsReady(table_.SetInStore(big));
  std::optional<ResolvedArgs> out;
  // Ready already: resolved inline, within Resolve.
  MakeReady(small, "s");
  resolver_.Resolve(RandomId<TaskId>(), "f", {RefArg{2, {big, small}, true}},
                    [&out](ResolvedArgs r) { out = std::move(r); });
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->args.size(), 1u);
  EXPECT_EQ(out->args[0].first, 2);
  const proto::ArgList& list = out->args[0].second.list();
  ASSERT_EQ(list.elements_size(), 2);
  EXPECT_TRUE(list.elements(0).in_store());
  EXPECT_EQ(list.elements(0).object_id(), big.Binary());
  EXPECT_EQ(list.elements(1).value(), "s");
  ASSERT_EQ(out->kept.size(), 1u);
  EXPECT_EQ(out->kept[0], big);
  EXPECT_EQ(table_.Find(big)->task_arg_refs, 1);
  EXPECT_EQ(table_.Find(small)->task_arg_refs, 0);
}

TEST_F(DependencyResolverTest, AnUnknownArgumentFailsAsLost) {
  std::optional<ResolvedArgs> out;
  Resolve(RandomId<TaskId>(), RandomId<ObjectId>(), &out);
  ASSERT_TRUE(out.has_value());
  ASSERT_NE(out->error, nullptr);
  EXPECT_EQ(out->error->type(), proto::OBJECT_LOST);
  EXPECT_EQ(out->error->function_name(), "f");
}

}  // namespace
}  // namespace raio::worker
