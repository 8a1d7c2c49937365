// TempDir: a private directory under $TMPDIR (or /tmp) for one test, removed with
// everything in it when the TempDir goes. Short enough for Unix socket paths inside.
// Thread-safety: a plain value; construct and destroy on one thread.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "raio/common/process.h"

namespace raio::testkit {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "test") : path_(MakeTempDir(prefix)) {
    EXPECT_FALSE(path_.empty()) << "cannot create a temporary directory";
  }
  ~TempDir() { RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the directory.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace raio::testkit
