// Shared fixture for the object store tests: a 1 MiB store (a memory file) with a
// spill directory from mkdtemp, plus helpers that write and check byte patterns
// through the store's mapping.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "raio/node/object_store/object_store.h"

namespace raio::testkit {

using node::ObjectInfo;
using node::ObjectLocation;
using node::ObjectState;
using node::ObjectStore;

constexpr uint64_t kCapacity = 1 << 20;
constexpr uint64_t kQuarter = kCapacity / 4;

inline ObjectId Id(uint32_t n) {
  std::string b(ObjectId::kSize, '\0');
  b[0] = static_cast<char>(n & 0xff);
  b[1] = static_cast<char>(n >> 8);
  b[19] = 1;
  return ObjectId::FromBinary(b);
}

inline uint8_t PatternByte(uint64_t i, uint8_t seed) {
  return static_cast<uint8_t>((i * 131 + seed * 7) ^ (i >> 9));
}

inline bool FileExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/raio-object-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    spill_dir_ = tmpl;
    store_ = MakeStore(spill_dir_);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    for (const std::string& name : ListDir(spill_dir_)) unlink((spill_dir_ + "/" + name).c_str());
    rmdir(spill_dir_.c_str());
  }

  static std::unique_ptr<ObjectStore> MakeStore(const std::string& spill_dir,
                                                uint64_t capacity = kCapacity) {
    absl::StatusOr<std::unique_ptr<ObjectStore>> s =
        ObjectStore::Create({.capacity_bytes = capacity, .spill_dir = spill_dir});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  void Fill(ObjectStore& store, ObjectLocation loc, uint8_t seed) {
    for (uint64_t i = 0; i < loc.size; ++i) store.base()[loc.offset + i] = PatternByte(i, seed);
  }
  bool Matches(ObjectStore& store, ObjectLocation loc, uint8_t seed) {
    for (uint64_t i = 0; i < loc.size; ++i) {
      if (store.base()[loc.offset + i] != PatternByte(i, seed)) return false;
    }
    return true;
  }
  // Creates, fills with `seed`'s pattern, seals and unpins an object of client 1.
  ObjectLocation PutSealed(ObjectStore& store, const ObjectId& id, uint64_t size, uint8_t seed) {
    absl::StatusOr<ObjectLocation> loc = store.CreateObject(id, size, 1);
    EXPECT_TRUE(loc.ok()) << loc.status();
    if (!loc.ok()) return {};
    Fill(store, *loc, seed);
    EXPECT_TRUE(store.Seal(id).ok());
    store.Unpin(id, 1);
    return *loc;
  }
  ObjectLocation PutSealed(const ObjectId& id, uint64_t size, uint8_t seed) {
    return PutSealed(*store_, id, size, seed);
  }
  std::optional<ObjectInfo> Info(const ObjectId& id) {
    for (const ObjectInfo& info : store_->List()) {
      if (info.id == id) return info;
    }
    return std::nullopt;
  }
  ObjectState StateOf(const ObjectId& id) {
    std::optional<ObjectInfo> info = Info(id);
    EXPECT_TRUE(info.has_value()) << id.Hex();
    return info ? info->state : ObjectState::kUnsealed;
  }

  std::string spill_dir_;
  std::unique_ptr<ObjectStore> store_;
};

}  // namespace raio::testkit
