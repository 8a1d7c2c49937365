// ObjectTable: references registered on a borrower's behalf by a task's executor count
// only for the task's latest attempt, and are dropped with the borrower.
#include "raio/worker/object_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace raio::worker {
namespace {

class ObjectTableTest : public ::testing::Test {
 protected:
  ObjectTableTest()
      : table_({[this](const ObjectId& id, ObjectEntry&) { freed_.push_back(id); }, nullptr}) {}

  ObjectId NewId() { return RandomId<ObjectId>(); }

  std::vector<ObjectId> freed_;
  ObjectTable table_;
  const WorkerId self_ = RandomId<WorkerId>();
  const WorkerId other_ = RandomId<WorkerId>();
};

TEST_F(ObjectTableTest, LatestAttemptReplacesADeadAttemptsRegistrations) {
  ObjectId obj = NewId(), task = NewId();
  table_.Create(obj, 1);
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, task, 0, 1));
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, task, 0, 1));  // twice in a result
  EXPECT_EQ(table_.Find(obj)->borrowers[other_], 2);
  // Attempt 0 died before replying; attempt 1 registers once: only its count remains.
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, task, 1, 1));
  EXPECT_EQ(table_.Find(obj)->borrowers[other_], 1);
  // A late registration of the dead attempt is ignored.
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, task, 0, 1));
  EXPECT_EQ(table_.Find(obj)->borrowers[other_], 1);
  // The borrower drops its reference, then the owner its own: the object is freed.
  table_.RemoveBorrower(obj, other_, 1);
  EXPECT_TRUE(table_.Find(obj)->on_behalf.empty());
  table_.RemoveLocalRef(obj);
  EXPECT_EQ(freed_, std::vector<ObjectId>{obj});
}

TEST_F(ObjectTableTest, DeadBorrowerLosesItsOnBehalfReferences) {
  ObjectId obj = NewId();
  table_.Create(obj, 0);
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, NewId(), 0, 1));
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, other_, self_, NewId(), 3, 1));
  EXPECT_TRUE(freed_.empty());
  table_.RemoveBorrowerEverywhere(other_);
  EXPECT_EQ(freed_, std::vector<ObjectId>{obj});
}

TEST_F(ObjectTableTest, OwnTaskSettlesItsRegistrations) {
  ObjectId obj = NewId(), task = NewId();
  table_.Create(obj, 1);
  // Our own task's worker registered us (a local reference) and then died.
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, self_, self_, task, 0, 1));
  EXPECT_EQ(table_.Find(obj)->local_refs, 2);
  table_.SettleOnBehalf(task, self_, /*delivered=*/false);
  EXPECT_EQ(table_.Find(obj)->local_refs, 1);
  // A late registration of that attempt is ignored; the retry's counts.
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, self_, self_, task, 0, 1));
  EXPECT_EQ(table_.Find(obj)->local_refs, 1);
  ASSERT_TRUE(table_.AddBorrowerOnBehalf(obj, self_, self_, task, 1, 1));
  EXPECT_EQ(table_.Find(obj)->local_refs, 2);
  // The result arrived: the reference now belongs to it, the bookkeeping is gone.
  table_.SettleOnBehalf(task, self_, /*delivered=*/true);
  EXPECT_EQ(table_.Find(obj)->local_refs, 2);
  EXPECT_TRUE(table_.Find(obj)->on_behalf.empty());
}

TEST_F(ObjectTableTest, OnBehalfRegistrationOfAnUnknownObjectIsRefused) {
  EXPECT_FALSE(table_.AddBorrowerOnBehalf(NewId(), other_, self_, NewId(), 0, 1));
}

}  // namespace
}  // namespace raio::worker
